"""The Slurm executor, through submitit: one job array per resource shape (GPUs, time limit; normally one array for
the whole sweep), one array task per shard running sweep.worker.run_shard on the shared sweep folder. `--gres` comes
from the shard's GPUs (none for CPU presets), `--time` from its estimate; partition, account, QoS and further sbatch
options pass through. submitit requeues a preempted task (its SIGUSR2 handler); a cancelled one (scancel) is a failed
shard with that reason, written by the worker on SIGTERM, or by the driver when the task left the queue without one.

Waiting reads `squeue --states=all` (no accounting database needed, unlike sacct)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ... import contract, fileio, inputs, progress
from .. import state as sweep_state
from .. import worker
from . import Job, Options, missing_extra

NAME = "slurm"
WHERE = "the Slurm cluster"
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD",
          "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED"}
POLL_S = 2.0
JOBS_FILE = "slurm-jobs.json"


def _command(argv: list[str], what: str) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise contract.PreconditionError("sweep.slurm_unreachable", f"{what} failed: {exc}",
                                         "check that slurmctld is up (sinfo) and this host is a Slurm client") from None
    if proc.returncode:
        raise contract.PreconditionError("sweep.slurm_unreachable", f"{what} failed: {proc.stderr.strip()[-400:]}",
                                         "check that slurmctld is up (sinfo) and this host is a Slurm client") from None
    return proc.stdout


def node_gpus(gres_text: str) -> int:
    """GPUs of one node from sinfo's %G, e.g. 'gpu:h200:8(S:0-1)', 'gpu:4,shard:8' or '(null)'."""
    total = 0
    for item in gres_text.split(","):
        match = re.fullmatch(r"gpu(?::[^:(]+)?:(\d+)(?:\(.*\))?", item.strip())
        total += int(match[1]) if match else 0
    return total


def capacity(options: Options) -> dict[str, Any]:
    missing = [c for c in ("sbatch", "squeue", "sinfo", "scancel") if shutil.which(c) is None]
    if missing:
        raise contract.PreconditionError("sweep.no_slurm", f"no Slurm on PATH: {', '.join(missing)} not found",
                                         "run from a Slurm login node, or use --executor local or ray")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise missing_extra("slurm", "submitit") from None
    lines = _command(["sinfo", "-h", "-N", "-o", "%N %G"], "sinfo").split()
    return {"gpus": max((node_gpus(g) for g in lines[1::2]), default=0), "nodes": len(set(lines[0::2]))}


def _sbatch_parameters(options: Options) -> dict[str, str | bool]:
    """--sbatch KEY=VALUE (or a bare KEY: a flag) as submitit's additional parameters."""
    extra: dict[str, str | bool] = {}
    for item in options.sbatch:
        key, sep, value = item.partition("=")
        extra[key.lstrip("-").replace("-", "_")] = value if sep else True
    return extra


def submit(folder: Path, jobs: list[Job], options: Options) -> dict[str, Any]:
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder / "slurm" / "%j"))
    job_ids: dict[str, str] = {}
    shapes = sorted({(j.gpus, j.time_limit_min) for j in jobs})
    for gpus, limit in shapes:
        group = [j for j in jobs if (j.gpus, j.time_limit_min) == (gpus, limit)]
        parameters: dict[str, Any] = {"time": limit, "nodes": 1, "ntasks_per_node": 1,
                                      "cpus_per_task": options.cpus_per_task, "job_name": "sweep-diffusion",
                                      "additional_parameters": {"requeue": True, **_sbatch_parameters(options)}}
        if gpus:
            parameters["gres"] = f"gpu:{gpus}"
        for key in ("partition", "account", "qos"):
            if getattr(options, key):
                parameters[key] = getattr(options, key)
        if options.max_parallel:
            parameters["array_parallelism"] = options.max_parallel
        executor.update_parameters(**parameters)
        with executor.batch():
            submitted = [executor.submit(worker.run_shard, str(folder), j.shard_id, list(j.argv), j.hash, NAME)
                         for j in group]
        for job, sub in zip(group, submitted, strict=True):
            job_ids[job.shard_id] = sub.job_id
            queued = {"id": job.shard_id, "hash": job.hash, "status": "pending", "executor": NAME,
                      "job_id": sub.job_id, "reason": f"queued as Slurm job {sub.job_id}",
                      "attempt": (sweep_state.read_state(folder, job.shard_id) or {}).get("attempt", 0),
                      "submitted_at": contract.utc_now()}
            sweep_state.write_state(folder, job.shard_id, queued)
    fileio.atomic_write_text(folder / JOBS_FILE, json.dumps(job_ids, indent=1, sort_keys=True))
    progress.say(f"submitted {len(jobs)} shard(s) to Slurm: " + ", ".join(sorted(set(job_ids.values()))),
                 source="sweep")
    if options.wait:
        wait(folder, job_ids)
    return {"executor": NAME, "submitted": [j.shard_id for j in jobs], "job_ids": job_ids}


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """Slurm's state of each job id still known to slurmctld (finished jobs stay listed for MinJobAge)."""
    if not job_ids:
        return {}
    out = _command(["squeue", "-h", "-r", "--states=all", "-o", "%i %T", "-j", ",".join(job_ids)], "squeue")
    return dict(line.split(None, 1) for line in out.splitlines() if line.strip())


def reconcile(folder: Path, job_ids: dict[str, str]) -> list[str]:
    """Shards whose task is over: a task that left without a result is failed, with Slurm's word for why."""
    states, over = queue_states(sorted(set(job_ids.values()))), []
    for shard_id, job_id in job_ids.items():
        slurm_state = states.get(job_id)
        if slurm_state in ACTIVE:
            continue
        over.append(shard_id)
        if (sweep_state.read_state(folder, shard_id) or {}).get("status") in ("pending", "running"):
            sweep_state.mark_failed(folder, shard_id, f"Slurm job {job_id} ended {slurm_state or 'and left the queue'}"
                                    " without a result (cancelled, timed out or its node lost)")
    return over


def wait(folder: Path, job_ids: dict[str, str]) -> None:
    remaining = dict(job_ids)
    while remaining:
        time.sleep(POLL_S)
        for shard_id in reconcile(folder, remaining):
            remaining.pop(shard_id)


def recorded_jobs(folder: Path) -> dict[str, str]:
    jobs = inputs.load_object_or_none(folder / JOBS_FILE) or {}
    return {str(k): str(v) for k, v in jobs.items()}


def cancel(job_id: str) -> None:
    _command(["scancel", job_id], "scancel")
