"""Shared test helpers. Every script run through ``run_script`` (a real process) or ``run_main`` (its ``main`` in
this process) gets an HF_TOKEN canary in its environment, and the helper fails the test if the canary appears
anywhere in stdout or stderr: secrets never leak."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
# Kept evidence, not tests: engine sources copied under fixtures (engine-baselines-mini) are named test_*.py.
collect_ignore = ["fixtures"]
TEST_FIXTURES = REPO / "tests" / "fixtures"
HF_TOKEN_CANARY = "hf_CANARYtokenValue0123456789abcdef"
# The CPU evidence request of every tiny model's evidence-folder test (SKILL.md's CPU example is it on tiny-flux-cpu):
# a candidate that only raises the log level, two A/B/B/A rounds, both engines loading at once.
CPU_EVIDENCE_OPTIONS = ("--candidate-args", "--log-level info", "--budget-requests", "8", "--engine-overlap", "early")
HF_TOKEN_LIKE = re.compile(r"hf_[A-Za-z0-9]{20,}")  # what a real token looks like: kept evidence must hold none


def pipeline_stamps(path: Path) -> dict[str, int]:
    """``<step>.start|end <unix s> <hh:mm:ss>`` lines of a GPU harness pipeline's timeline (steps*.txt)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out

sys.path.insert(0, str(SCRIPTS))
# Scripts the tests start cache their bytecode, as Python does by default: with PYTHONDONTWRITEBYTECODE set (as some
# sandboxes do) each of the ~200 scripts `make check` starts recompiled the ~60 modules it imports, a third of its time.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# A lane started in the background by a script (`make test &`, nohup) inherits SIGINT ignored, and so does every CLI
# a test starts: the Ctrl-C tests would signal processes that cannot hear it (and leave their servers running).
# Python's own handler here makes the children start with SIGINT at its default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

CHECK_LANE_DIR = REPO / "tests" / "check_lane"
from sgl_diffusion_bench import bench_env  # noqa: E402

CHECK_LANE = bench_env.get(bench_env.CHECK_LANE) == "1"  # `make check`: torch and the engine must not be imported
if CHECK_LANE:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECK_LANE_DIR), os.environ.get("PYTHONPATH")) if p)
    _guard = importlib.util.spec_from_file_location("check_lane_guard", CHECK_LANE_DIR / "sitecustomize.py")
    _guard.loader.exec_module(importlib.util.module_from_spec(_guard))

from sgl_diffusion_bench import contract  # noqa: E402


@dataclasses.dataclass
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.stdout)


def run_script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
               cwd: Path | None = None, expect_json: bool | None = None) -> ScriptRun:
    """Run scripts/<name>.py as a user would; with --json, check stdout is one document valid against its schema."""
    child_env = dict(os.environ)
    child_env["HF_TOKEN"] = HF_TOKEN_CANARY
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *args], capture_output=True, text=True,
                          env=child_env, timeout=timeout, cwd=cwd or REPO)
    return _checked(ScriptRun(proc.returncode, proc.stdout, proc.stderr), args, expect_json)


def run_main(name: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
             expect_json: bool | None = None) -> ScriptRun:
    """scripts/<name>.py's ``main`` in this process, with run_script's checks, for tests about what a script prints
    rather than about its process (each script still runs as a real process in test_contract and the fuzz tests):
    it saves the ~0.4 s a process spends starting and importing the package (a third of `make check` was that)."""
    wrapper = (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")
    module = importlib.import_module(re.search(r"from (sgl_diffusion_bench\.cli\.\w+) import main", wrapper)[1])
    out, err, saved_env = io.StringIO(), io.StringIO(), dict(os.environ)
    saved_cwd = os.getcwd()
    os.environ["HF_TOKEN"] = HF_TOKEN_CANARY
    os.environ.update(env or {})
    os.chdir(cwd or REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                returncode = module.main(list(args))
            except SystemExit as exc:  # argparse's --help
                returncode = exc.code or 0
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return _checked(ScriptRun(returncode, out.getvalue(), err.getvalue()), args, expect_json)


def _checked(run: ScriptRun, args: tuple[str, ...], expect_json: bool | None) -> ScriptRun:
    assert HF_TOKEN_CANARY not in run.stdout + run.stderr, "HF token value leaked into output"
    # Our own traceback starts a line; an engine traceback quoted inside a reason does not.
    assert not re.search(r"(?m)^Traceback \(most recent call last\):", run.stderr), run.stderr[-3000:]
    if expect_json if expect_json is not None else "--json" in args:
        document = run.document  # exactly one JSON document: json.loads rejects trailing text
        assert contract.validation_errors(document) == [], contract.validation_errors(document)
        assert (run.returncode == 0) == (document["ok"] is True) or document["schema"] != "error.v1"
    return run


PHASE_END = re.compile(r"^\[progress\] (?P<what>.+?): (?:done|failed|[a-z ]+) (?:in|after) [0-9.]+ s$")
STEP_START = re.compile(r"^\[evidence\] step (?P<step>\S+): running$")
STEP_END = re.compile(r"^\[evidence\] step (?P<step>\S+): (?:done|failed|skipped|interrupted) after [0-9.]+ s")
CELL_END = re.compile(r"^(?P<cell>\[cell \d+/\d+\]) (?P<arm>\S+).*: [A-Z_]+ after ")


def assert_announced_and_summarised(stderr: str, tool: str) -> list[str]:
    """A long command's stderr (issue 45): every phase that reports its end announced itself before ('X ...'), every
    cell's verdict follows the cell's 'starting' line, every evidence step that started says how it ended, and the
    last line is the command's one summary line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    started = [m["step"] for line in lines if (m := STEP_START.match(line))]
    ended = [m["step"] for line in lines if (m := STEP_END.match(line))]
    assert started == ended, (started, ended)
    for index, line in enumerate(lines):
        end = PHASE_END.match(line) if " s so far" not in line else None  # a tick may quote an engine's "in 2 s"
        if end:
            opened = f"[progress] {end['what']} ..."
            assert any(earlier.startswith(opened) for earlier in lines[:index]), (line, lines[:index][-20:])
        cell = CELL_END.match(line)
        if cell:
            assert any(earlier.startswith(f"{cell['cell']} {cell['arm']}") and earlier.endswith("starting")
                       for earlier in lines[:index]), (line, lines[:index][-20:])
    assert lines and lines[-1].startswith(f"[{tool}] "), lines[-5:]
    return lines
