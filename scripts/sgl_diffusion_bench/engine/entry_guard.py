"""Before any entry point imports a third-party module: does this interpreter have the bundle's dependencies?

Standard library only, and imported first (by ``cli/__init__.py``, which every ``scripts/*.py`` and every console
script of the wheel goes through), because the package's own plumbing imports huggingface_hub, jsonschema and yaml:
without this check ``python3 scripts/judge_run.py`` in a shell whose venv is not active ends in a traceback. With it,
the user gets an ``error.v1`` document that names the missing packages and the command that works, and exit 3.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

from .. import __version__, paths

CODE = "env.missing_dependency"
PRECONDITION_EXIT = 3  # contract.ExitCode.PRECONDITION, which this module cannot import
MIN_PYTHON = (3, 10)
# Import name -> distribution, one per entry of pyproject.toml's [project] dependencies (a test keeps them equal).
REQUIRED = {
    "jsonschema": "jsonschema",
    "referencing": "referencing",
    "yaml": "pyyaml",
    "msgspec": "msgspec",
    "pynvml": "nvidia-ml-py",
    "huggingface_hub": "huggingface_hub",
    "packaging": "packaging",
    "numpy": "numpy",
    "psutil": "psutil",
}
BUNDLE = paths.CHECKOUT_ROOT  # the bundle (in a checkout)


class MissingDependencyError(Exception):
    """This interpreter cannot run the bundle; ``hint`` is the command that can."""

    def __init__(self, code: str, message: str, hint: str, details: dict):
        super().__init__(message)
        self.code, self.message, self.hint, self.details = code, message, hint, details


def missing_distributions() -> list[str]:
    """Distributions whose top-level module this interpreter cannot find (found, not imported: a few ms)."""
    return [dist for module, dist in REQUIRED.items() if importlib.util.find_spec(module) is None]


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, as a user would type it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _command_that_works(argv: list[str], missing: list[str]) -> tuple[str, str]:
    """(the command to run instead, what to run first), either may be "": the bundle's .venv when there is one, else
    its set-up; a console script of an installed wheel gets the missing packages installed into its interpreter."""
    script = Path(argv[0]).resolve() if argv and argv[0].endswith(".py") else None
    if script is None or script.parent != BUNDLE / "scripts" or not (BUNDLE / "Makefile").is_file():
        return "", f"{shlex.quote(sys.executable)} -m pip install {' '.join(missing)}" if missing else ""
    venv = BUNDLE / ".venv"
    rerun = shlex.join([os.path.join(_shown(venv), "bin", "python"), _shown(script), *argv[1:]])
    in_the_venv = Path(sys.prefix).resolve() == venv.resolve()
    if (venv / "bin" / "python").exists() and not in_the_venv:
        return rerun, ""
    setup = "make setup" if Path.cwd().resolve() == BUNDLE else f"make -C {shlex.quote(_shown(BUNDLE))} setup"
    return rerun, setup


def check(argv: list[str] | None = None) -> None:
    """Raise MissingDependencyError unless this interpreter is new enough and has every required package."""
    argv = list(sys.argv if argv is None else argv)
    too_old = sys.version_info[:2] < MIN_PYTHON
    missing = missing_distributions()
    if not too_old and not missing:
        return
    lacks = ([f"Python >= {'.'.join(map(str, MIN_PYTHON))}"] if too_old else []) + missing
    rerun, first = _command_that_works(argv, missing)
    if first and rerun:
        hint = f"create the bundle's venv with `{first}`, then run `{rerun}`"
    elif rerun or first:
        hint = f"run `{rerun or first}`"
    else:
        hint = f"run it with Python {'.'.join(map(str, MIN_PYTHON))} or newer"
    python = f"{sys.executable} (Python {'.'.join(map(str, sys.version_info[:3]))})"
    raise MissingDependencyError(
        CODE, f"this interpreter, {python}, lacks what the bundle needs: {', '.join(lacks)}", hint,
        {"missing": lacks, "python": sys.executable, "command": rerun or first, **({"setup": first} if first else {})})


def _redacted(text: str) -> str:
    """``text`` with the value of every *TOKEN* variable replaced, as contract.redact does for the scripts' output:
    the command echoed back is the user's own, and may carry a token."""
    for name, value in os.environ.items():
        if "TOKEN" in name.upper() and len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text


def error_document(error: MissingDependencyError, tool: str) -> dict:
    """The error.v1 document contract.error_document would build, built without the modules it needs."""
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"schema": "error.v1", "ok": False, "tool": {"name": tool, "version": __version__}, "created_at": created,
            "error": {"code": error.code, "message": error.message, "hint": error.hint, "details": error.details},
            "exit_code": PRECONDITION_EXIT}


def exit_unless_dependencies_present() -> None:
    """Print the error the way every script prints one (``--json``: the document on stdout; text on stderr) and
    exit 3 when this interpreter cannot run the bundle; return at once when it can."""
    try:
        check()
    except MissingDependencyError as error:
        tool = Path(sys.argv[0]).stem.replace("-", "_") if sys.argv and sys.argv[0] else "sgl_diffusion_bench"
        if "--json" in sys.argv[1:]:
            sys.stdout.write(_redacted(json.dumps(error_document(error, tool), indent=2, sort_keys=True)) + "\n")
            sys.stdout.flush()
        sys.stderr.write(_redacted(f"error [{error.code}]: {error.message}\nhint: {error.hint}") + "\n")
        sys.exit(PRECONDITION_EXIT)
