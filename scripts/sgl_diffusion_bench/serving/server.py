"""One real ``sglang serve`` per arm: started on 127.0.0.1 and a free port, health-checked, stopped.

Never left running: the server gets its own process group (engine_process.spawn_group: it dies with us even when we
are SIGKILLed), a watchdog child stops that whole group (the scheduler included) when we die without a chance to
clean up, ``stop`` is called from a ``finally`` (success, failure, Ctrl-C and SIGTERM, which the CLI turns into
Ctrl-C), and an ``atexit`` hook stops whatever is still up.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from .. import argv_tokens, contract, progress
from ..engine import engine_process

HOST = "127.0.0.1"
HEALTH_POLL_S = 0.25
LOG_TAIL_LINES = 25
GONE_WAIT_S = 10.0
STARTUP_HINT = "read the server log; fix the arm's flags or raise --startup-timeout-s for a slow model load"
_LIVE: set["Server"] = set()
# A child that watches us: when we die it stops the server's group (the kernel sends it SIGTERM via the parent-death
# signal; it waits on stdin, which closes when we die, as a second path). Python, so it runs wherever we do.
_WATCHDOG = ("import os, signal, sys\n"
             "pgid = int(sys.argv[1])\n"
             "def stop(*_):\n"
             "    try:\n        os.killpg(pgid, signal.SIGKILL)\n    except OSError:\n        pass\n"
             "    os._exit(0)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "sys.stdin.read()\n"
             "stop()\n")


@dataclasses.dataclass(frozen=True)
class ServerSpec:
    """What to start: ``argv`` is the whole ``sglang serve`` command (host and port included)."""

    arm: str
    argv: tuple[str, ...]
    env: dict[str, str]
    port: int
    run_dir: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "server.log"


PORTS_PER_SERVER = 2  # `sglang serve --port P` also binds its broker on P + 1


def serve_argv(sglang_cli: Sequence[str], model_path: str, port: int, arm_args: Sequence[str],
               engine_ports: Sequence[str]) -> list[str]:
    """``sglang serve`` on HOST:port with the engine's own ports (``engine_process.port_args``: two servers must not
    share the defaults)."""
    return [*sglang_cli, "serve", "--model-path", model_path, "--host", HOST, "--port", str(port),
            *engine_ports, *arm_args]


def server_ports(ports: dict[str, int]) -> set[int]:
    """Every port the servers on ``ports`` (arm -> --port) bind: theirs and their brokers'."""
    return {port + i for port in ports.values() for i in range(PORTS_PER_SERVER)}


def check_flags(engine: Any, argv_tail: Sequence[str], where: str) -> None:
    """Refuse, before anything starts, a flag the installed engine's parser does not have (``engine``: the probe's
    EngineCapabilities; `sglang serve` and `sglang generate` share the server arguments)."""
    missing = sorted({f for f in map(argv_tokens.flag_name, argv_tail) if f and engine.flag_acceptance(f) is None})
    if missing:
        raise contract.PreconditionError(
            "engine.flag_missing", f"{engine.label} has no {', '.join(missing)} (needed by {where})",
            "drop the flag or upgrade sglang; `sglang serve --help` lists what the installed engine takes",
            details={"missing_flags": missing, "engine_version": engine.version})


def check_port_free(port: int, option: str) -> None:
    """Refuse a port, or the broker port after it, that something already listens on (or that we may not bind)
    before any server starts."""
    for taken in range(port, port + PORTS_PER_SERVER):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, taken))
            except OSError as exc:
                why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
                what = f"{HOST}:{taken}" + ("" if taken == port else f" (the server's broker port, {option} + 1)")
                raise contract.PreconditionError(
                    "serving.port_in_use", f"{option} {port}: {what} {why}; no server was started",
                    f"stop what listens there, pick another port, or leave {option} out for a free one") from None


def check_given_ports(ports: dict[str, int]) -> None:
    """Refuse the ports given for the arms (arm letter -> port) that are taken or that overlap, brokers included."""
    for arm, port in ports.items():
        check_port_free(port, f"--port-{arm.lower()}")
    if len(server_ports(ports)) < PORTS_PER_SERVER * len(ports):
        raise contract.UsageError("usage.rejected_combination", "--port-a and --port-b are the same or adjacent "
                                  "ports (each server also binds the port after its own, for its broker)",
                                  "give each arm its own port, at least 2 apart, or leave them out")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [contract.redact(line) for line in text.splitlines()[-lines:]]


class Server:
    """One arm's server. ``start`` then ``wait_healthy``; ``stop`` always (idempotent)."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.process: subprocess.Popen | None = None
        self.watchdog: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self.started_monotonic: float | None = None
        self.healthy_after_s: float | None = None

    def start(self) -> None:
        spec = self.spec
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        secrets = contract.secret_values() + contract.secret_values(spec.env)
        log = open(spec.log_path, "w", encoding="utf-8", errors="replace")
        self.started_monotonic = time.monotonic()
        _LIVE.add(self)
        self.process = engine_process.spawn_group(
            list(spec.argv), env=spec.env, cwd=spec.run_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace", bufsize=1)
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.process.pid)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=engine_process.die_with_parent(signal.SIGTERM))

        def read() -> None:
            try:
                for raw in self.process.stdout:
                    log.write(contract.redact(raw.rstrip("\n"), secrets) + "\n")
                    log.flush()
            finally:
                log.close()

        self._reader = threading.Thread(target=read, name=f"server-log-{spec.arm}", daemon=True)
        self._reader.start()
        progress.say(f"server {spec.arm}: started (port {spec.port}, process group {self.process.pid}, log "
                     f"{spec.log_path})")

    @property
    def pgid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until ``/health`` answered 200; a ToolError with the log's tail when the server exits first or
        is not healthy within ``timeout_s`` (the server is stopped either way)."""
        deadline = self.started_monotonic + timeout_s
        url = self.spec.base_url + "/health"
        with progress.phase(f"server {self.spec.arm}: health check", f"port {self.spec.port}") as ticker:
            while True:
                if not self.alive():
                    self.stop()
                    message, details = self._startup_failure(
                        f"exited (code {self.process.returncode}) before it became healthy")
                    raise contract.ToolError("serving.server_exited", message, STARTUP_HINT, details=details)
                if _get_ok(url):
                    self.healthy_after_s = time.monotonic() - self.started_monotonic
                    return self.healthy_after_s
                if time.monotonic() >= deadline:
                    self.stop()
                    message, details = self._startup_failure(
                        f"did not answer GET /health with 200 within {timeout_s:g} s")
                    raise contract.ToolError("serving.server_unhealthy", message, STARTUP_HINT, details=details)
                ticker.tick()
                time.sleep(HEALTH_POLL_S)

    def _startup_failure(self, what: str) -> tuple[str, dict[str, Any]]:
        """The message (with the log's last lines) and details of a server that did not come up."""
        if self._reader is not None:
            self._reader.join(timeout=5)
        tail = log_tail(self.spec.log_path)
        shown = "\n".join(tail[-8:])
        message = (f"the server of arm {self.spec.arm} ({self.spec.base_url}) {what}; the last lines of "
                   f"{self.spec.log_path}:\n{shown}")
        return message, {"arm": self.spec.arm, "log": str(self.spec.log_path), "log_tail": tail, "pgid": self.pgid}

    def stop(self) -> None:
        """SIGTERM the whole group, SIGKILL what is left after the grace period; then the watchdog."""
        if self.process is not None:
            engine_process.stop_group(self.process)
            deadline = time.monotonic() + GONE_WAIT_S  # SIGKILLed members take a moment to disappear
            while engine_process.group_alive(self.process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._reader is not None:
                self._reader.join(timeout=10)
            with contextlib.suppress(OSError, ValueError):
                self.process.stdout.close()
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait(timeout=10)
        _LIVE.discard(self)


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 (our own 127.0.0.1 URL)
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextlib.contextmanager
def running(specs: Sequence[ServerSpec], startup_timeout_s: float):
    """Start every server at once (their model loads overlap), wait until each is healthy, yield them, stop them
    all on the way out, whatever the way out is."""
    servers = [Server(spec) for spec in specs]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_healthy(startup_timeout_s)
        yield servers
    finally:
        for server in servers:
            server.stop()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_LIVE):
        server.stop()
