"""Host load at a cell's boundaries: load average, CPU use, and the other processes busy on this machine.

A benchmark cell on a CPU shared with other jobs can swing by 100x (this bundle's own A/A on a 2-core machine shared
by seven sessions saw 36 ms and 3.5 s cells). The runner samples the host at each cell's start and end; a cell is
flagged ``contended`` when another process (anything but this tool; the processes are listed before the cell's engine
starts or after it ended, so it is never among them) used at least BUSY_PCT of one core over the short sampling
window. Flagged, not invalidated: on a GPU run host noise rarely matters; on a CPU run
it does, and the report says how many cells ran contended so nobody reads their spread as the change's.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import psutil

from ..engine import engine_process
from .cell import Cell

SAMPLE_S = 0.1  # 10 clock ticks per core: enough to tell a busy process (>= BUSY_PCT) from an idle one
BUSY_PCT = 25.0  # percent of one core over the window
MAX_LISTED = 5


def sample(exclude: Iterable[int] = (), window_s: float = SAMPLE_S, busy_pct: float = BUSY_PCT,
           listed: int = MAX_LISTED) -> dict[str, Any]:
    """One host sample: 1-minute load, CPU count, machine CPU %, and the busiest processes other than this one.
    Taken at cell boundaries, when no engine of ours runs: a leftover engine worker still spinning counts too."""
    return start_sample(exclude, window_s, busy_pct, listed=listed)()


def start_sample(exclude: Iterable[int] = (), window_s: float = SAMPLE_S, busy_pct: float = BUSY_PCT,
                 exclude_group: int | None = None, listed: int = MAX_LISTED) -> Callable[[], dict[str, Any]]:
    """``sample`` without waiting for its window: the processes are listed now, measured over the next
    ``window_s`` on a thread; the returned getter waits for the result. A process started after this call (the
    engine a cold cell spawns next) is not among them, nor one in process group ``exclude_group`` (an engine of
    ours winding down), so the window may overlap the engine's start, its shutdown or the judging of a request:
    only the machine-wide CPU % then includes that work of ours. ``listed``: how many of the busiest are named
    (all are counted)."""
    result: dict[str, Any] = {}
    measure = _prime(exclude, window_s, busy_pct, exclude_group, listed)
    thread = threading.Thread(target=lambda: result.update(measure()), name="host-sample", daemon=True)
    thread.start()

    def get() -> dict[str, Any]:
        thread.join()
        return result
    return get


def _prime(exclude: Iterable[int], window_s: float, busy_pct: float, exclude_group: int | None,
           listed: int) -> Callable[[], dict[str, Any]]:
    excluded = {os.getpid(), *exclude}
    ours: set[int] = set()
    procs = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid in excluded:
            continue
        try:
            group = os.getpgid(proc.pid)
            if exclude_group is not None and group == exclude_group:
                continue
            if group in engine_process.SPAWNED_GROUPS:  # an engine of this run, or its worker outliving it
                ours.add(proc.pid)
            proc.cpu_percent(None)  # prime: the next call measures the window
            procs.append(proc)
        except (psutil.Error, ProcessLookupError):  # gone since it was listed
            continue
    psutil.cpu_percent(None)
    began = time.monotonic()

    def measure() -> dict[str, Any]:
        time.sleep(max(0.0, window_s - (time.monotonic() - began)))
        machine = psutil.cpu_percent(None)
        busy = []
        for proc in procs:
            try:
                pct = proc.cpu_percent(None)
            except psutil.Error:
                continue
            if pct >= busy_pct:
                busy.append({"pid": proc.pid, "name": proc.info.get("name") or "?", "cpu_percent": round(pct, 1),
                             "own": proc.pid in ours})
        busy.sort(key=lambda p: -p["cpu_percent"])
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return {"load_avg_1m": None if load1 is None else round(load1, 2), "cpu_count": psutil.cpu_count() or 1,
                "cpu_percent": round(machine, 1), "busy_processes": busy[:listed],
                "busy_process_count": len(busy)}
    return measure


def contended(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    """A foreign busy process at either boundary."""
    return any(s and s["busy_process_count"] for s in (before, after))


def reason(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    named = {p["pid"]: p for s in (before, after) if s for p in s["busy_processes"]}
    listed = "; ".join(describe(p) for p in named.values())
    load = [s["load_avg_1m"] for s in (before, after) if s and s["load_avg_1m"] is not None]
    cores = (before or after or {}).get("cpu_count")
    return (f"host.contended: busy at the cell boundaries: {listed}"
            + (f"; load {'/'.join(f'{v:g}' for v in load)} on {cores} cores" if load else ""))


def describe(process: dict[str, Any]) -> str:
    """Whose process it is, in words: an engine this run started (a worker left from an earlier cell, say) or
    another process on the host."""
    figures = f"pid {process['pid']}, {process['cpu_percent']:.0f}% of a core"
    if process.get("own"):
        return f"this run's engine ({process['name']}, {figures})"
    return f"another process: {process['name']}, {figures}"


def gate(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """bench-report.v1 ``cells[].gates.host``."""
    doc: dict[str, Any] = {"before": before, "after": after, "contended": contended(before, after)}
    if doc["contended"]:
        doc["reason"] = reason(before, after)
    return doc


def summary(cells: Sequence[Cell]) -> dict[str, Any]:
    """Which cells ran while other processes kept the host busy (flagged, still counted; see host_load)."""
    sampled = [c for c in cells if c.gates.get("host")]
    flagged = [c.index for c in sampled if c.gates["host"]["contended"]]
    note = (f"{len(flagged)} of {len(sampled)} cells ran while other processes were busy on this host (cells "
            f"{', '.join(map(str, flagged))}): their spread is partly the machine's, not the change's; re-run on a "
            "quiet host before claiming a small effect" if flagged else
            f"no other busy process at any of the {len(sampled)} sampled cells' boundaries" if sampled else
            "no cell sampled yet")
    return {"sampled_cells": len(sampled), "contended_cells": flagged, "note": note}
