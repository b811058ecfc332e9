"""The engine lookup is not fooled by a moved venv: its console scripts keep the old interpreter path on their first
line, so `sglang` beside the moved python would fail ("bad interpreter") or run another environment's python."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from sgl_diffusion_bench.engine import engine_python

CONSOLE_SCRIPT = "# -*- coding: utf-8 -*-\nimport sys\nprint('engine ran by', sys.executable, sys.argv[1:])\n"


def _venv_with_sglang(root: Path) -> Path:
    """A real venv whose bin/sglang is a console script naming its python, as an installer writes it."""
    venv.create(root, with_pip=False, symlinks=True)
    python = root / "bin" / "python"
    script = root / "bin" / "sglang"
    script.write_text(f"#!{python}\n{CONSOLE_SCRIPT}")
    script.chmod(0o755)
    return python


def test_an_unmoved_venv_runs_its_console_script(tmp_path):
    python = _venv_with_sglang(tmp_path / "env")
    assert engine_python.stale_shebang(str(python)) is None
    assert engine_python.sglang_cli(str(python)) == [str(python.parent / "sglang")]


def test_a_moved_venv_runs_the_script_with_its_own_python_and_says_why(tmp_path, capsys):
    old = tmp_path / "old-env"
    _venv_with_sglang(old)
    moved = tmp_path / "moved-env"
    old.rename(moved)
    python = moved / "bin" / "python"
    with pytest.raises(FileNotFoundError):  # what running bin/sglang itself, the old lookup's answer, does
        subprocess.run([str(moved / "bin" / "sglang")], capture_output=True, timeout=60)
    stale = engine_python.stale_shebang(str(python))
    assert stale and str(old / "bin" / "python") in stale and "does not exist" in stale
    argv = engine_python.sglang_cli(str(python))
    assert argv == [str(python), str(moved / "bin" / "sglang")]
    assert capsys.readouterr().err.count("does not exist") == 1
    engine_python.sglang_cli(str(python))
    assert capsys.readouterr().err == ""  # said once per interpreter
    run = subprocess.run([*argv, "generate"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[3] == str(python) and "generate" in run.stdout


def test_a_script_naming_another_existing_python_is_not_trusted(tmp_path):
    python = _venv_with_sglang(tmp_path / "env")
    (python.parent / "sglang").write_text(f"#!{sys.executable}\n{CONSOLE_SCRIPT}")
    stale = engine_python.stale_shebang(str(python))
    assert stale and "another interpreter" in stale
    assert engine_python.sglang_cli(str(python))[0] == str(python)


def test_the_sh_trampoline_for_long_paths_is_read(tmp_path):
    python = _venv_with_sglang(tmp_path / "env")
    gone = tmp_path / "gone" / "bin" / "python"
    (python.parent / "sglang").write_text(f"#!/bin/sh\n'''exec' '{gone}' \"$0\" \"$@\"\n' '''\n{CONSOLE_SCRIPT}")
    assert engine_python.script_interpreter(python.parent / "sglang") == str(gone)
    assert str(gone) in (engine_python.stale_shebang(str(python)) or "")


def test_a_script_naming_python_is_the_same_interpreter_as_python3_beside_it(tmp_path):
    """A venv's python3 links to its python: one interpreter, no warning (every command warned before)."""
    python = _venv_with_sglang(tmp_path / "env")
    python3 = python.parent / "python3"
    assert python3.is_symlink() and python3.resolve() == python.resolve()
    assert engine_python.stale_shebang(str(python3)) is None
    assert engine_python.sglang_cli(str(python3)) == [str(python.parent / "sglang")]
