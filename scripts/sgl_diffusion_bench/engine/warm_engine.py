"""One warm engine process (warm_driver.py under the engine's interpreter): start it, wait until it is built, send
requests, and cut its log into one segment per request.

The driver brackets each request's log lines with ``BEGIN``/``END`` markers, so a request's evidence (its log lines,
perf dump, output) is judged exactly as a cold cell's is. Every line reaches the engine's log file (redacted,
flushed) before anyone acts on it; a stop reason from ``on_line`` (a diffusers fallback), a timeout or Ctrl-C stops
the whole process group, workers included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from .. import contract, progress
from . import engine_process
from .inside.warm_driver import MARKER

DRIVER_PATH = Path(__file__).resolve().parent / "inside" / "warm_driver.py"
QUIT_GRACE_S = 60.0


@dataclasses.dataclass
class Segment:
    """The log lines of one phase of a warm engine (its start, or one request) and how that phase ended."""

    status: str  # ok | error (the request raised; the engine serves on) | stopped | timeout | exited
    lines: list[str]
    wall_s: float
    engine_s: float | None = None  # the driver's own timing of the phase
    error: str | None = None
    stop_reason: str | None = None
    stop_line: str | None = None
    stopped_after_s: float | None = None


def driver_argv(python: str, generate_args: list[str]) -> list[str]:
    """The warm driver under ``python`` with the arguments ``sglang generate`` would get."""
    return [python, str(DRIVER_PATH), *generate_args]


class WarmEngine:
    """A resident engine. ``start`` then ``wait_ready`` once, ``serve`` per request, ``close`` at the end."""

    def __init__(self, engine_id: str, argv: list[str], env: dict[str, str], log_path: Path, *,
                 cwd: Path | None = None, echo: TextIO | None = None):
        self.engine_id, self.argv, self.env, self.log_path, self.cwd, self.echo = (
            engine_id, argv, env, Path(log_path), cwd, echo)
        self.process: subprocess.Popen | None = None
        self.started_monotonic: float | None = None
        self.ready_monotonic: float | None = None  # when the log thread read READY (the load's end, even unawaited)
        self.closed = False
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._eof = False
        self._log_lock = threading.Lock()
        self._log: TextIO | None = None
        self._secrets: list[str] = []

    # -- process -------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the driver; an engine that took over a running probe interpreter (``adopted``) is sent its build
        instead, its log switched to this engine's."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_lock:
            if self._log is not None:  # an adopted engine's placeholder
                self._log.close()
            self._secrets = contract.secret_values() + contract.secret_values(self.env)
            self._log = open(self.log_path, "w", encoding="utf-8", errors="replace")
        self.started_monotonic = time.monotonic()
        if self.process is not None:  # adopted: its reader runs on; the driver builds from this message
            self._send({"build": {"argv": self.argv[2:], "env": self.env,
                                  "cwd": str(self.cwd) if self.cwd is not None else os.getcwd()}})
            return
        self.process = engine_process.spawn_group(  # own group, dies with the runner even on SIGKILL
            self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace", bufsize=1)

        def read() -> None:
            try:
                for raw in self.process.stdout:
                    with self._log_lock:
                        line = contract.redact(raw.rstrip("\n"), self._secrets)
                        self._log.write(line + "\n")
                        self._log.flush()
                    if self.echo is not None:
                        print(line, file=self.echo, flush=True)
                    if self.ready_monotonic is None and line.startswith(MARKER) and \
                            line[len(MARKER):].split()[:1] == ["READY"]:
                        self.ready_monotonic = time.monotonic()
                    self._lines.put(line)
            finally:
                with self._log_lock:
                    self._log.close()
                self._lines.put(None)

        self._reader = threading.Thread(target=read, name=f"warm-engine-{self.engine_id}", daemon=True)
        self._reader.start()

    def adopt(self, engine_id: str, argv: list[str], env: dict[str, str], log_path: Path, *,
              cwd: Path | None = None, echo: TextIO | None = None) -> "WarmEngine":
        """This running probe interpreter (waiting after ``PROBED``) as the engine ``argv`` describes; ``start``
        then sends the build. The probe's log is closed here (the driver is silent until the build)."""
        with self._log_lock:
            self._log.close()
            self._log = open(os.devnull, "w", encoding="utf-8")  # until start opens this engine's log
        self.engine_id, self.argv, self.env, self.log_path, self.cwd, self.echo = (
            engine_id, argv, env, Path(log_path), cwd, echo)
        return self

    def _send(self, message: dict) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None and not self._eof

    def pids(self) -> set[int]:
        """Every live process of this engine's group (the driver and the workers it spawned)."""
        if self.process is None:
            return set()
        return process_group_members(self.process.pid)

    def stop(self) -> None:
        """Stop the whole group now (SIGTERM, then SIGKILL after a grace period)."""
        if self.process is not None and (self.process.poll() is None or engine_process.group_alive(self.process.pid)):
            engine_process.stop_group(self.process)

    def close(self) -> float:
        """Ask the driver to shut the engine down; stop it if it does not within QUIT_GRACE_S. Returns seconds."""
        began = time.monotonic()
        if self.process is None or self.closed:
            return 0.0
        self.closed = True
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.flush()
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=QUIT_GRACE_S)
        self.stop()
        if self._reader is not None:
            self._reader.join(timeout=QUIT_GRACE_S)
        return time.monotonic() - began

    # -- phases --------------------------------------------------------------------------------------------------

    def wait_ready(self, on_line: Callable[[str], str | None] | None, timeout_s: float | None,
                   ticker: progress.Ticker | None = None) -> Segment:
        """Lines up to the driver's READY: loading the model and the engine's own startup warmup (``ticker`` gets
        every line, and a tick while the engine is quiet)."""
        return self.wait_marker("READY", on_line, timeout_s, ticker)

    def wait_marker(self, word: str, on_line: Callable[[str], str | None] | None, timeout_s: float | None,
                    ticker: progress.Ticker | None = None) -> Segment:
        """Lines up to the driver's next ``word`` marker (READY after a build, PROBED after a probe)."""
        return self._consume(lambda words: words[0] == word, on_line, timeout_s, ticker)

    def serve(self, request_id: str, generate_args: list[str], on_line: Callable[[str], str | None] | None,
              timeout_s: float | None, ticker: progress.Ticker | None = None) -> Segment:
        """Send one request (the arguments ``sglang generate`` would get) and collect its lines until its END."""
        if not self.alive:
            return Segment("exited", [], 0.0, error="the engine is no longer running")
        try:
            self.process.stdin.write(json.dumps({"id": request_id, "argv": generate_args}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            return Segment("exited", [], 0.0, error=f"the engine took no request: {exc}")
        return self._consume(lambda words: words[0] == "END" and words[1:2] == [request_id], on_line, timeout_s,
                             ticker)

    def _consume(self, done: Callable[[list[str]], bool], on_line: Callable[[str], str | None] | None,
                 timeout_s: float | None, ticker: progress.Ticker | None = None) -> Segment:
        began = time.monotonic()
        deadline = began + timeout_s if timeout_s is not None else None
        lines: list[str] = []
        stop: dict[str, object] = {}
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0 and not stop:
                stop.update(reason=engine_process.TIMEOUT_REASON, line=None, after=time.monotonic() - began)
                self.stop()
            wait = None if stop or remaining is None else max(remaining, 0.01)
            if ticker is not None and not stop:
                wait = ticker.poll_s if wait is None else min(wait, ticker.poll_s)
            try:
                line = self._lines.get(timeout=wait)
            except queue.Empty:
                if ticker is not None:
                    ticker.tick()
                continue
            if line is None:
                self._eof = True
                status = "timeout" if stop.get("reason") == engine_process.TIMEOUT_REASON else (
                    "stopped" if stop else "exited")
                return Segment(status, lines, time.monotonic() - began, stop_reason=stop.get("reason"),
                               stop_line=stop.get("line"), stopped_after_s=stop.get("after"),
                               error=None if stop else f"the engine exited (code {self.process.wait()})")
            if line.startswith(MARKER):
                words = line[len(MARKER):].split()
                if words and done(words) and not stop:
                    engine_s = float(words[3 if words[0] == "END" else 1]) if len(words) > 1 else None
                    if words[0] == "END" and words[2] == "error":
                        error = line.split(None, 5)[-1] if len(words) > 4 else "the request raised"
                        return Segment("error", lines, time.monotonic() - began, engine_s, error=error)
                    return Segment("ok", lines, time.monotonic() - began, engine_s)
                continue
            lines.append(line)
            if ticker is not None:
                ticker.feed(line)
            if on_line is not None and not stop:
                reason = on_line(line)
                if reason:
                    stop.update(reason=reason, line=line, after=time.monotonic() - began)
                    self.stop()


def process_group_members(pgid: int) -> set[int]:
    """PIDs in process group ``pgid`` (Linux /proc; an empty set elsewhere)."""
    members = set()
    for entry in Path("/proc").iterdir() if sys.platform.startswith("linux") else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.add(int(entry.name))
    return members


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of every process in the group (Linux /proc)."""
    total = 0
    for pid in process_group_members(pgid):
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def available_memory_bytes() -> int | None:
    """MemAvailable of this machine (Linux), None where unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None
