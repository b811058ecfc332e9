"""The skill documents are proven by the tests: front matter, links, generated tables, every fenced shell command,
and every JSON field a document names.

Conventions:
- every ```bash block of a skill doc carries a marker `<!-- doc-test: MODE [LANE] [NAME ...] -->` on the line before;
- MODE `run`: the block runs as one `bash -euo pipefail` script from the repo root, with the venv first on PATH;
  MODE `parse-only`: it is not run, each `python3 scripts/<name>.py ...` command in it must be accepted by that
  script's argparse parser (commands that need a GPU, a gated model or the network);
- LANE `engine` (runs the real engine) or `torch` (imports torch or probes the engine) takes the block out of the
  `make check` lane;
- NAMEs are the block's placeholders: the user's own files (a trace, a report), bound here to real fixtures
  (PLACEHOLDERS). A block uses no other variable unless it sets it itself or gives it a default (`${X:-...}`);
- `KEY=VALUE` words are what a `run` block's JSON output must show, beyond exit 0 (EXPECTATIONS): e.g.
  `change=regressed` (its bench-report.v1 verdict says arm B is slower, its interval above the threshold);
- `same-as=MODULE.NAME` on a parse-only block: an engine test runs that request already (MODULE.NAME is its argv,
  the script's name first), so the block is not run a second time; each of its runs of that script must give only
  options the test gives, value for value (where the output goes and what it is called aside);
- a doc command is a user command: nothing from the test suite or the team's reference folder, no test code;
- a field reference is written `<schema-id>:<path>` in backticks (`env.v1:problems[].code`) and must resolve.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import HF_TOKEN_CANARY, REPO, TEST_FIXTURES
from sgl_diffusion_bench.engine import engine_probe, gpu
from sgl_diffusion_bench.cli import doc_tables
from sgl_diffusion_bench.cli import options_reference

SKILL_DOCS = [REPO / name for name in ("SKILL.md", "benchmark-and-profile.md", "existing-fast-paths.md",
                                       "reference/presets.md", "reference/troubleshooting.md", "reference/options.md",
                                       "reference/evidence-map.md")]
DOCS = [*SKILL_DOCS, REPO / "README.md"]
FENCE = re.compile(r"(?:<!-- doc-test: (?P<marker>[^>]*?) -->\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)```", re.S)
LANES = {"engine": pytest.mark.engine, "torch": pytest.mark.torch}
H200_TRACES = TEST_FIXTURES / "traces-h200"
TP2_TRACES = TEST_FIXTURES / "traces-h200-tp2"
SEED_DUMPS = sorted((TEST_FIXTURES / "seed-pr-38591").glob("*.json"))
# The user's own files that doc commands name in capitals, bound to real recorded ones.
PLACEHOLDERS = {
    "TRACE": next((TEST_FIXTURES / "sglang-0.5.10-h200" / "full_profile").glob("*.trace.json.gz")),
    "TRACE_EAGER": H200_TRACES / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz",
    "TRACE_GRAPH": H200_TRACES / "flux-graph-2_steps-full_stages-global-rank0.trace.json.gz",
    "TRACE_RANK0": TP2_TRACES / "flux-tp2-eager-2_steps-full_stages-global-rank0.trace.json.gz",
    "TRACE_RANK1": TP2_TRACES / "flux-tp2-eager-2_steps-full_stages-global-rank1.trace.json.gz",
    "REPORT": TEST_FIXTURES / "bench-report" / "example.json",
    "EAGER_DUMPS": " ".join(str(d) for d in SEED_DUMPS if d.name.endswith("eager.json")),
    "BCG_DUMPS": " ".join(str(d) for d in SEED_DUMPS if d.name.endswith("bcg.json")),
    "DUMP_A": TEST_FIXTURES / "sglang-0.5.10-h200" / "full_plain" / "perf.json",
    "DUMP_B": TEST_FIXTURES / "sglang-0.5.10-h200" / "full_profile" / "perf.json",
    "NIGHTLY_CONFIG": TEST_FIXTURES / "nightly" / "comparison_configs.json",
    "SPEC": REPO / "scripts" / "sgl_diffusion_bench" / "data" / "sample_sweep.yaml",  # parse-only: needs a cluster
    "SWEEP": REPO / "outputs" / "sweep",
}
SHELL_VARS = {"PATH", "HOME", "?"}  # set by the shell or the user's session
NOT_USER_COMMANDS = re.compile(r"\.\./shared|tests/|python3? -c|\bassert\b|\btest -[a-z] ")
FIELD_REF = re.compile(r"`(?P<schema>[a-z][a-z0-9-]*\.v[0-9]+):(?P<path>[A-Za-z0-9_.\[\]-]+)`")
TABLE_ROW = re.compile(r"(?m)^\|.*\|\s*`(?P<schema>[a-z][a-z0-9-]*\.v[0-9]+)`\s*\|(?P<read>[^|\n]*)\|\s*$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
CLI_MODULES = {name.removesuffix(".py"): module for name, module in options_reference.entry_points().items()}


# What a block's JSON (stdout) must show, by marker word KEY=VALUE; filled by blocks().
EXPECTATIONS = {
    "change": lambda doc, value: doc["summary"]["comparison"]["verdict"] == value,
}
EXPECTED: dict[tuple[Path, str], dict[str, str]] = {}
SAME_AS: dict[tuple[Path, str], str] = {}  # a parse-only block's `same-as=` word: the engine test that runs it
USER_NAMED = {"--label", "--out", "--output-dir", "--folder", "--json"}  # where the output goes, what it is called


def blocks(doc: Path, lang: str = "bash"):
    text = doc.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        if match["lang"] == lang:
            line = text[: match.start()].count("\n") + 1
            words = (match["marker"] or "").split()
            pairs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            if "same-as" in pairs:
                SAME_AS[(doc, match["body"])] = pairs.pop("same-as")
            EXPECTED[(doc, match["body"])] = pairs
            lanes = [LANES[w] for w in words[1:] if w in LANES]
            yield pytest.param(doc, words[0] if words else None, tuple(w for w in words[1:] if w.isupper()),
                               match["body"], id=f"{doc.relative_to(REPO)}:{line}", marks=lanes)


ALL_BLOCKS = [p for doc in SKILL_DOCS for p in blocks(doc)]


def variables_used(body: str) -> set[str]:
    """Variables a block reads without setting them itself or giving them a default."""
    assigned = set(re.findall(r"(?m)^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", body))
    assigned |= set(re.findall(r"\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b", body))
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|\?)(?![A-Za-z0-9_]*:-)", body))
    return used - assigned - SHELL_VARS


def test_front_matter_follows_the_skill_spec():
    text = (REPO / "SKILL.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n", 2)[1])
    assert set(front) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", front["name"]) and len(front["name"]) <= 64
    assert front["name"] == "sglang-diffusion-benchmark-profile"
    assert 50 < len(front["description"]) <= 1024 and "Use this skill" in front["description"]
    assert len(text.splitlines()) < 250, "SKILL.md stays short; details go one link away"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve_with_exact_case(doc):
    for match in LINK.finditer(doc.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path = doc.parent
        for part in Path(target).parts:
            if part == "..":
                path = path.parent
                continue
            names = os.listdir(path) if path.is_dir() else []
            assert part in names, f"{doc.name}: link {target} does not resolve (exact case) at {path}"
            path = path / part


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_a_doc_links_to_exists():
    headings = {doc.resolve(): {_slug(h) for h in re.findall(r"(?m)^#+ (.*)$", doc.read_text(encoding="utf-8"))}
                for doc in DOCS}
    for doc in DOCS:
        for match in re.finditer(r"\]\((?P<target>[^)#\s]*)#(?P<anchor>[^)]+)\)", doc.read_text(encoding="utf-8")):
            target = (doc.parent / match["target"]).resolve() if match["target"] else doc.resolve()
            if target in headings:
                assert match["anchor"] in headings[target], f"{doc.name}: no heading for #{match['anchor']}"
    assert _slug("## 3.4 Profile: profile_diffusion.py".lstrip("# ")) == "34-profile-profile_diffusionpy"


def test_the_options_reference_says_what_every_option_does():
    """reference/options.md is generated from the parsers; an option without help text would be an empty row."""
    rows = [line for line in (REPO / "reference" / "options.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]
    assert {"| `--campaign` |", "| `--all-stages` |", "| `--baseline` |"} <= {r[: r.index(" |", 2) + 2] for r in rows}
    assert [r for r in rows if not r.strip()[1:-1].split(" | ")[-1].strip()] == []
    # the same on every machine: no default that depends on who or where renders it
    machine = {str(Path.home()), str(REPO), str(gpu.default_lock_dir())}
    assert [r for r in rows if any(m in r for m in machine)] == []


def test_generated_tables_match_the_data():
    stale = doc_tables.sync_docs(REPO, write=False)
    assert stale == {}, f"regenerate: PYTHONPATH=scripts python3 -m sgl_diffusion_bench.cli.doc_tables --write " \
        f"({stale})"
    text = "".join(d.read_text() for d in [*DOCS, REPO / "CONTRIBUTING.md"])
    for name in doc_tables.RENDERERS:
        assert f"<!-- BEGIN GENERATED: {name} -->" in text, f"no generated block {name} in the docs"


def test_every_script_is_in_the_readme_list_and_the_options_reference():
    """Both lists come from scripts/*.py itself: a new script shows up in them, or the generated-tables check fails."""
    scripts = sorted(p.name for p in (REPO / "scripts").glob("*.py"))
    assert len(scripts) >= 10 and sorted(options_reference.entry_points()) == scripts
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    listed = readme.split("<!-- BEGIN GENERATED: scripts -->\n")[1].split("<!-- END GENERATED: scripts -->")[0]
    assert listed == options_reference.render_script_list() + "\n"
    options = (REPO / "reference" / "options.md").read_text(encoding="utf-8")
    for name, module in options_reference.entry_points().items():
        assert f"| `{name}` |" in listed, f"README's script list lacks {name}"
        section = options.split(f"\n## {name}\n", 1)
        assert len(section) == 2, f"reference/options.md has no section ## {name}"
        assert f"<!-- BEGIN GENERATED: options-{module} -->" in section[1].split("\n## ", 1)[0], \
            f"reference/options.md's section {name} lacks its generated options-{module} table"


def test_user_docs_carry_no_run_history_and_the_readme_fits_a_first_read():
    """Users read what the tool does and how; run history and commit hashes live in benchmarks/results/."""
    commit = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    for doc in [*DOCS, REPO / "reference" / "reliability.md"]:
        found = commit.findall(doc.read_text(encoding="utf-8"))
        assert not found, f"{doc.name} names commits {found[:3]}: history belongs in benchmarks/results/"
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 120


def test_a_script_that_runs_no_cli_module_is_refused(tmp_path):
    (tmp_path / "good.py").write_text("from sgl_diffusion_bench.cli.bench import main\n")
    assert options_reference.entry_points(tmp_path) == {"good.py": "bench"}
    (tmp_path / "stray.py").write_text("print('hello')\n")
    with pytest.raises(ValueError, match="stray.py runs no"):
        options_reference.entry_points(tmp_path)


def _resolve(schema: dict, path: str, root: dict, schema_id: str) -> None:
    """Walk ``path`` through the schema, following $ref (also into other schema files), items and properties."""
    node = schema
    for token in re.findall(r"[^.\[\]]+|\[\]", path):
        node, root = _deref(node, root)
        if token == "[]":
            assert "items" in node, f"{schema_id}:{path}: {token} on a non-array"
            node = node["items"]
            continue
        found = None
        for cand in [node, *[s for key in ("oneOf", "anyOf", "allOf") for s in node.get(key, [])]]:
            cand, cand_root = _deref(cand, root)
            if token in cand.get("properties", {}):
                found, root = cand["properties"][token], cand_root
                break
            if isinstance(cand.get("additionalProperties"), dict):
                found, root = cand["additionalProperties"], cand_root
        assert found is not None, f"{schema_id}:{path}: no field {token!r}"
        node = found


def _deref(node: dict, root: dict) -> tuple[dict, dict]:
    """The node with its $ref chain merged in, and the document that local refs inside it now refer to."""
    while "$ref" in node:
        file, _, pointer = node["$ref"].partition("#")
        if file:
            root = json.loads((REPO / "schemas" / file).read_text())
        target = root
        for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
            target = target[part]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest, "properties": {**target.get("properties", {}), **rest.get("properties", {})}}
    return node, root


def field_references(text: str) -> list[tuple[str, str]]:
    """(schema, path) of every field a doc names: `schema.v1:path` inline, and in a table row whose cell before
    last is one `schema.v1`, every backticked path of its last cell (SKILL.md names each schema once, there)."""
    refs = [(m["schema"], m["path"]) for m in FIELD_REF.finditer(text)]
    for row in TABLE_ROW.finditer(text):
        refs += [(row["schema"], path) for path in re.findall(r"`([A-Za-z0-9_.\[\]-]+)`", row["read"])]
    return refs


@pytest.mark.parametrize("doc", SKILL_DOCS, ids=lambda p: p.name)
def test_every_field_reference_exists_in_its_schema(doc):
    refs = field_references(doc.read_text(encoding="utf-8"))
    for schema, path in refs:
        schema_file = REPO / "schemas" / f"{schema}.schema.json"
        assert schema_file.is_file(), f"{doc.name}: {schema}:{path} cites a schema that does not exist"
        root = json.loads(schema_file.read_text())
        _resolve(root, path, root, schema)
    if doc.name == "SKILL.md":
        assert len(refs) >= 40, "SKILL.md names the fields each step's output feeds to the next"
        assert not list(FIELD_REF.finditer(doc.read_text(encoding="utf-8"))), \
            "SKILL.md names each schema once, in its table: write the field's path alone"


def _option_pairs(argv) -> set[tuple[str, str | None]]:
    """(option, value) of an argv (`--x=v`, or `--x v` where v is no option or a quoted string of several words, as
    `--candidate-args '--log-level info'`), a repo-relative path value made absolute; user-named options left out."""
    pairs, words = set(), list(argv)
    while words:
        option, _, value = words.pop(0).partition("=")
        if not option.startswith("--"):
            continue
        if not value and words and (not words[0].startswith("--") or " " in words[0]):
            value = words.pop(0)
        if option not in USER_NAMED:
            pairs.add((option, str(REPO / value) if value and (REPO / value).exists() else value or None))
    return pairs


def _runs_of(body: str, script: str, subcommand: str | None) -> list[list[str]]:
    """The block's commands that run ``script`` (its ``subcommand``), plans (``--dry-run``) left out."""
    runs = [args for name, args in _script_commands(body) if name == script and "--dry-run" not in args]
    return [args for args in runs if subcommand is None or args[:1] == [subcommand]]


SAME_AS_BLOCKS = [p for p in ALL_BLOCKS if (p.values[0], p.values[3]) in SAME_AS]


@pytest.mark.parametrize("doc, mode, placeholders, body", SAME_AS_BLOCKS)
def test_a_block_an_engine_test_runs_is_that_tests_request(doc, mode, placeholders, body):
    """A CPU block that an engine test already runs (killed, resumed, verified, reproduced ...) is parse-only, so the
    engine lane does not run the same request twice; its options are the test's own, value for value."""
    assert mode == "parse-only", "a block an engine test runs is parse-only"
    module_name, name = SAME_AS[(doc, body)].split(".")
    request = list(getattr(importlib.import_module(module_name), name))
    script, rest = request[0], request[1:]
    subcommand = rest[0] if rest and not rest[0].startswith("--") else None
    runs = _runs_of(body, script, subcommand)
    assert runs, f"the block runs no {script} {subcommand or ''}"
    for args in runs:
        extra = _option_pairs(args) - _option_pairs(rest)
        assert not extra, f"{module_name}.{name} does not give {sorted(extra, key=str)}"


def test_a_block_that_adds_an_option_the_engine_test_lacks_is_caught():
    manifest = "scripts/sgl_diffusion_bench/data/sample_requests.jsonl"
    test_request = ["--model", "tiny-flux-cpu", "--requests-file", str(REPO / manifest)]
    same = ["--model", "tiny-flux-cpu", "--label", "mine", "--json", "--requests-file", manifest]
    assert _option_pairs(same) <= _option_pairs(test_request)
    assert _option_pairs(["--model", "tiny-flux-cpu", "--rounds", "3"]) - _option_pairs(test_request) == \
        {("--rounds", "3")}
    assert _option_pairs(["--candidate-args", "--log-level info", "--arm-b-args=--x 1", "--report"]) == \
        {("--candidate-args", "--log-level info"), ("--arm-b-args", "--x 1"), ("--report", None)}
    assert _runs_of("python3 scripts/profile_diffusion.py --model m --dry-run --json\n"
                    "python3 scripts/profile_diffusion.py --model m --json\n", "profile_diffusion", None) == \
        [["--model", "m", "--json"]]


def test_a_field_table_row_is_checked_against_its_schema():
    refs = field_references("| campaign | `x.py` | `bench-report.v1` | `ok`, `cells[].status` |\n")
    assert refs == [("bench-report.v1", "ok"), ("bench-report.v1", "cells[].status")]
    root = json.loads((REPO / "schemas" / "bench-report.v1.schema.json").read_text())
    with pytest.raises((AssertionError, KeyError)):
        _resolve(root, "cells[].no_such_field", root, "bench-report.v1")


def _script_commands(body: str):
    joined = re.sub(r"\\\n\s*", " ", body)
    for line in joined.splitlines():
        line = line.strip()
        m = re.match(r"(?:\S+=\S+\s+)*python3\s+scripts/(?P<name>[a-z_]+)\.py(?P<rest>.*)$", line)
        if m:
            yield m["name"], shlex.split(m["rest"].split(" | ")[0].split(" > ")[0], comments=True)


@pytest.mark.parametrize("doc, mode, placeholders, body", ALL_BLOCKS)
def test_every_block_is_a_user_command_with_declared_placeholders(doc, mode, placeholders, body):
    assert mode in ("run", "parse-only"), f"a block needs a marker <!-- doc-test: run|parse-only ... --> ({mode!r})"
    assert not NOT_USER_COMMANDS.search(body), "a doc command names test files or test code"
    assert variables_used(body) == set(placeholders), "declare the block's placeholders in its marker, or set them"
    assert set(placeholders) <= set(PLACEHOLDERS), "bind every placeholder in PLACEHOLDERS"
    assert set(EXPECTED[(doc, body)]) <= set(EXPECTATIONS), "an expectation word names no known check"
    assert not EXPECTED[(doc, body)] or mode == "run", "only a block that runs can show what it expects"


def test_the_placeholder_check_sees_undeclared_and_optional_variables():
    assert variables_used('OUT=x\necho "$OUT" $TRACE ${REPORT} ${WORK:-/tmp} $?') == {"TRACE", "REPORT"}
    assert variables_used('for s in a b; do echo "$s"; done\necho "$DIFFUSION_BENCH_WORKDIR/x"') == \
        {"DIFFUSION_BENCH_WORKDIR"}


@pytest.fixture(scope="session")
def doc_caches(tmp_path_factory) -> Path:
    """One engine probe and one tiny model for every doc block (each block gets a fresh work root)."""
    return tmp_path_factory.mktemp("doc-caches")


@pytest.mark.parametrize("doc, mode, placeholders, body", ALL_BLOCKS)
def test_documented_commands_run(doc, mode, placeholders, body, tmp_path, doc_caches):
    if mode == "parse-only":
        commands = list(_script_commands(body))
        assert commands, "a parse-only block must hold at least one of our scripts"
        for name, argv in commands:
            module = importlib.import_module(f"sgl_diffusion_bench.cli.{CLI_MODULES[name]}")
            module.build_parser().parse_args(argv)  # raises UsageError if argparse rejects it
        return
    assert mode == "run", f"unknown doc-test mode {mode!r}"
    work, probe_cache = tmp_path / "work", doc_caches / engine_probe.CACHE_FILE_NAME
    block_probe = work / ".cache" / engine_probe.CACHE_FILE_NAME
    block_probe.parent.mkdir(parents=True)
    if probe_cache.exists():
        shutil.copy(probe_cache, block_probe)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               DIFFUSION_BENCH_WORKDIR=str(work), DIFFUSION_BENCH_TINY_MODEL_DIR=str(doc_caches / "tiny-models"),
               HF_TOKEN=HF_TOKEN_CANARY, **{name: str(PLACEHOLDERS[name]) for name in placeholders})
    before = _untracked()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, \
        f"{doc.name} block failed ({proc.returncode}):\n{body}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert HF_TOKEN_CANARY not in proc.stdout + proc.stderr
    assert _untracked() == before, "a documented command wrote files into the checkout"
    for key, value in EXPECTED[(doc, body)].items():
        shown = json.loads(proc.stdout)
        assert EXPECTATIONS[key](shown, value), (key, value, json.dumps(shown.get("summary"), indent=1)[:3000])
    if block_probe.exists() and not probe_cache.exists():
        shutil.copy(block_probe, probe_cache)


def _untracked() -> set[str]:
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True,
                         text=True)
    return set(out.stdout.split())
