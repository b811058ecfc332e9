"""Where shards run. Each executor takes the shards to run now (Job) and the run options, checks before anything is
submitted that it can run them (its scheduler is there, no shard needs more GPUs than a node has), runs or submits
them, and says what it did. The work of a shard is always sweep.worker.run_shard; no scheduler of our own on top."""

from __future__ import annotations

import dataclasses
from typing import Any

from ... import contract

EXECUTORS = ("local", "slurm", "ray")


@dataclasses.dataclass(frozen=True)
class Job:
    shard_id: str
    preset: str
    argv: tuple[str, ...]  # the bench command, "{output_dir}" standing for the attempt's folder
    hash: str
    gpus: int
    time_limit_min: int
    estimate_s: float  # the plan's estimate of its wall time (progress lines' ETA)


@dataclasses.dataclass(frozen=True)
class Options:
    wait: bool = True
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch: tuple[str, ...] = ()  # more sbatch options, KEY=VALUE (submitit's slurm_additional_parameters)
    cpus_per_task: int = 1
    max_parallel: int | None = None  # Slurm array throttle (%N)
    ray_address: str | None = None
    parallel: int = 1  # local and ray: shards at once (Slurm's own throttle is max_parallel)


def not_runnable(gpus: int, capacity: int, where: str) -> str | None:
    """Why a shard needing ``gpus`` cannot run where the largest node has ``capacity``; None when it can."""
    return f"needs {gpus} GPU(s); {where} has at most {capacity} on one node" if gpus > capacity else None


def drop_hint(presets: list[str], capacity: int) -> str:
    return (f"drop {', '.join(sorted(set(presets))[:8])} from the spec: from presets.names where named there (a named "
            f"preset is kept whatever presets.filter says), else with presets.filter.max_gpus: {capacity}; or run on "
            "nodes with more GPUs")


def preflight(name: str, jobs: list[Job], options: Options) -> dict[str, Any]:
    """The executor's capacity (its scheduler there, GPUs per node), refusing before anything is submitted a shard
    that needs more GPUs than the largest node has."""
    module = get(name)
    found = module.capacity(options)
    big = [j for j in jobs if not_runnable(j.gpus, found["gpus"], module.WHERE)]
    if big:
        raise contract.PreconditionError(
            "sweep.shard_too_big", f"{len(big)} shard(s) need more GPUs than any node of {module.WHERE} has "
            f"({found['gpus']}): " + ", ".join(f"{j.shard_id} ({j.gpus})" for j in big[:8]),
            drop_hint([j.preset for j in big], found["gpus"]))
    return found


def missing_extra(extra: str, module: str) -> contract.PreconditionError:
    return contract.PreconditionError(
        "sweep.executor_missing", f"--executor {extra} needs the Python package {module!r}, which is not installed",
        f"pip install 'sglang-diffusion-benchmark-profile[{extra}]' (or pip install {module})")


def get(name: str) -> Any:
    if name == "local":
        from . import local as module
    elif name == "slurm":
        from . import slurm as module
    else:
        from . import ray as module
    return module
