"""The Ray executor: shards as tasks on a running Ray cluster (by address), each asking for its GPUs (`num_gpus`)
and one CPU, with the bundle shipped as the task's runtime environment (working_dir: the bundle's own files, and
its scripts/ on PYTHONPATH, so nodes need only the Python with the engine). The driver waits, collects each task's
state and result into the sweep folder (nodes need not share a file system with it), and turns a task that ended
without a result (cancelled with ray.cancel, its worker killed, its node lost) into a failed shard with the reason.
`sweep_diffusion cancel` leaves a request file that this driver turns into ray.cancel of that task."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from ... import bench_env, contract, fileio, paths, progress, work_dirs
from .. import state as sweep_state
from .. import worker
from . import Job, Options, missing_extra

NAME = "ray"
WHERE = "the Ray cluster"
POLL_S = 1.0
EXCLUDES = [".venv*", ".cache", ".git", "tests", "outputs", "benchmarks/results", "*.egg-info", "__pycache__"]


def _address(options: Options) -> str:
    return options.ray_address or os.environ.get("RAY_ADDRESS") or "auto"


def _reachable(address: str) -> bool:
    """A quick TCP check of HOST:PORT (ray.init would retry for a minute before saying no)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return True  # 'auto' or a name Ray resolves itself
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            return True
    except OSError:
        return False


def runtime_env() -> dict[str, Any]:
    """The bundle's files as the task's working_dir (a checkout; an installed wheel is on the nodes already), and the
    driver's DIFFUSION_BENCH_* settings, its work root (assets, caches, the engine probe) included."""
    variables = {name: os.environ[name] for name in bench_env.VARIABLES if name in os.environ}
    variables.setdefault(bench_env.WORKDIR, str(work_dirs.work_root()[0]))
    if paths.is_checkout():
        return {"working_dir": str(paths.bundle_root()), "excludes": EXCLUDES,
                "env_vars": {**variables, "PYTHONPATH": "scripts"}}
    return {"env_vars": variables}


def connect(options: Options):
    try:
        import ray
    except ImportError:
        raise missing_extra("ray", "ray") from None
    address = _address(options)
    hint = "start one (ray start --head) or give its address with --ray-address HOST:6379"
    if not _reachable(address):
        raise contract.PreconditionError("sweep.no_ray_cluster", f"no Ray cluster answers at {address}", hint)
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, runtime_env=runtime_env(), logging_level="ERROR", log_to_driver=False,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise contract.PreconditionError("sweep.no_ray_cluster", f"no Ray cluster at {address}: {exc}", hint) \
            from None
    return ray


def capacity(options: Options) -> dict[str, Any]:
    ray = connect(options)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"gpus": max((int(n.get("Resources", {}).get("GPU", 0)) for n in nodes), default=0), "nodes": len(nodes)}


def _collect(folder: Path, shard_id: str, outcome: dict[str, Any]) -> None:
    """Write what the task returned where the driver keeps it (a no-op on a shared file system)."""
    directory = sweep_state.shard_dir(folder, shard_id)
    if outcome.get("result") is not None and not (directory / "result.json").is_file():
        directory.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write_text(directory / "result.json", outcome["result"])
    recorded = sweep_state.read_state(folder, shard_id) or {}
    if recorded.get("attempt", 0) <= outcome["state"]["attempt"]:
        sweep_state.write_state(folder, shard_id, outcome["state"])


def submit(folder: Path, jobs: list[Job], options: Options) -> dict[str, Any]:
    ray = connect(options)
    remote = ray.remote(worker.run_shard)
    refs = {}
    for job in jobs:
        task = remote.options(num_gpus=job.gpus, num_cpus=1, max_retries=0, name=f"sweep-{job.shard_id}")
        refs[job.shard_id] = task.remote(str(folder), job.shard_id, list(job.argv), job.hash, NAME)
        (sweep_state.shard_dir(folder, job.shard_id) / "cancel").unlink(missing_ok=True)
    task_ids = {shard_id: ref.task_id().hex() for shard_id, ref in refs.items()}
    progress.say(f"submitted {len(jobs)} shard(s) to the Ray cluster at {_address(options)}", source="sweep")
    waiting = dict(refs)
    while waiting:
        done, _ = ray.wait(list(waiting.values()), num_returns=1, timeout=POLL_S)
        for shard_id, ref in list(waiting.items()):
            if (sweep_state.shard_dir(folder, shard_id) / "cancel").is_file() and ref not in done:
                ray.cancel(ref)  # the task sees KeyboardInterrupt: its worker stops the bench, writes failed
                (sweep_state.shard_dir(folder, shard_id) / "cancel").unlink(missing_ok=True)
            if ref not in done:
                continue
            waiting.pop(shard_id)
            try:
                _collect(folder, shard_id, ray.get(ref))
            except Exception as exc:  # TaskCancelledError, WorkerCrashedError, NodeDiedError, a task error
                sweep_state.mark_failed(folder, shard_id, f"the Ray task ended without a result: "
                                        f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
    return {"executor": NAME, "submitted": [j.shard_id for j in jobs], "job_ids": task_ids}
