"""A real single-node Slurm cluster on this machine for the sweep tests (issue 27): Debian's slurm-wlm and munge
(installed with apt-get when missing), slurmctld and slurmd on localhost with munge authentication as Slurm's
quick-start guide requires, every file in a temporary directory (SLURM_CONF points the clients at it), stopped after.

Skips (with the reason) only where the packages cannot be installed and this is not CI; in CI it fails instead."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("slurmctld", "slurmd", "munged", "sinfo", "sbatch", "squeue", "scancel")


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Slurm test cluster: {reason}")
    pytest.skip(f"Slurm test cluster: {reason}")


def ensure_installed() -> None:
    if all(shutil.which(d) for d in DAEMONS):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        unavailable("slurm-wlm is not installed and this is not root with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES], capture_output=True,
                          text=True, env=env, timeout=900)
    if proc.returncode:
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=600)
        proc = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES],
                              capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode or not all(shutil.which(d) for d in DAEMONS):
        unavailable(f"apt-get install {' '.join(PACKAGES)} failed: {proc.stderr[-500:]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024 * 3 // 4
    return 2048


def write_conf(root: Path, cpus: int) -> Path:
    host = socket.gethostname()
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=sweeptest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=3600
KillWait=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_memory_mb()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


@contextlib.contextmanager
def cluster(root: Path, cpus: int = 2, timeout_s: float = 60) -> Iterator[dict[str, str]]:
    """Start munged (unless one runs), slurmctld and slurmd; yield the environment clients need; stop ours after."""
    ensure_installed()
    conf = write_conf(root, cpus)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen] = []
    socket_path = root / "munge.socket"
    if subprocess.run(["munge", "-n"], capture_output=True).returncode:  # no munged answering on the default socket
        started.append(subprocess.Popen(["munged", "--foreground", "--force", "--socket", str(socket_path),
                                         "--pid-file", str(root / "munged.pid"), "--log-file", str(root / "munged.log"),
                                         "--seed-file", str(root / "munged.seed")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        env["SLURM_MUNGE_SOCKET"] = str(socket_path)
        conf.write_text(conf.read_text() + f"AuthInfo=socket={socket_path}\n")
        time.sleep(1)
    try:
        started.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)
        started.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline, state = time.monotonic() + timeout_s, ""
        while time.monotonic() < deadline:
            proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            state = proc.stdout.strip() or proc.stderr.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            logs = "".join((root / n).read_text()[-1500:] for n in ("slurmctld.log", "slurmd.log")
                           if (root / n).is_file())
            pytest.fail(f"the Slurm test node did not become idle in {timeout_s} s (last: {state}):\n{logs}")
        yield {"SLURM_CONF": str(conf)}
    finally:
        for proc in reversed(started):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
