#!/usr/bin/env python3
"""The sweep executors' own overhead per shard (issue 27): N shards whose bench command is a `--dry-run` of
tiny-flux-cpu (the whole bench CLI, ~0.3 s, no engine), run by each executor on real schedulers: local, a
single-node Slurm cluster (tests/slurm_cluster.py; submitit job array) and a local Ray cluster (tests/ray_cluster.py).

Per shard: submit -> worker start (the executor's queueing and launch: what a shard waits before its bench starts,
hence before its first engine line), the worker's wall (the bench itself plus the worker's bookkeeping), and
worker end -> the driver knowing (collection: Slurm's queue poll, Ray's wait and result copy). Medians printed.

  .venv/bin/python benchmarks/sweep_executor_overhead.py --shards 4 [--no-slurm] [--no-ray]

Measured 2026-12-04 on the 2-core machine shared with other sessions (load 3.9-4.1), sglang 0.5.23, 4 shards each
(seconds; first/median/max over the shards of submit -> worker start, queueing behind earlier shards included):
  local: 0.00 / 0.65 / 1.24 start (one after another), worker wall 0.43, collection 0.00, total 1.68
  slurm: 1.79 / 2.53 / 3.19 start (array throttle 2), worker wall 0.67, collection 2.06 (the 2 s queue poll), 6.04
  ray:   2.74 / 3.20 / 3.65 start (runtime env upload + worker start), worker wall 0.83, collection 0.00, total 4.43
Against a tiny-model shard of 60-160 s on this machine (and minutes per GPU campaign) the executors add 2-5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

from sgl_diffusion_bench.sweep import executors, state  # noqa: E402


def jobs(n: int) -> list[executors.Job]:
    argv = ("{python}", "-m", "sgl_diffusion_bench.cli.bench", "--model", "tiny-flux-cpu", "--dry-run", "--json",
            "--label", "overhead", "--output-dir", "{output_dir}")
    return [executors.Job(f"dry-{i}", argv, f"sha256:{i:064d}", 0, 5) for i in range(n)]


def measure(name: str, n: int, options: executors.Options) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"sweep-overhead-{name}-"))
    state.prepare(folder, f"overhead-{name}", {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}})
    module = executors.get(name)
    todo = jobs(n)
    module.preflight(todo, options)
    submitted = time.time()
    module.submit(folder, todo, options)
    collected = time.time()
    states = [state.read_state(folder, j.shard_id) for j in todo]
    assert all(s["status"] == "done" for s in states), [s.get("reason") for s in states]
    start = [s["started_unix"] - submitted for s in states]
    wall = [s["wall_s"] for s in states]
    collect = collected - max(s["finished_unix"] for s in states)
    return {"executor": name, "shards": n, "submit_to_first_worker_start_s": round(min(start), 3),
            "submit_to_worker_start_s": round(statistics.median(start), 3),
            "submit_to_worker_start_max_s": round(max(start), 3), "worker_wall_s": round(statistics.median(wall), 3),
            "last_end_to_collected_s": round(collect, 3), "total_s": round(collected - submitted, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--no-slurm", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    rows = [measure("local", args.shards, executors.Options())]
    if not args.no_slurm:
        import os

        import slurm_cluster
        with slurm_cluster.cluster(Path(tempfile.mkdtemp(prefix="slurm-overhead-"))) as env:
            os.environ.update(env)
            rows.append(measure("slurm", args.shards, executors.Options(max_parallel=2)))
    if not args.no_ray:
        import ray_cluster
        with ray_cluster.head() as address:
            rows.append(measure("ray", args.shards, executors.Options(ray_address=address)))
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
