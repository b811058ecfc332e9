"""Every entry point, started by an interpreter without the bundle's packages, says so in an error.v1 document that
names the command that works, and exits 3: no traceback, whatever interpreter (or `python -I`) starts it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HF_TOKEN_CANARY, REPO, SCRIPTS
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.engine import entry_guard

ENTRY_SCRIPTS = sorted(SCRIPTS.glob("*.py"))


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A venv with nothing installed, not even pip: the interpreter a user gets when the bundle's venv is not
    active."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('huggingface_hub'))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "None", "the bare venv sees huggingface_hub: it is not bare"
    return python


def _refusal(python: str, *args: str, cwd: Path = REPO) -> dict:
    """Run ``python *args`` with a token in the environment and in the command line; check it is refused cleanly."""
    env = {"PATH": "/usr/bin:/bin", "HF_TOKEN": HF_TOKEN_CANARY}
    proc = subprocess.run([python, *args, "--json", "--label", HF_TOKEN_CANARY], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert HF_TOKEN_CANARY not in proc.stdout + proc.stderr, "a token was echoed back"
    doc = json.loads(proc.stdout)  # exactly one document
    assert contract.validation_errors(doc) == [], doc
    assert doc["error"]["code"] == "env.missing_dependency" and doc["exit_code"] == 3
    assert "huggingface_hub" in doc["error"]["details"]["missing"]
    assert "error [env.missing_dependency]" in proc.stderr
    return doc


@pytest.mark.parametrize("isolated", [False, True], ids=["plain", "python-I"])
@pytest.mark.parametrize("script", ENTRY_SCRIPTS, ids=lambda p: p.stem)
def test_every_script_refuses_an_interpreter_without_the_dependencies(bare_python, script, isolated):
    doc = _refusal(bare_python, *(["-I"] if isolated else []), f"scripts/{script.name}")
    assert doc["tool"]["name"] == script.stem
    command = doc["error"]["details"]["command"]
    if (REPO / ".venv" / "bin" / "python").exists():
        assert command == f".venv/bin/python scripts/{script.name} --json --label <redacted>"
        assert doc["error"]["hint"] == f"run `{command}`"
    else:
        assert doc["error"]["details"]["setup"] == "make setup"


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the bundle's .venv")
def test_the_command_the_refusal_names_works(bare_python):
    proc = subprocess.run([bare_python, "scripts/judge_run.py", "--self-test", "--json"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    command = json.loads(proc.stdout)["error"]["details"]["command"]
    rerun = subprocess.run(shlex.split(command), capture_output=True, text=True, cwd=REPO, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert json.loads(rerun.stdout)["schema"] == "selftest.v1"


def test_without_a_venv_the_refusal_names_the_set_up_first(bare_python, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(SCRIPTS, bundle / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "Makefile", bundle / "Makefile")
    doc = _refusal(bare_python, "scripts/compare_perf.py", cwd=bundle)
    details = doc["error"]["details"]
    assert details["setup"] == "make setup"
    assert details["command"] == ".venv/bin/python scripts/compare_perf.py --json --label <redacted>"
    assert doc["error"]["hint"] == f"create the bundle's venv with `make setup`, then run `{details['command']}`"
    elsewhere = _refusal(bare_python, str(bundle / "scripts" / "compare_perf.py"), cwd=tmp_path)
    assert elsewhere["error"]["details"]["setup"] == "make -C bundle setup"  # as typed from the working directory
    assert elsewhere["error"]["details"]["command"].startswith("bundle/.venv/bin/python bundle/scripts/compare_perf.py")


def test_a_console_script_names_the_packages_to_install(bare_python):
    """An installed entry point (no scripts/ file, no Makefile) goes through the same check in cli/__init__.py."""
    code = (f"import sys; sys.path.insert(0, {str(SCRIPTS)!r}); sys.argv[0] = 'judge-run'; "
            "from sgl_diffusion_bench.cli.judge import main")
    proc = subprocess.run([bare_python, "-c", code, "--json"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr and proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["tool"]["name"] == "judge_run"
    assert re.fullmatch(r"\S+ -m pip install .*huggingface_hub.*", doc["error"]["details"]["command"])


def test_the_checked_packages_are_the_declared_dependencies():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d)[0].lower().replace("-", "_") for d in declared}
    assert names == {d.lower().replace("-", "_") for d in entry_guard.REQUIRED.values()}


def test_an_interpreter_with_the_dependencies_passes_the_check():
    assert entry_guard.missing_distributions() == []
    entry_guard.check(["scripts/judge_run.py"])  # raises when something is missing
