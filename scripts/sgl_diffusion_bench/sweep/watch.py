"""What a running sweep says on stderr: one line per shard event (started, each measured cell, done, failed), each
with the sweep's elapsed time and an ETA, and while nothing happens a line at least every few seconds naming what
the running shards are doing. Everything is read from the sweep folder (each shard's state.json and its bench's
stderr log), so it is the same for every executor that writes there; the shards themselves are never touched."""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
import time
from pathlib import Path
from typing import Callable

from .. import progress
from . import state as sweep_state

SOURCE = "sweep"  # the tag of the watcher's lines: "[sweep] a: started (attempt 1) [...]"
QUIET_S = progress.INTERVAL_S  # the longest a running sweep stays silent
CELL_LINE = re.compile(r"^\[cell (?P<n>\d+)/(?P<of>\d+)\] (?P<text>.*?: [A-Z_]+ after .*)$")
LATEST_CHARS = 120
NAMED_RUNNING = 3  # a quiet line names what this many running shards do, and counts the rest


@dataclasses.dataclass
class _Shard:
    estimate_s: float
    earlier_attempt: int | None = None  # the attempt an earlier run of the sweep left, not this run's
    status: str = "pending"
    state_stamp: tuple[int, int, int] | None = None
    recorded: dict = dataclasses.field(default_factory=dict)
    attempt: int | None = None
    started: float | None = None
    wall_s: float | None = None
    log_offset: int = 0
    log_rest: str = ""
    latest: str | None = None  # the bench's latest stderr line


def clock_text(seconds: float) -> str:
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Watcher:
    """Polls the folder for the shards being run now; ``slots`` is how many run at once (the ETA divides by it)."""

    def __init__(self, folder: Path, estimates_s: dict[str, float], slots: int,
                 say: Callable[[str], None] = functools.partial(progress.say, source=SOURCE),
                 clock: Callable[[], float] = time.monotonic):
        self.folder, self.slots, self.say, self.clock = folder, max(1, slots), say, clock
        self.shards = {shard_id: _Shard(seconds, (sweep_state.read_state(folder, shard_id) or {}).get("attempt"))
                       for shard_id, seconds in estimates_s.items()}
        self.began = self._last_said = clock()

    def eta_s(self) -> float:
        """Seconds left: the plan's estimate of each shard not finished, scaled by how the finished ones compared
        with theirs, less what the running ones have done, spread over the slots."""
        now = self.clock()
        finished = [s for s in self.shards.values() if s.wall_s is not None and s.estimate_s > 0]
        scale = sum(s.wall_s / s.estimate_s for s in finished) / len(finished) if finished else 1.0
        left = [max(s.estimate_s * scale - (now - s.started if s.started is not None else 0.0), 0.0)
                for s in self.shards.values() if s.status in ("pending", "running")]
        return sum(left) / min(self.slots, len(left)) if left else 0.0

    def counts(self) -> str:
        names = ("done", "failed", "running", "pending")
        return ", ".join(f"{sum(s.status == n for s in self.shards.values())} {n}" for n in names)

    def _line(self, text: str) -> None:
        self._last_said = self.clock()
        self.say(f"{text} [{self.counts()}; elapsed {clock_text(self._last_said - self.began)}, "
                 f"ETA ~{clock_text(self.eta_s())}]")

    def poll(self) -> None:
        """Say what changed since the last poll; when nothing did for QUIET_S, what the running shards are doing."""
        for shard_id, shard in self.shards.items():
            self._poll_one(shard_id, shard)
        if self.clock() - self._last_said >= QUIET_S:
            running = [f"{i}: {s.latest or 'starting'}" for i, s in self.shards.items() if s.status == "running"]
            more = f"; {len(running) - NAMED_RUNNING} more running" if len(running) > NAMED_RUNNING else ""
            self._line("waiting; " + ("; ".join(running[:NAMED_RUNNING]) + more if running
                                      else "no shard running yet"))

    def _poll_one(self, shard_id: str, shard: _Shard) -> None:
        state_path = sweep_state.shard_dir(self.folder, shard_id) / sweep_state.STATE_FILE
        try:  # a state is read (and checked) only when it changed: a sweep may have a thousand shards
            found = state_path.stat()  # each write replaces the file: a new inode even within one mtime tick
        except OSError:
            return
        stamp = (found.st_ino, found.st_mtime_ns, found.st_size)
        if stamp != shard.state_stamp:
            shard.state_stamp, shard.recorded = stamp, sweep_state.read_state(self.folder, shard_id) or {}
        attempt = shard.recorded.get("attempt")
        if attempt in (shard.earlier_attempt, None):
            return  # not started yet, or what an earlier run left
        if attempt != shard.attempt:  # a new attempt began (on Ray it may be over already when its state arrives)
            shard.status, shard.attempt, shard.started = "running", attempt, self.clock()
            shard.log_offset, shard.log_rest, shard.latest = 0, "", None
            self._line(f"{shard_id}: started (attempt {attempt})")
        if shard.status != "running":
            return
        self._read_log(shard_id, shard)
        if shard.recorded.get("status") in ("done", "failed"):
            shard.status = shard.recorded["status"]
            shard.wall_s = float(shard.recorded.get("wall_s") or self.clock() - shard.started)
            reason = f": {shard.recorded.get('reason')}" if shard.status == "failed" else ""
            self._line(f"{shard_id}: {shard.status} in {shard.wall_s:.0f} s{reason}")

    def _read_log(self, shard_id: str, shard: _Shard) -> None:
        log = sweep_state.shard_dir(self.folder, shard_id) / f"attempt-{shard.attempt}.stderr.log"
        try:
            with log.open("rb") as handle:
                handle.seek(shard.log_offset)
                chunk = handle.read()
        except OSError:
            return
        shard.log_offset += len(chunk)
        *lines, shard.log_rest = (shard.log_rest + chunk.decode("utf-8", "replace")).split("\n")
        for line in (x.strip().removeprefix(progress.PREFIX).strip() for x in lines):
            if not line:
                continue
            shard.latest = line if len(line) <= LATEST_CHARS else line[:LATEST_CHARS - 3] + "..."
            cell = CELL_LINE.match(line)
            if cell:
                self._line(f"{shard_id}: cell {cell['n']}/{cell['of']} {cell['text']}")


def watching(watcher: Watcher, work: Callable[[], dict]) -> dict:
    """``work()`` with the watcher polling beside it; a last poll afterwards says the final events."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(progress.POLL_S):
            watcher.poll()

    thread = threading.Thread(target=loop, name="sweep-watch", daemon=True)
    thread.start()
    try:
        return work()
    finally:
        stop.set()
        thread.join()
        watcher.poll()
