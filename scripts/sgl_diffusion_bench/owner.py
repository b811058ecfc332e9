"""Who owns a thing a run leaves on disk (a run claim, a child cache): this process, identified so that a reused
pid is not mistaken for it (the kernel's start time of the process), and whether that owner is still alive."""

from __future__ import annotations

import os
import socket
from typing import Any


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None without /proc or pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    try:
        return int(text[text.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid exists here (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record(pid: int | None = None) -> dict[str, Any]:
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": _start_ticks(pid)}


def alive(owner: Any) -> bool:
    """True unless the owner is provably gone: same host, and its pid is absent or now a different process.
    An owner on another host (a shared filesystem) is assumed alive: we cannot look."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or owner["pid"] <= 0:
        return True
    if owner.get("host") != socket.gethostname():
        return True
    now = _start_ticks(owner["pid"])
    if now is None:
        return pid_alive(owner["pid"])
    return owner.get("start_ticks") in (None, now)
