"""The local executor (the default, needs nothing): shards on this host, one after another or --parallel N at a time
(GPU shards then take distinct GPUs through the bench's own leases). A shard needing more GPUs than this host has is
refused before any shard runs. Ctrl-C (or SIGTERM) of the sweep stops the running shards: they are failed shards with
that reason, and the rest stay pending."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

from ... import contract, fileio
from ...engine import gpu
from .. import state as sweep_state
from .. import worker
from . import Job, Options

NAME = "local"
WHERE = "this host"


def capacity(options: Options) -> dict[str, Any]:
    return {"gpus": len(gpu.read_inventory().gpus), "parallel": options.parallel}


def _one(folder: Path, job: Job) -> dict[str, Any]:
    return worker.run_shard(str(folder), job.shard_id, list(job.argv), job.hash, NAME)


def submit(folder: Path, jobs: list[Job], options: Options) -> dict[str, Any]:
    if options.parallel <= 1:
        for job in jobs:
            if (_one(folder, job)["state"]["reason"] or "").startswith("cancelled"):
                raise KeyboardInterrupt  # the sweep itself was stopped: the rest stay pending
        return {"executor": NAME, "submitted": [j.shard_id for j in jobs], "job_ids": {}}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=options.parallel)
    futures = [pool.submit(_one, folder, job) for job in jobs]
    try:
        for future in futures:
            future.result()
    except KeyboardInterrupt:
        for future in futures:
            future.cancel()
        for job in jobs:  # the workers poll this file and stop their bench
            if (sweep_state.read_state(folder, job.shard_id) or {}).get("status") == "running":
                fileio.atomic_write_text(sweep_state.shard_dir(folder, job.shard_id) / "cancel", contract.utc_now())
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)
    return {"executor": NAME, "submitted": [j.shard_id for j in jobs], "job_ids": {}}
