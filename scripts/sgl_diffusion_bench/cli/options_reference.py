"""reference/options.md's tables, rendered from the scripts' own argparse parsers, so the reference lists exactly
what each script accepts, with the defaults and help text that ``--help`` prints.

``doc_tables`` names ``render:<cli module>`` for each script in ``scripts/`` (``entry_points``), so a new script
gets a block or the doc check fails; every parser is built here, nothing is run.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from pathlib import Path
from typing import Iterable

from ..paths import CHECKOUT_ROOT

COMMON = {"--help", "--json", "--quiet", "--self-test"}  # every script has them; the reference says so once
SCRIPTS_DIR = CHECKOUT_ROOT / "scripts"
RUNS_CLI = re.compile(r"\bsgl_diffusion_bench\.cli\.(?P<module>[a-z_]+) import main\b")


def entry_points(scripts_dir: Path = SCRIPTS_DIR) -> dict[str, str]:
    """Each script in ``scripts/`` (its file name) and the cli module whose ``main`` it runs, read from the script
    itself: the docs list what is there, not what someone remembered to add."""
    found = {}
    for script in sorted(scripts_dir.glob("*.py")):
        modules = set(RUNS_CLI.findall(script.read_text(encoding="utf-8")))
        if len(modules) != 1:
            raise ValueError(f"{script.name} runs {sorted(modules) or 'no'} sgl_diffusion_bench.cli module(s); "
                             "each script runs exactly one cli module's main")
        found[script.name] = modules.pop()
    return found


def render_script_list() -> str:
    """README's list of scripts: each one's docstring, and a link to its options."""
    rows = [f"| `{name}` | {_cell(_summary(SCRIPTS_DIR / name))} | [options](reference/options.md#{_anchor(name)}) |"
            for name in entry_points()]
    return "| script | what it does | |\n|---|---|---|\n" + "\n".join(rows)


def _summary(script: Path) -> str:
    return (ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or "").split("\n\n")[0]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def render(cli_module: str) -> str:
    """The option tables of ``sgl_diffusion_bench.cli.<cli_module>``: one per argument group, and one per
    subcommand for scripts that have them (each subcommand's help is its parser's description)."""
    parser = importlib.import_module(f"{__package__}.{cli_module}").build_parser()
    sections = help_sections(parser)
    parts = [_groups(sections)]
    for action in (a for _, actions in sections for a in actions if _subcommands(a)):
        for name, sub in action.choices.items():
            parts.append(f"**`{parser.prog} {name}`**: {sub.description or ''}\n\n{_groups(help_sections(sub))}")
    return "\n".join(p for p in parts if p.strip())


GENERIC_GROUPS = ("positional arguments", "options", "optional arguments")  # argparse's own, merged into one table


def help_sections(parser: argparse.ArgumentParser) -> list[tuple[str | None, list[argparse.Action]]]:
    """Each section of ``parser``'s --help (its title and actions), as argparse hands them to its formatter: the
    formatter's public hooks are the parser's only public account of its groups."""
    sections: list[tuple[str | None, list[argparse.Action]]] = []

    class Recorder(argparse.HelpFormatter):
        def start_section(self, heading: str | None) -> None:
            sections.append((heading, []))
            super().start_section(heading)

        def add_arguments(self, actions: Iterable[argparse.Action]) -> None:
            actions = list(actions)
            if sections:
                sections[-1][1].extend(actions)
            super().add_arguments(actions)

    shown = parser.formatter_class
    parser.formatter_class = Recorder
    try:
        parser.format_help()
    finally:
        parser.formatter_class = shown
    return sections


def _subcommands(action: argparse.Action) -> bool:
    return callable(getattr(action, "add_parser", None))


def _groups(sections: list[tuple[str | None, list[argparse.Action]]]) -> str:
    tables: dict[str, list[str]] = {}
    for heading, actions in sections:
        title = "" if heading in GENERIC_GROUPS or heading is None else heading
        tables.setdefault(title, []).extend(_row(a) for a in actions if _documented(a))
    return "\n".join((f"*{title}*\n\n" if title else "") + HEADER + "\n".join(rows) + "\n"
                     for title, rows in tables.items() if rows)


HEADER = "| Option | Value | Default | What it does |\n|---|---|---|---|\n"


def _documented(action: argparse.Action) -> bool:
    if _subcommands(action) or action.help == argparse.SUPPRESS:
        return False
    return not set(action.option_strings) & COMMON


def _row(action: argparse.Action) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest.upper()}`"
    return f"| {names} | {_value(action)} | {_default(action)} | {_cell(_help(action))} |"


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        word = " \\| ".join(f"`{c}`" for c in action.choices)
    elif action.option_strings:
        word = f"`{action.metavar or action.dest.upper()}`"
    else:
        word = ""
    if action.nargs in ("+", "*"):
        word = f"{word} ..." if word else "..."
    repeat = " (repeatable)" if _repeatable(action) else ""
    return word + repeat


def _repeatable(action: argparse.Action) -> bool:
    """Whether giving the option again adds to its value (append, extend), asked of the action itself: argparse
    names no public type for it."""
    namespace = argparse.Namespace(**{action.dest: ["earlier"]})
    action(argparse.ArgumentParser(), namespace, "again")
    value = getattr(namespace, action.dest)
    return isinstance(value, list) and len(value) > 1 and value[0] == "earlier"


def _default(action: argparse.Action) -> str:
    default = action.default
    if default in (None, False, "", [], argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{default}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {"default": action.default, "prog": "", "dest": action.dest}
    return text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
