#!/usr/bin/env python3
"""Scale on paper (issue 27): the whole preset catalog as one sweep on a cluster of N nodes x 8 GPUs, for 4 GPU
classes: wall time, GPU-hours, what dominates (model loads, measured cells, queueing) and what the warm engine saves.

A simulation, not a measurement: every shard's time comes from the plan's cost model (sweep/plan.py: an engine load
of LOAD_S, a per-task cell time) scaled by a GPU class's speed relative to the H200 (assumed, below); shards go on
the nodes longest first (greedy list scheduling of the GPU count each needs on one node; Slurm's backfill does no
worse). Warm: one load per engine configuration (eager and BCG: 2 per A/B/B/A campaign); cold: one per cell.

  .venv/bin/python benchmarks/sweep_cost_model.py --nodes 1 2 4 --rounds 2
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from sgl_diffusion_bench import presets  # noqa: E402
from sgl_diffusion_bench.sweep import plan  # noqa: E402

# Time per cell and per load relative to an H200 (assumptions, not measurements: roughly their bf16 dense throughput
# and memory bandwidth ratios); loads scale less (storage and host bound).
GPU_CLASSES = {"h200": (1.0, 1.0), "h100": (1.15, 1.0), "a100": (2.0, 1.2), "l40s": (2.6, 1.3)}
GPUS_PER_NODE = 8


def shards(rounds: int, cold: bool) -> list[tuple[str, int, float, float]]:
    """(preset, GPUs, load seconds, measured seconds) per GPU preset of the catalog, on an H200."""
    out = []
    for preset in presets.load_presets():
        if preset.num_gpus == 0:
            continue
        cells = 4 * rounds
        loads = cells if cold else 2
        out.append((preset.name, preset.num_gpus, loads * plan.LOAD_S["gpu"],
                    cells * plan.CELL_S.get(preset.task, plan.DEFAULT_CELL_S)))
    return out


def schedule(jobs: list[tuple[str, int, float]], nodes: int) -> tuple[float, float]:
    """Makespan and total queueing (s): each job takes `gpus` GPUs of one node; longest first."""
    free = [[0.0] * GPUS_PER_NODE for _ in range(nodes)]  # per node, per GPU: when it is free
    queued = 0.0
    for _, gpus, duration in sorted(jobs, key=lambda j: -j[2] * j[1]):
        best = None
        for n, node in enumerate(free):
            start = sorted(node)[gpus - 1]  # the earliest time `gpus` GPUs of this node are free
            if best is None or start < best[0]:
                best = (start, n)
        start, n = best
        chosen = heapq.nsmallest(gpus, range(GPUS_PER_NODE), key=lambda g: free[n][g])
        for g in chosen:
            free[n][g] = start + duration
        queued += start
    return max(max(node) for node in free), queued


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("| GPU class | nodes | engine | shards | wall (h) | GPU-hours | loads | cells | mean queueing (h) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (cell_factor, load_factor) in GPU_CLASSES.items():
        for nodes in args.nodes:
            for cold in (False, True):
                rows = shards(args.rounds, cold)
                jobs = [(p, g, load * load_factor + measured * cell_factor) for p, g, load, measured in rows]
                wall, queued = schedule(jobs, nodes)
                gpu_h = sum(g * d for _, g, d in jobs) / 3600
                load_h = sum(g * load * load_factor for _, g, load, _ in rows) / 3600
                cell_h = sum(g * m * cell_factor for _, g, _, m in rows) / 3600
                print(f"| {name} | {nodes} | {'cold' if cold else 'warm'} | {len(jobs)} | {wall / 3600:.2f} | "
                      f"{gpu_h:.1f} | {load_h / gpu_h:.0%} | {cell_h / gpu_h:.0%} | {queued / len(jobs) / 3600:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
