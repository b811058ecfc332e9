"""Several ranks of one run together: communication (NCCL and custom all-reduce) apart from compute, and skew.

Collective kernel durations include the time a rank waits for its peers, so the rank with the *most* collective time
is usually the one that arrived first; compare the compute figures to find the straggler.
"""

from __future__ import annotations

import re

from ..model import KERNEL, Trace, union_intervals
from .hotspots import analyze_kernels
from .stages import denoise_stage_index

COMMUNICATION_KERNEL = re.compile(
    r"nccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|ring_attn", re.I)


def rank_figures(trace: Trace) -> dict:
    dev = trace.device
    is_comm = {n: bool(COMMUNICATION_KERNEL.search(trace.names[n])) for n in set(dev.name)}
    denoise = denoise_stage_index(trace)
    comm_rows, compute_rows = [], []
    for i in range(len(dev)):
        if dev.kind[i] == KERNEL:
            (comm_rows if is_comm[dev.name[i]] else compute_rows).append(i)
    def busy(rows):
        return round(sum(e - s for s, e in union_intervals((dev.ts[i], dev.ts[i] + dev.dur[i]) for i in rows)), 3)
    denoise_rows = [i for i in compute_rows + comm_rows if denoise >= 0 and trace.device_stage(i) == denoise]
    return {
        "rank": trace.rank, "source": trace.source,
        "compute": {"kernels": len(compute_rows), "total_us": round(sum(dev.dur[i] for i in compute_rows), 3),
                    "busy_us": busy(compute_rows)},
        "communication": {"kernels": len(comm_rows), "total_us": round(sum(dev.dur[i] for i in comm_rows), 3),
                          "busy_us": busy(comm_rows), "top": analyze_kernels(trace, comm_rows)[:5]},
        "denoise_gpu_us": busy(denoise_rows) if denoise >= 0 else None,
    }


def _skew(values: dict[int, float | None]) -> dict | None:
    present = {r: v for r, v in values.items() if v is not None}
    if len(present) < 2:
        return None
    low, high = min(present.values()), max(present.values())
    return {"min": low, "max": high, "spread_us": round(high - low, 3),
            "spread_pct": round(100 * (high - low) / high, 3) if high > 0 else 0.0,
            "max_rank": max(present, key=lambda r: (present[r], -r)),
            "min_rank": min(present, key=lambda r: (present[r], r))}


def analyze_ranks(ranks: list[dict], stage_results: list[dict]) -> dict:
    """The spread across ranks (overall and per denoise step) of each rank's ``rank_figures`` and step results."""
    keys = [r["rank"] if r["rank"] is not None else i for i, r in enumerate(ranks)]
    skew = {
        "compute_total_us": _skew({k: r["compute"]["total_us"] for k, r in zip(keys, ranks, strict=True)}),
        "communication_total_us": _skew({k: r["communication"]["total_us"] for k, r in zip(keys, ranks, strict=True)}),
        "denoise_gpu_us": _skew({k: r["denoise_gpu_us"] for k, r in zip(keys, ranks, strict=True)}),
    }
    per_step = []
    labels = [s["label"] for s in stage_results[0]["steps"]]
    for label in labels:
        values = {}
        for k, result in zip(keys, stage_results, strict=True):
            match = [s for s in result["steps"] if s["label"] == label]
            values[k] = match[0]["gpu_us"] if match else None
        per_step.append({"label": label, "gpu_us": {str(k): v for k, v in values.items()}, "skew": _skew(values)})
    return {"ranks": ranks, "skew": skew, "per_step": per_step}
