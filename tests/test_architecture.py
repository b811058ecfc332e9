"""The package's shape: no import cycle between its modules, no module grown past what one reader can hold, and a
refusal that loads nothing heavy."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS
from sgl_diffusion_bench import error_codes, package_order

PACKAGE = SCRIPTS / "sgl_diffusion_bench"
MAX_MODULE_LINES = 450


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SCRIPTS).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Module -> package modules it imports, counting imports inside functions too (a lazy import is still a tie)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert graph["sgl_diffusion_bench.presets"] >= {"sgl_diffusion_bench.assets", "sgl_diffusion_bench.datafile"}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def oversized(modules: dict[str, Path]) -> dict[str, int]:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()}
    return {name: size for name, size in sizes.items() if size > MAX_MODULE_LINES}


def _relative(module: str) -> str:
    """``sgl_diffusion_bench.evidence.verify`` as package_order names it: ``evidence/verify``."""
    return module.partition(".")[2].replace(".", "/") or "__init__"


def test_every_module_has_one_place_in_the_package_order():
    order = package_order.load()
    unplaced = sorted(m for m in _modules() if order.place(_relative(m)) is None)
    assert unplaced == []
    listed = [m for layer in order.layers for mods in (layer.get("rooms") or {"": layer.get("modules")}).values()
              for m in mods]
    existing = {_relative(m) for m in _modules()} | {_relative(m).split("/")[0] + "/" for m in _modules()}
    assert len(listed) == len(set(listed)) and set(listed) <= existing  # each once, none that is gone


def test_imports_follow_the_package_order():
    order = package_order.load()
    wrong = sorted((_relative(a), _relative(b)) for a, targets in import_graph().items() for b in targets
                   if not order.allows(order.place(_relative(a)), order.place(_relative(b))))
    assert wrong == [], "an import up the layers or between peer rooms; see data/package_order.yaml"


def test_the_order_check_refuses_an_upward_and_a_sideways_import():
    order = package_order.load()
    modules = ("results/stats", "cli/bench", "evidence/verify", "sweep/merge")
    stats, cli, evidence, sweep = (order.place(m) for m in modules)
    assert order.allows(cli, stats) and not order.allows(stats, cli)
    assert not order.allows(evidence, sweep) and not order.allows(sweep, evidence)


PUBLIC_DESPITE_UNDERSCORE = {"os._exit"}  # documented API of the standard library (docs.python.org: os._exit)


def private_reads(modules: dict[str, Path] | None = None) -> set[str]:
    """'module: expression' for every read of another object's private member and every private name imported
    from another module (a package-private module imported by its siblings is its package's own)."""
    found = set()
    for name, path in (_modules() if modules is None else modules).items():
        module = _relative(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    and ast.unparse(node) not in PUBLIC_DESPITE_UNDERSCORE:
                found.add(f"{module}: {ast.unparse(node.value)}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE.name)):
                sibling_modules = {p.stem for p in path.parent.glob("_*.py")} if node.level == 1 and not node.module \
                    else set()
                found |= {f"{module}: import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and a.name not in sibling_modules}
    return found


def test_private_members_are_read_only_where_the_allow_list_says_and_it_only_shrinks():
    allowed, found = package_order.load().private_access, private_reads()
    assert sorted(found - allowed) == [], "a new read of a private member: make it public or keep it inside"
    assert sorted(allowed - found) == [], "gone from the code: take it off private_access in package_order.yaml"


def test_the_private_member_check_finds_a_read_and_a_cross_module_import(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import os\nfrom sgl_diffusion_bench.fileio import _helper\n\n\nclass A:\n"
                      "    def f(self, runner):\n        os._exit(0)\n        return self._mine, runner._theirs\n")
    found = private_reads({"sgl_diffusion_bench.sneaky": sneaky})
    assert found == {"sneaky: runner._theirs", "sneaky: import _helper"}


def test_no_module_is_over_the_size_limit(tmp_path):
    assert oversized(_modules()) == {}
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized({"long": long, "short": PACKAGE / "__init__.py"}) == {"long": MAX_MODULE_LINES + 1}


# --- engine/inside/: what runs in the engine's interpreter ------------------------------------------------------

INSIDE = PACKAGE / "engine" / "inside"
ENGINE_STACK = {"sglang", "torch"}  # what the engine's interpreter has besides the standard library


def imported_roots(path: Path) -> set[str]:
    """The top-level names a file imports anywhere in it (relative imports as '.')."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            roots.add("." if node.level else (node.module or "").split(".")[0])
    return roots


def test_code_inside_the_engine_imports_only_the_standard_library_and_the_engine_stack():
    siblings = {p.stem for p in INSIDE.rglob("*.py")}  # sitecustomize imports its sibling as a top-level module
    files = sorted(INSIDE.rglob("*.py"))
    assert {"warm_driver", "sgl_cpu_adapter", "sitecustomize"} <= {p.stem for p in files}
    for path in files:
        foreign = imported_roots(path) - set(sys.stdlib_module_names) - ENGINE_STACK - siblings
        assert not foreign, f"{path.relative_to(PACKAGE)} imports {sorted(foreign)}"
    # and at load time, in an interpreter with no site-packages at all (-S): nothing but the standard library
    proc = subprocess.run([sys.executable, "-I", "-S", "-c",
                           "import sys; sys.path[:0] = sys.argv[1:]; import sgl_cpu_adapter, warm_driver",
                           str(INSIDE / "cpu_adapter"), str(INSIDE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_inside_check_sees_a_package_import(tmp_path):
    leaky = tmp_path / "leaky.py"
    leaky.write_text("import os\nfrom sgl_diffusion_bench import paths\nfrom . import x\n\ndef f():\n    import yaml\n")
    assert imported_roots(leaky) == {"os", "sgl_diffusion_bench", ".", "yaml"}


# --- a refusal comes before anything heavy is loaded ------------------------------------------------------------

HEAVY = ("torch", "sglang", "numpy", "PIL", "skimage")
REFUSE_TWICE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from sgl_diffusion_bench.cli import bench
out = sys.argv[2]
codes = [bench.main(["--model", "tiny-flux-cpu", "--campaign", "ab", "--engine-capabilities", "recent", "--output-dir",
                     out, "--json"]),
         bench.main(["--model", "flux", "--label", "gated", "--engine-capabilities", "recent", "--output-dir", out,
                     "--json"])]
print(json.dumps({"codes": codes, "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3:]))}))
"""


def test_a_refused_run_loads_no_torch_and_no_numpy(tmp_path):
    """Two refusals in one real process (a usage error, and a gated model without a token: exit 3 after planning)
    import none of the heavy libraries: what a user waits for before being told no is the package itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    proc = subprocess.run([sys.executable, "-c", REFUSE_TWICE, str(SCRIPTS), str(tmp_path / "out"), *HEAVY],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**env, "HF_HOME": str(tmp_path / "hf")})
    decoder, docs, text = json.JSONDecoder(), [], proc.stdout.strip()
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].strip()
    assert [d.get("error", {}).get("code") for d in docs[:2]] == ["usage.ab_needs_arms", "hf.gated_no_token"], \
        proc.stderr[-2000:]
    assert docs[2] == {"codes": [2, 3], "heavy": []}
    assert not (tmp_path / "out").exists()


# --- error codes: the registry (data/error_codes.yaml) and the codes the package raises ---------------------------

ERROR_CLASSES = ("Error", "Violation", "__init__")  # ToolError and subclasses; a subclass passes its code to __init__


CODE = re.compile(r"[a-z][a-z_]*\.[a-z0-9_]+")
CODE_TAKING_READERS = ("load_json", "load_yaml", "read_text", "read_bytes", "open_regular")  # inputs.py: (path, code)


def codes_raised() -> dict[str, list[str]]:
    """Every code passed as the first argument of an error constructor in the package, or as the code of one of
    inputs' readers (a literal, or a module-level constant such as ``datafile.DATA_FILE_INVALID``), with where."""
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in _modules().items()}
    constants = {target.id: node.value.value for tree in trees.values() for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and isinstance(node.value.value, str) and CODE.fullmatch(node.value.value)
                 for target in node.targets if isinstance(target, ast.Name)}
    found: dict[str, list[str]] = {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in CODE_TAKING_READERS and len(node.args) > 1:
                argument = node.args[1]  # inputs' readers raise InputError(code, ...) with the code they are given
            elif func.endswith(ERROR_CLASSES):
                argument = node.args[0]
            else:
                continue
            for part in ast.walk(argument):
                ref = part.id if isinstance(part, ast.Name) else part.attr if isinstance(part, ast.Attribute) else None
                value = part.value if isinstance(part, ast.Constant) else constants.get(ref)
                if isinstance(value, str) and CODE.fullmatch(value):
                    found.setdefault(value, []).append(f"{name}:{node.lineno}")
    return found


def test_every_raised_error_code_is_in_the_registry_and_no_other():
    raised, registered = codes_raised(), error_codes.all_codes()
    assert {"input.trace_corrupt", "input.perf_dump_invalid", "usage.invalid_arguments"} <= set(raised)
    assert {c: w for c, w in raised.items() if c not in registered} == {}, "add these to data/error_codes.yaml"
    assert registered - set(raised) == set(), "these codes are no longer raised: remove them from the registry"


# --- one vocabulary: every enumerated value our documents use is lowercase snake_case ----------------------------

# Values that are someone else's names keep their spelling: engine flags, environment variables, engine releases,
# local model builders, and dotted field paths.
FOREIGN_VALUE = re.compile(r"--[a-z-]+|[A-Z][A-Z0-9_]+|sglang-\d+\.\d+(\.\d+)?|tiny-[a-z0-9]+(-[a-z0-9]+)*"
                           r"|[a-z_]+(\.[a-z_]+)+")


def enumerated_values() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def walk(node, schema_id: str) -> None:
        if isinstance(node, dict):
            for value in node.get("enum", []):
                if isinstance(value, str):
                    found.setdefault(value, set()).add(schema_id)
            for child in node.values():
                walk(child, schema_id)
        elif isinstance(node, list):
            for child in node:
                walk(child, schema_id)

    for path in sorted((SCRIPTS.parent / "schemas").glob("*.schema.json")):
        walk(json.loads(path.read_text(encoding="utf-8")), path.name)
    return found


def test_enumerated_values_are_snake_case():
    values = enumerated_values()
    assert {"no_significant_change", "insufficient_data", "valid", "process_rss"} <= set(values)
    odd = {v: sorted(s) for v, s in values.items()
           if not re.fullmatch(r"[a-z0-9_]+", v) and not FOREIGN_VALUE.fullmatch(v)}
    assert odd == {}, "enumerated values are lowercase snake_case (CONTRIBUTING.md, 'One vocabulary')"


def test_every_script_is_a_console_script_of_the_wheel():
    """The wheel's self-test (.ci/wheel-selftest) runs every console script; each scripts/*.py must be one."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    declared = set(tomllib.loads((SCRIPTS.parent / "pyproject.toml").read_text())["project"]["scripts"].values())
    wrapped = {f"{m[1]}:main" for p in SCRIPTS.glob("*.py")
               if (m := re.search(r"from (sgl_diffusion_bench\.cli\.\w+) import main", p.read_text()))}
    assert wrapped and wrapped == declared
