"""A local Ray cluster for the sweep tests and benchmarks (issue 27): `ray start --head --block` bound to 127.0.0.1
on a free port, no dashboard, its files in its own /tmp folder; stopped after (terminating the head we started)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator


def ray_bin() -> Path:
    return Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def head(cpus: int | None = None, timeout_s: float = 120) -> Iterator[str]:
    """Yield the address HOST:PORT of a running head node."""
    port, temp = _free_port(), Path(f"/tmp/ray-sweep-{os.getpid()}")
    proc = subprocess.Popen([str(ray_bin()), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                             "--port", str(port), "--num-cpus", str(cpus or os.cpu_count() or 2), "--num-gpus", "0",
                             "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(temp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                raise RuntimeError(f"ray start failed: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not listen on {port} within {timeout_s} s")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)
