"""Run one engine process (``sglang generate`` and the like) and watch its log as it happens.

Generic on purpose: what a line means is the caller's business (``on_line``); this module only streams, records
and stops. The engine gets its own session so that stopping it also stops the worker processes it spawned, it dies with
us even when we are SIGKILLed (parent-death signal), and
every line reaches the log file (redacted, flushed) before anyone acts on it, so nothing is lost on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Collection, Iterable, TextIO

from .. import contract, progress
from . import engine_python
from .inside.cpu_adapter import sgl_cpu_adapter

ADAPTER_DIR = Path(__file__).resolve().parent / "inside" / "cpu_adapter"
STOP_GRACE_S = 5.0
TIMEOUT_REASON = "timeout"


@dataclasses.dataclass(frozen=True)
class EngineRun:
    returncode: int | None  # None only if the process could not be reaped after SIGKILL
    wall_s: float
    stop_reason: str | None  # why we stopped it (on_line's reason or "timeout"); None if it exited by itself
    stop_line: str | None  # the log line that triggered the stop
    stopped_after_s: float | None  # seconds from start to the stop decision
    log_path: Path
    interrupted: bool = False  # Ctrl-C: set on the copy attached to the re-raised KeyboardInterrupt (.engine_run)


def sglang_cli(python: str | None = None) -> list[str]:
    """The ``sglang`` entry point of ``python`` (default: this interpreter); see engine_python.sglang_cli."""
    return engine_python.sglang_cli(python or sys.executable)


def cpu_adapter_env(base: dict[str, str], disable: Iterable[str] = ()) -> dict[str, str]:
    """``base`` with the CPU adapter first on PYTHONPATH, the hub offline, and the named adapter patches off."""
    disabled = sgl_cpu_adapter.parse_disabled(",".join(disable))  # raises ValueError on an unknown id
    child = dict(base)
    rest = [p for p in child.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ADAPTER_DIR)]
    child["PYTHONPATH"] = os.pathsep.join([str(ADAPTER_DIR), *rest])
    child["HF_HUB_OFFLINE"] = "1"
    if disabled:
        child[sgl_cpu_adapter.DISABLE_ENV] = ",".join(p for p in sgl_cpu_adapter.PATCHES if p in disabled)
    else:
        child.pop(sgl_cpu_adapter.DISABLE_ENV, None)
    return child


PORT_PICK_LOW = 20000  # fresh ports are picked from here up to the OS's ephemeral range


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 1, avoid: Collection[int] = ()) -> int:
    """The first of ``span`` consecutive TCP ports free on 127.0.0.1 right now, none of them in ``avoid``.

    Below the OS's ephemeral range, so that a port the OS hands out (another process's connect() or bind to port 0)
    cannot land there between this check and the engine's bind, which under load comes a minute later; the search
    starts at a random port so that concurrent runs pick apart.
    """
    low, high = PORT_PICK_LOW, _ephemeral_low() - span + 1
    if high - low < 1000:  # an unusual ephemeral range: anywhere unprivileged
        low, high = 1024, 65536 - span + 1
    avoided, start = set(avoid), random.SystemRandom().randrange(low, high)
    for port in itertools.chain(range(start, high), range(low, start)):
        block = range(port, port + span)
        if avoided.isdisjoint(block) and all(map(_bindable, block)):
            return port
    raise contract.PreconditionError(
        "engine.no_free_port", f"no {span} free consecutive TCP port(s) on 127.0.0.1 between {low} and "
        f"{high + span - 2}", "stop processes that hold many local ports, then run again")


def port_args(avoid: Collection[int] = ()) -> list[str]:
    """``--master-port``/``--scheduler-port`` with fresh free ports (none in ``avoid``): the defaults (30005,
    5555+random) collide between concurrent runs, since 0.5.10.post1 only checks availability at parse time."""
    master = free_port(avoid=avoid)
    scheduler = free_port(avoid={*avoid, master})
    return ["--master-port", str(master), "--scheduler-port", str(scheduler)]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that ties the child to this process: when we die (even by SIGKILL) the kernel sends it
    ``signum``. sglang's own workers already die with their CLI process, so this closes the chain runner -> engine
    -> workers. Armed from the spawning thread (the kernel watches the thread), so spawn from a long-lived thread.
    """
    parent = os.getpid()

    def arm() -> None:
        if sys.platform == "linux":
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # we died between fork and prctl: the signal will never come
            os._exit(1)

    return arm


SPAWNED_GROUPS: set[int] = set()  # process groups of the engines this process started (host_load names them ours)


def spawn_group(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """Popen in its own session/process group that dies with us (see die_with_parent)."""
    process = subprocess.Popen(argv, start_new_session=True, preexec_fn=die_with_parent(), **popen_kwargs)
    SPAWNED_GROUPS.add(process.pid)  # a new session: its group id is its pid, kept by workers it forks
    return process


def run_tied(argv: list[str], env: dict[str, str], stdout=None) -> int:
    """Run a command to completion in its own process group that dies with us; Ctrl-C or SIGTERM stops the whole
    group before we leave, so a leased command never outlives its lease."""
    process = spawn_group(argv, env=env, stdout=stdout, stdin=None)
    try:
        return process.wait()
    finally:
        if process.poll() is None or group_alive(process.pid):
            stop_group(process)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still there (one we may not signal counts as there)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group (workers included), give it STOP_GRACE_S, then SIGKILL what is left."""
    grace_s = STOP_GRACE_S
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (process.poll() is None or group_alive(process.pid)):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)


def run_engine(argv: list[str], env: dict[str, str], log_path: Path,
               on_line: Callable[[str], str | None] | None = None, timeout_s: float | None = None,
               echo: TextIO | None = None, cwd: Path | None = None,
               on_started: Callable[[int], None] | None = None, ticker: progress.Ticker | None = None) -> EngineRun:
    """Run ``argv`` to completion, or until ``on_line`` returns a reason, ``timeout_s`` passes, or Ctrl-C.

    Lines the engine prints while it is being stopped are still logged (not passed to ``on_line``). ``on_started``
    is called with the process id (also its process group's) once it runs: the caller's own work started there
    overlaps the engine's start. ``ticker`` is fed every line and ticked while the engine is quiet, so a user sees
    what it does at least every few seconds.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    secrets = contract.secret_values() + contract.secret_values(env)
    start = time.monotonic()
    stop: dict[str, object] = {}
    lock = threading.Lock()
    stopper: list[threading.Thread] = []

    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        process = spawn_group(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, encoding="utf-8", errors="replace", bufsize=1)

        def request_stop(reason: str, line: str | None) -> None:
            """Record the first stop decision and stop the group in the background while the log drains."""
            with lock:
                if stop or process.poll() is not None:
                    return
                stop.update(reason=reason, line=line, after_s=time.monotonic() - start)
                stopper.append(threading.Thread(target=stop_group, args=(process,), daemon=True))
            stopper[0].start()

        timer = threading.Timer(timeout_s, request_stop, (TIMEOUT_REASON, None)) if timeout_s is not None else None
        quiet = _heartbeat(ticker) if ticker is not None else None
        try:
            if on_started is not None:
                on_started(process.pid)
            if timer:
                timer.daemon = True
                timer.start()
            for raw in process.stdout:
                line = contract.redact(raw.rstrip("\n"), secrets)
                log.write(line + "\n")
                log.flush()
                if echo is not None:
                    print(line, file=echo, flush=True)
                if ticker is not None:
                    ticker.feed(line)
                if on_line is not None and not stop:
                    reason = on_line(line)
                    if reason:
                        request_stop(reason, line)
            process.wait()
        except KeyboardInterrupt as interrupt:
            stop_group(process)
            log.write("[run_engine] interrupted (Ctrl-C): engine process group stopped\n")
            interrupt.engine_run = EngineRun(  # type: ignore[attr-defined]  # what ran, for the caller's record
                returncode=process.returncode, wall_s=time.monotonic() - start, stop_reason="interrupted",
                stop_line=None, stopped_after_s=time.monotonic() - start, log_path=log_path, interrupted=True)
            raise
        finally:
            if timer:
                timer.cancel()
            if quiet is not None:
                quiet.set()
            if process.poll() is None:
                stop_group(process)
            for thread in stopper:
                thread.join()
            process.stdout.close()
        if stop:
            log.write(f"[run_engine] stopped after {stop['after_s']:.2f} s: {stop['reason']}\n")
    return EngineRun(returncode=process.returncode, wall_s=time.monotonic() - start,
                     stop_reason=stop.get("reason"), stop_line=stop.get("line"),
                     stopped_after_s=stop.get("after_s"), log_path=log_path)


def _heartbeat(ticker: progress.Ticker) -> threading.Event:
    """Tick ``ticker`` while the engine prints nothing (loading a model can be silent for half a minute); set the
    returned event to stop."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(ticker.poll_s):
            ticker.tick()

    threading.Thread(target=beat, name="engine-heartbeat", daemon=True).start()
    return done
