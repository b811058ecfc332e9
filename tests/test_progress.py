"""Nothing long runs silently: each long phase (import check, engine probe, engine load, warm-up) says on stderr what
it starts before it runs and how long it took after, also with --json (stdout stays one document), and --quiet
silences it. Checked by the order of the lines, never by a timer."""

from __future__ import annotations

import re
import sys
import time

import pytest

from conftest import TEST_FIXTURES, run_script
from sgl_diffusion_bench import progress, work_dirs
from sgl_diffusion_bench.engine import warm_engine
from sgl_diffusion_bench.engine.inside.warm_driver import MARKER

RECORDED_WARM_LOG = TEST_FIXTURES / "gpu-h200-0.5.23" / "warm-vs-cold" / "warm-e1.engine.log"


def progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(progress.PREFIX)]


def assert_announced_then_timed(lines: list[str], what: str) -> tuple[int, int]:
    """``what ...`` comes before ``what: done in N s``; returns both positions."""
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{progress.PREFIX} {what} ...")]
    ends = [i for i, line in enumerate(lines)
            if re.fullmatch(re.escape(f"{progress.PREFIX} {what}: done in ") + r"\d+\.\d s", line)]
    assert len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0], (what, lines)
    return starts[0], ends[0]


def test_a_phase_announces_ticks_while_a_child_runs_and_reports_its_time(capsys):
    with progress.phase("sleeping child", "a real process") as ticker:
        ticker.interval_s = 0.05
        done = progress.run_child([sys.executable, "-c", "import time; time.sleep(0.5); print('out')"], ticker,
                                  timeout_s=60, env={})
    assert done.returncode == 0 and done.stdout == "out\n"
    lines = progress_lines(capsys.readouterr().err)
    assert lines[0] == f"{progress.PREFIX} sleeping child ... (a real process)"
    assert_announced_then_timed(lines, "sleeping child")
    assert any(re.fullmatch(r".* sleeping child: \d+ s so far", line) for line in lines[1:-1]), lines

    progress.set_quiet(True)
    try:
        with progress.phase("hushed"):
            pass
    finally:
        progress.set_quiet(False)  # this process runs other tests next
    assert capsys.readouterr().err == ""


def test_a_failed_phase_says_it_failed_and_after_how_long(capsys):
    with pytest.raises(ValueError), progress.phase("doomed"):
        raise ValueError("boom")
    assert re.fullmatch(r".* doomed: failed after \d+\.\d s", progress_lines(capsys.readouterr().err)[-1])


def test_a_recorded_engine_load_is_reported_from_the_engines_own_lines(tmp_path, capsys):
    """A recorded H200 warm engine start (its log up to READY) replayed through WarmEngine.wait_ready: the phase
    lines in between quote what the engine itself was doing."""
    recorded = RECORDED_WARM_LOG.read_text(encoding="utf-8").splitlines()
    upto = next(i for i, line in enumerate(recorded) if line.startswith(f"{MARKER} READY"))
    replay = tmp_path / "replay.log"
    replay.write_text("\n".join(recorded[: upto + 1]) + "\n", encoding="utf-8")
    code = ("import sys, time\n"
            f"for line in open({str(replay)!r}, encoding='utf-8'):\n"
            "    print(line, end='', flush=True); time.sleep(0.004)\n"
            "sys.stdin.read()\n")
    engine = warm_engine.WarmEngine("e1", [sys.executable, "-c", code], {}, tmp_path / "engine.log")
    engine.start()
    try:
        with progress.phase("engine e1: loading the model") as ticker:
            ticker.interval_s = 0.05
            ready = engine.wait_ready(None, 120, ticker)
    finally:
        engine.close()
    assert ready.status == "ok" and len(ready.lines) == upto
    lines = progress_lines(capsys.readouterr().err)
    assert_announced_then_timed(lines, "engine e1: loading the model")
    quoted = [line.split("the engine says: ", 1)[1] for line in lines if "the engine says: " in line]
    assert quoted and all(any(q.rstrip(".") in r for r in recorded[:upto]) for q in quoted), quoted


@pytest.mark.torch
def test_inspect_and_check_readiness_share_one_probe_each_announced(tmp_path):
    """A fresh work root: check_readiness probes the engine (announced, timed); inspect then answers its import
    check from that probe's cache and announces only torch's import; --quiet silences both."""
    work = {work_dirs.WORKDIR_ENV: str(tmp_path / "work")}
    ready = run_script("check_readiness", "--model", "tiny-flux-cpu", "--json", env=work, timeout=1200)
    assert ready.document["schema"] == "readiness.v1", ready.stderr[-2000:]
    assert_announced_then_timed(progress_lines(ready.stderr), "engine probe: importing sglang's generate parser")

    began = time.monotonic()
    inspected = run_script("diffusion_skill_env", "inspect", "--json", env=work, timeout=600)
    inspect_s = time.monotonic() - began
    check = inspected.document["sglang"]["engine_check"]["import_check"]
    assert check["ok"] and check["cached"], check
    lines = progress_lines(inspected.stderr)
    assert_announced_then_timed(lines, "importing torch (its version, CUDA build and NCCL)")
    assert not any("engine probe" in line for line in lines), lines
    print(f"inspect with the probe cached: {inspect_s:.1f} s")  # a figure for the record, not a timed assertion

    quiet = run_script("diffusion_skill_env", "inspect", "--json", "--quiet", env=work, timeout=600)
    assert quiet.document["schema"] == "env.v1" and progress_lines(quiet.stderr) == []


@pytest.mark.engine
def test_a_warm_run_announces_each_phase_and_imports_sglang_once_for_probe_and_engine(tmp_path):
    """A fresh work root (no cached probe): the probe, the engine load and the warm-up each announced then timed, in
    that order; the engine is built in the probe's own interpreter (the pid the probe log's PROBED line names is the
    one the engine log's BUILD line names), so a first run imports sglang once in the driver, not twice."""
    work = tmp_path / "work"
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "progress",
                     "--output-dir", str(tmp_path / "out"), "--json", env={work_dirs.WORKDIR_ENV: str(work)},
                     timeout=1800)
    assert run.returncode == 0 and run.document["schema"] == "bench-report.v1", run.stderr[-3000:]
    lines = progress_lines(run.stderr)
    _, probed = assert_announced_then_timed(lines, "engine probe: importing sglang's generate parser")
    adopted = lines.index(f"{progress.PREFIX} engine e1: starting in the probe's interpreter (sglang already imported "
                          "there)")
    load_start, loaded = assert_announced_then_timed(lines, "engine e1: loading the model")
    warm_start, _ = assert_announced_then_timed(lines, "engine e1: warm-up request 1 of 1")
    assert probed < adopted < load_start < loaded < warm_start
    probe_pid = _marker_pid(work / ".cache" / "engine-capabilities.log", "PROBED")
    engine_log = next((tmp_path / "out").glob("*__warm-e1/engine.log"))
    assert probe_pid is not None and _marker_pid(engine_log, "BUILD") == probe_pid
    assert (work / ".cache" / "engine-capabilities.json").exists()  # the probe it answered is cached as any


def _marker_pid(log, word: str) -> int | None:
    for line in log.read_text(encoding="utf-8").splitlines():
        words = line[len(MARKER):].split() if line.startswith(MARKER) else []
        if words[:1] == [word]:
            return int(words[1])
    return None


def test_a_quiet_cold_engine_is_still_heard_from(tmp_path, capsys):
    """A cold engine's start (its model load) can print nothing for half a minute: run_engine ticks while it is
    quiet, quoting the engine's latest line, so the silence between two lines never reaches the interval plus one
    poll. A child that prints once, then sleeps for six intervals, gets several 'so far' lines in between."""
    from sgl_diffusion_bench.engine import engine_process

    with progress.phase("quiet engine") as ticker:
        ticker.interval_s = 0.2
        run = engine_process.run_engine(
            [sys.executable, "-c", "import time; print('loading weights', flush=True); time.sleep(1.2)"], {},
            tmp_path / "engine.log", ticker=ticker)
    assert run.returncode == 0
    lines = progress_lines(capsys.readouterr().err)
    assert_announced_then_timed(lines, "quiet engine")
    ticks = [line for line in lines if re.fullmatch(r".* quiet engine: \d+ s so far; the engine says: loading "
                                                   r"weights", line)]
    assert len(ticks) >= 3, lines
