"""Runs one shard where an executor put it (this host, a Slurm task, a Ray task): the bench as a child process,
its output kept in the shard's folder, its state written before, during and after. A SIGTERM or an interrupt
(scancel, Ray cancel, preemption) stops the bench and leaves the shard failed with that reason, never running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import contract, fileio
from . import state as sweep_state


CANCEL_POLL_S = 1.0
PR_SET_PDEATHSIG = 1


class _Stopped(Exception):
    pass


def _on_term(signum, frame):
    raise _Stopped(f"signal {signal.Signals(signum).name}")


def _outcome(returncode: int, stdout: str) -> tuple[str, str | None, dict[str, Any] | None]:
    """done / failed and why, from the bench's exit status and its one JSON document."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return "failed", f"the bench exited {returncode} without a JSON document", None
    if document.get("schema") == "error.v1":
        error = document["error"]
        return "failed", f"{error['code']}: {error['message']}", document
    if returncode == 0 and document.get("ok"):
        return "done", None, document
    invalid = [f"{c.get('position') or c.get('index')}: {c['status']}" + (f" ({c['reasons'][0]})" if c.get("reasons")
               else "") for c in document.get("cells", []) if c.get("status") != "valid"]
    return "failed", f"the bench exited {returncode}; cells not valid: " + ("; ".join(invalid) or "none listed"), \
        document


def run_shard(folder: str, shard_id: str, argv_template: list[str], shard_hash: str, executor: str,
              job_id: str | None = None) -> dict[str, Any]:
    """Run the shard's next attempt; returns its final state and result text (the Ray driver collects them)."""
    root = Path(folder)
    attempt = sweep_state.next_attempt(root, shard_id)
    out_dir = sweep_state.attempt_dir(root, shard_id, attempt)
    fill = {"{output_dir}": str(out_dir), "{python}": sys.executable}  # this node's interpreter and folder
    argv = [fill.get(a, a) for a in argv_template]
    directory = sweep_state.shard_dir(root, shard_id)
    directory.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = directory / f"attempt-{attempt}.stdout.json", directory / f"attempt-{attempt}.stderr.log"
    job_id = job_id or _slurm_job_id()
    base = {"id": shard_id, "hash": shard_hash, "attempt": attempt, "executor": executor, "job_id": job_id,
            "host": socket.gethostname(), "pid": os.getpid(), "argv": argv, "started_at": contract.utc_now(),
            "started_unix": round(time.time(), 3)}
    (directory / "cancel").unlink(missing_ok=True)  # a cancel request was for an earlier attempt
    sweep_state.write_state(root, shard_id, {**base, "status": "running", "reason": None})
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _on_term) if _main_thread() else None
    child = None
    try:
        with open(stdout_path, "w", encoding="utf-8") as out, open(stderr_path, "w", encoding="utf-8") as err:
            child = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent)
            returncode = _wait(child, directory / "cancel" if executor == "local" else None)
        status, reason, _ = _outcome(returncode, stdout_path.read_text(encoding="utf-8"))
    except (_Stopped, KeyboardInterrupt) as exc:
        _stop(child)
        returncode, status = None, "failed"
        reason = f"cancelled: {exc or 'an interrupt'} reached the worker (scancel, Ray cancel or preemption)"
    except BaseException as exc:  # the scheduler's own exit (submitit requeueing a preempted job), a lost file system
        _stop(child)
        sweep_state.write_state(root, shard_id, {**base, "status": "failed", "exit_code": None,
                                                 "reason": f"stopped: {type(exc).__name__}: {exc}",
                                                 "finished_at": contract.utc_now()})
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    final = {**base, "status": status, "reason": reason, "exit_code": returncode, "finished_at": contract.utc_now(),
             "finished_unix": round(time.time(), 3), "wall_s": round(time.monotonic() - started, 3)}
    result_text = None
    if status == "done":
        result_text = stdout_path.read_text(encoding="utf-8")
        fileio.atomic_write_text(directory / "result.json", result_text)
        final["result_sha256"] = "sha256:" + fileio.sha256_bytes(result_text.encode("utf-8"))
    sweep_state.write_state(root, shard_id, final)
    return {"state": final, "result": result_text}


def _die_with_parent() -> None:
    """In the child: SIGTERM when the worker dies (killed by a scheduler), so no bench outlives its shard (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _wait(child: subprocess.Popen, cancel_file: Path | None) -> int:
    """The child's exit status; a cancel request file (sweep_diffusion cancel, local shards) stops it."""
    while True:
        try:
            return child.wait(timeout=CANCEL_POLL_S)
        except subprocess.TimeoutExpired:
            if cancel_file is not None and cancel_file.exists():
                raise _Stopped("a cancel request (sweep_diffusion cancel)") from None


def _stop(child: subprocess.Popen | None) -> None:
    if child is None or child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _slurm_job_id() -> str | None:
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return os.environ.get("SLURM_JOB_ID")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
