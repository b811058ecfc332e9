"""Progress lines on stderr for every step that can take longer than a few seconds (importing the engine, probing
it, loading a model, warming it up): a user who sees nothing for a minute assumes a hang. ``--quiet`` (every script's
common option) turns them off; they never reach stdout, so ``--json`` still prints one document there.

Each phase says what it starts before it runs and how long it took after; a long child process adds one line every
``INTERVAL_S`` in between (waiting loops check every ``POLL_S``, so no phase is silent for more than 5 s), its own
latest log line with the seconds since the phase began.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from typing import Iterator, Mapping, Sequence

SOURCE = "progress"
PREFIX = f"[{SOURCE}]"
INTERVAL_S = 4.0
POLL_S = 1.0  # how often a waiting loop checks whether a line is due
_state = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    _state["quiet"] = quiet


def say(text: str, source: str = SOURCE) -> None:
    """One progress line on stderr, tagged with what speaks (``[progress]``, or e.g. ``[sweep]`` for a sweep's own
    lines, so they carry one tag, not two)."""
    if not _state["quiet"]:
        print(f"[{source}] {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def phase(what: str, detail: str = "") -> Iterator["Ticker"]:
    """Announce ``what`` (with ``detail`` on that first line only), run the block, report its elapsed seconds (or
    that it failed, and after how long)."""
    ticker = Ticker(what)
    say(f"{what} ..." + (f" ({detail})" if detail else ""))
    try:
        yield ticker
    except BaseException:
        say(f"{what}: failed after {ticker.elapsed_s():.1f} s")
        raise
    say(f"{what}: {ticker.outcome} in {ticker.elapsed_s():.1f} s")


class Ticker:
    """Throttled in-between lines of one phase: ``feed`` the child's log lines, ``tick`` when it is quiet."""

    def __init__(self, what: str, interval_s: float = INTERVAL_S):
        self.what, self.interval_s = what, interval_s
        self.began = self._last_said = time.monotonic()
        self._latest: str | None = None
        self.outcome = "done"  # what the closing line says; a caller whose phase ended badly says so

    @property
    def poll_s(self) -> float:
        """How long a loop waiting on the child may block before checking whether a line is due."""
        return min(POLL_S, self.interval_s)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.began

    def feed(self, line: str) -> None:
        text = line.strip()
        if text and not text.startswith(PREFIX):
            self._latest = text if len(text) <= 160 else text[:157] + "..."
        self.tick()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_said < self.interval_s:
            return
        self._last_said = now
        said = f"; the engine says: {self._latest}" if self._latest else ""
        say(f"{self.what}: {now - self.began:.0f} s so far{said}")


def run_child(argv: Sequence[str], ticker: Ticker, *, timeout_s: float,
              env: Mapping[str, str]) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True)`` that ticks while it waits; TimeoutExpired past
    ``timeout_s`` (the child killed first), as subprocess.run raises it."""
    deadline = time.monotonic() + timeout_s
    with subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env)) as proc:
        while True:
            left = deadline - time.monotonic()
            try:
                out, err = proc.communicate(timeout=max(min(ticker.poll_s, left), 0.01))
                return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                if left <= ticker.poll_s:
                    proc.kill()
                    proc.communicate()
                    raise subprocess.TimeoutExpired(list(argv), timeout_s) from None
                ticker.tick()
