"""Host load at cell boundaries: a real busy process is seen, named and flagged; the report says so."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from sgl_diffusion_bench.engine import engine_process
from sgl_diffusion_bench.judging import host_load
from sgl_diffusion_bench.results import report
from sgl_diffusion_bench.judging.cell import Cell

# Every busy process is named, not only the busiest five: other work on the machine (a parallel test lane, an engine)
# must not push this test's own spinners out of the list. Each window starts once the spinners spin (they have used
# CPU), and a process counts as busy from 1 % of a core over 1 s: on two cores shared with a test lane and two engines
# a spinner got under 5 % of a 0.6 s window right after its start.
ALL = 10_000
WINDOW_S, BUSY_PCT = 1.0, 1.0


def _spinning(*spinners: subprocess.Popen) -> None:
    """Wait until each spinner has run (0.05 s of CPU), however busy the host is."""
    deadline = time.monotonic() + 120
    for spinner in spinners:
        proc = psutil.Process(spinner.pid)
        while sum(proc.cpu_times()[:2]) < 0.05:
            assert time.monotonic() < deadline, "a spinner got no CPU for two minutes"
            time.sleep(0.05)


def _with_spinner(window_s=WINDOW_S):
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        _spinning(spinner)
        return spinner.pid, host_load.sample(window_s=window_s, busy_pct=BUSY_PCT, listed=ALL)
    finally:
        spinner.kill()
        spinner.wait(timeout=10)


def test_a_busy_process_at_a_boundary_is_named_and_flags_the_cell():
    pid, busy = _with_spinner()
    assert pid in [p["pid"] for p in busy["busy_processes"]], busy
    assert busy["cpu_count"] >= 1 and busy["load_avg_1m"] is not None and busy["busy_process_count"] >= 1
    assert host_load.contended(busy, None)
    assert f"pid {pid}" in host_load.reason(busy, None) and host_load.reason(busy, None).startswith("host.contended")
    quiet = dict(busy, busy_processes=[], busy_process_count=0)
    assert not host_load.contended(quiet, quiet)


def test_a_report_names_at_most_the_five_busiest_and_counts_them_all():
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(7)]
    try:
        _spinning(*spinners)
        busy = host_load.sample(window_s=WINDOW_S, busy_pct=BUSY_PCT)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=10)
    assert len(busy["busy_processes"]) == host_load.MAX_LISTED and busy["busy_process_count"] >= 7
    shares = [p["cpu_percent"] for p in busy["busy_processes"]]
    assert shares == sorted(shares, reverse=True)


def test_the_report_counts_contended_cells():
    _, busy = _with_spinner(0.3)
    quiet = dict(busy, busy_processes=[], busy_process_count=0)
    cells = [Cell(index=0, arm="a", gates={"host": {"before": quiet, "after": quiet, "contended": False}}),
             Cell(index=1, arm="a", gates={"host": {"before": busy, "after": quiet, "contended": True}}),
             Cell(index=2, arm="a")]
    summary = host_load.summary(cells)
    assert summary["sampled_cells"] == 2 and summary["contended_cells"] == [1]
    assert "1 of 2 cells ran while other processes were busy" in summary["note"]
    assert "Contended host" in "\n".join(report._host(summary))


def test_a_sample_lists_processes_when_started_so_it_can_overlap_the_engine_start():
    """A cold cell starts its host sample, then spawns its engine: the window runs while the engine starts, and the
    engine (started after the listing) is never taken for a foreign busy process."""
    earlier = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    later = None
    try:
        _spinning(earlier)
        get = host_load.start_sample(window_s=WINDOW_S, busy_pct=BUSY_PCT, listed=ALL)
        later = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        pids = [p["pid"] for p in get()["busy_processes"]]
        assert earlier.pid in pids and later.pid not in pids, pids
    finally:
        for spinner in (earlier, later):
            if spinner is not None:
                spinner.kill()
                spinner.wait(timeout=10)


def test_a_sample_at_the_end_leaves_the_winding_down_engine_group_out_but_not_others():
    """At a cell's end the window runs while the engine shuts down: its process group (its own session, as
    engine_process starts it) is left out, a foreign busy process is still named."""
    from sgl_diffusion_bench.engine import engine_process

    engine = engine_process.spawn_group([sys.executable, "-c", "while True: pass"])
    foreign = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        _spinning(engine, foreign)
        pids = [p["pid"] for p in host_load.start_sample(window_s=WINDOW_S, busy_pct=BUSY_PCT, listed=ALL,
                                                         exclude_group=engine.pid)()["busy_processes"]]
        assert foreign.pid in pids and engine.pid not in pids, pids
        named = host_load.sample(window_s=WINDOW_S, busy_pct=BUSY_PCT, listed=ALL)["busy_processes"]
        assert engine.pid in [p["pid"] for p in named]
    finally:
        for spinner in (engine, foreign):
            spinner.kill()
            spinner.wait(timeout=10)


def test_contention_says_whether_the_busy_process_is_this_runs_engine_or_another():
    """Issue 26: a contended cell named `sgl_diffusion::scheduler (pid ...)` without saying whose it was. A process
    in the group of an engine this run started (spawn_group) is this run's engine; anything else is another process."""
    engine = engine_process.spawn_group([sys.executable, "-c", "while True: pass"])
    other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        _spinning(engine, other)
        for _ in range(10):  # on a host far busier than its cores, a spinner may get no CPU in one window
            busy = host_load.sample(window_s=WINDOW_S, busy_pct=BUSY_PCT, listed=ALL)
            by_pid = {p["pid"]: p for p in busy["busy_processes"]}
            if {engine.pid, other.pid} <= set(by_pid):
                break
    finally:
        for spinner in (engine, other):
            spinner.kill()
            spinner.wait(timeout=10)
    assert {engine.pid, other.pid} <= set(by_pid), (engine.pid, other.pid, busy)
    assert by_pid[engine.pid]["own"] is True and by_pid[other.pid]["own"] is False, busy
    text = host_load.reason(busy, None)
    assert f"this run's engine ({by_pid[engine.pid]['name']}, pid {engine.pid}, " in text
    assert f"another process: {by_pid[other.pid]['name']}, pid {other.pid}, " in text
