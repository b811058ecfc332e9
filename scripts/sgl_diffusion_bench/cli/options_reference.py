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
    subcommand for scripts that have them."""
    parser = importlib.import_module(f"{__package__}.{cli_module}").build_parser()
    prog = parser.prog
    parts = [_groups(parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                parts.append(f"**`{prog} {name}`**: {helps.get(name) or ''}\n\n{_groups(sub)}")
    return "\n".join(p for p in parts if p.strip())


GENERIC_GROUPS = ("positional arguments", "options", "optional arguments")  # argparse's own, merged into one table


def _groups(parser: argparse.ArgumentParser) -> str:
    tables: dict[str, list[str]] = {}
    for group in parser._action_groups:
        title = "" if group.title in GENERIC_GROUPS else group.title
        tables.setdefault(title, []).extend(_row(a) for a in group._group_actions if _documented(a))
    return "\n".join((f"*{title}*\n\n" if title else "") + HEADER + "\n".join(rows) + "\n"
                     for title, rows in tables.items() if rows)


HEADER = "| Option | Value | Default | What it does |\n|---|---|---|---|\n"


def _documented(action: argparse.Action) -> bool:
    if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
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
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return word + repeat


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
