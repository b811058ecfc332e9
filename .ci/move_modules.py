"""Move top-level modules of the package into a room (a subpackage) and rewrite every reference to them.

    python3 .ci/move_modules.py ROOM MODULE[=NEW_NAME] [...]   # e.g. results stats report; campaign campaign=design

What it does, in order, so it can be re-run after a partial move (a module already in ROOM is left where it is):
1. ``git mv`` each ``scripts/sgl_diffusion_bench/MODULE.py`` to ``ROOM/NEW_NAME.py`` (NEW_NAME defaults to MODULE;
   a module named like its room must be renamed), creating ``ROOM/__init__.py``;
2. replaces ``sgl_diffusion_bench.MODULE`` and ``sgl_diffusion_bench/MODULE.py`` in every text file of the
   repository (monkeypatch targets, ``-m`` names, docs, absolute imports of names from the module);
3. rewrites every ``from ... import ...`` statement in the package, tests, benchmarks and .ci that names a moved
   module (or is inside one), resolving relative imports first and writing them back relative inside the package,
   absolute outside it, aliases kept (a renamed module is bound to its old name: ``design as campaign``).
The package-order table (data/package_order.yaml) is edited by hand: a move adds its room's row in the same commit.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "sgl_diffusion_bench"
PACKAGE_DIR = REPO / "scripts" / PACKAGE
CODE_DIRS = ("scripts", "tests", "benchmarks", ".ci")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".toml", ".json", ".txt", ".sh", ""}
LINE_LIMIT = 120
STRING_IMPORT = re.compile(rf"^from (?P<source>{PACKAGE}(?:\.\w+)*) import (?P<names>\w+(?:, \w+)*)"
                           r"(?P<trail>\s*(?:#.*)?)$")


def module_of(path: Path) -> str | None:
    """The dotted module a file of the package is (``sgl_diffusion_bench.serving.run``), None outside it."""
    try:
        rel = path.resolve().relative_to(PACKAGE_DIR.parent)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str | None:
    module = module_of(path)
    if module is None:
        return None
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def resolve(node: ast.ImportFrom, package: str | None) -> str:
    if not node.level:
        return node.module or ""
    if package is None:  # a relative import outside the package names nothing of ours
        return ""
    base = package.split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def relative(target_package: str, from_package: str | None) -> str:
    """``target_package`` as written in an import from a module of ``from_package`` (absolute outside the package)."""
    if from_package is None:
        return target_package
    here, there = from_package.split("."), target_package.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def statement(source: str, names: list[str], indent: str) -> str:
    """``from SOURCE import a, b`` wrapped in parentheses under the line limit."""
    one = f"{indent}from {source} import {', '.join(names)}"
    if len(one) <= LINE_LIMIT:
        return one
    head = f"{indent}from {source} import ("
    lines, line = [], head
    for i, name in enumerate(names):
        piece = name + (", " if i < len(names) - 1 else ")")
        if len(line) + len(piece.rstrip()) > LINE_LIMIT:
            lines.append(line.rstrip())
            line = " " * len(head) + piece
        else:
            line += piece
    lines.append(line)
    return "\n".join(lines)


def rewrite_imports(path: Path, moved: dict[str, str], old_package: str | None) -> bool:
    """Rewrite the import statements of ``path`` (now at its new place) that touch ``moved`` (old dotted -> new);
    ``old_package`` is the package the file was in before the move (its relative imports were written from there)."""
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    new_package = package_of(path)
    lines = text.split("\n")
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        source = resolve(node, old_package)
        if not source.startswith(PACKAGE):
            continue
        groups: dict[str, list[str]] = {}
        changed = old_package != new_package and node.level > 0
        for alias in node.names:
            spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
            full = f"{source}.{alias.name}"
            if full in moved:  # from package import module
                parent, name = moved[full].rsplit(".", 1)
                bound = alias.asname or (alias.name if name != alias.name else None)
                groups.setdefault(parent, []).append(name + (f" as {bound}" if bound else ""))
                changed = changed or parent != source
            elif full in moved.values():  # a module already in its room (a re-run)
                groups.setdefault(source, []).append(spelled)
            elif source in moved:  # from module import name
                groups.setdefault(moved[source], []).append(spelled)
                changed = True
            else:
                groups.setdefault(source, []).append(spelled)
        if not changed:
            continue
        first = lines[node.lineno - 1]
        indent = first[:len(first) - len(first.lstrip())]
        absolute = node.level == 0
        trailing = lines[node.end_lineno - 1][node.end_col_offset:]  # a comment after it (a noqa) stays on each
        rendered = []
        for src, names in sorted(groups.items()):
            first_line, *rest = statement(src if absolute else relative(src, new_package),
                                          sorted(names, key=str.lower), indent).split("\n")
            rendered += [first_line + trailing, *rest]
        edits.append((node.lineno - 1, node.end_lineno, "\n".join(rendered)))
    covered = {i for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
               for i in range(node.lineno - 1, node.end_lineno)}
    for i, line in enumerate(lines):  # import lines inside strings (code a test runs with ``python -c``)
        indent = line[:len(line) - len(line.lstrip())]
        parts = [STRING_IMPORT.match(part) for part in line.strip().split("; ")]
        if i in covered or not all(parts) or not any(m["source"] in (PACKAGE, *moved) for m in parts):
            continue
        groups = {}
        for match in parts:
            for name in (n.strip() for n in match["names"].split(",")):
                full = f"{match['source']}.{name}"
                target = moved[full].rsplit(".", 1) if full in moved else (match["source"], name) if (
                    full in moved.values() or match["source"] not in moved) else (moved[match["source"]], name)
                groups.setdefault(target[0], []).append(target[1])
        edits.append((i, i + 1, indent + "; ".join(f"from {src} import {', '.join(names)}"
                                                   for src, names in groups.items()) + parts[-1]["trail"]))
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start:end] = replacement.split("\n")
    if not edits:
        return False
    path.write_text("\n".join(lines), encoding="utf-8")
    return True


def _rewritten(path: Path) -> bool:
    """A top-level module never imports ``from ..``: one that does was rewritten for its room already."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.ImportFrom) and n.level > 1 for n in ast.walk(tree))


def text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / p for p in listed.splitlines() if Path(p).suffix in TEXT_SUFFIXES and (REPO / p).is_file()
            and (Path(p).suffix == ".py" or not p.startswith("tests/fixtures/"))]  # recorded outputs stay as recorded


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    room, specs = argv[0], argv[1:]
    renames = dict(spec.split("=", 1) if "=" in spec else (spec, spec) for spec in specs)
    modules = list(renames)
    room_dir = PACKAGE_DIR / room
    moved, old_packages, moving_now = {}, {}, set()
    room_dir.mkdir(exist_ok=True)
    init = room_dir / "__init__.py"
    if not init.exists():
        init.write_text(f'"""{room}: {", ".join(modules)}."""\n', encoding="utf-8")
        subprocess.run(["git", "add", str(init)], cwd=REPO, check=True)
    room_package = f"{PACKAGE}.{room.replace('/', '.')}"
    for name in sorted(modules, key=lambda n: f"{PACKAGE}.{n}" != room_package):  # the room's namesake first
        old, new = PACKAGE_DIR / f"{name}.py", room_dir / f"{renames[name]}.py"
        moved[f"{PACKAGE}.{name}"] = f"{room_package}.{renames[name]}"
        if old.exists():
            subprocess.run(["git", "mv", str(old), str(new)], cwd=REPO, check=True)
            moving_now.add(f"{PACKAGE}.{name}")
        if not _rewritten(new):  # written as a top-level module still (a re-run after a partial move included)
            old_packages[new.resolve()] = PACKAGE
    for path in text_files():
        text = path.read_text(encoding="utf-8")
        fresh = text
        for old, new in moved.items():
            if old not in moving_now:  # moved by an earlier run: its old name may be a room's now
                continue
            fresh = re.sub(re.escape(old) + r"\b(?![./\w])", new, fresh)
            fresh = re.sub(re.escape(old) + r"(?=\.[A-Za-z_])(?!\.py\b)", new, fresh)
            old_file = old.replace(".", "/") + ".py"
            fresh = fresh.replace(old_file, new.replace(".", "/") + ".py")
        if fresh != text:
            path.write_text(fresh, encoding="utf-8")
        if path.suffix == ".py" and path.parts[len(REPO.parts)] in CODE_DIRS:
            rewrite_imports(path, moved, old_packages.get(path.resolve(), package_of(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
