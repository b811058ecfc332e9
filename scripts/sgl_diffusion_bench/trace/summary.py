"""Assemble the analyses of one trace into the payload of a ``trace-hotspots.v1`` document (data only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .analyses.hotspots import analyze_cpu_ops, analyze_kernels, analyze_memory_ops, cpu_op_totals, totals
from .analyses.launches import analyze_launches
from .analyses.ranks import rank_figures
from .analyses.stages import analyze_stages
from . import pieces
from .load import load_trace
from .model import Trace


def trace_info(trace: Trace) -> dict:
    return {"path": trace.source, "json_bytes": trace.json_bytes, "events": trace.event_count, "rank": trace.rank,
            "world_size": trace.world_size, "stage_source": trace.stage_source, "step_source": trace.step_source}


def bounded(body: dict, top: int) -> dict:
    """The same body with the kernel and CPU-op tables cut to their ``top`` rows (for stdout)."""
    return {**body, "kernels": body["kernels"][:top], "kernels_shown": min(top, len(body["kernels"])),
            "cpu_ops": body["cpu_ops"][:top]}


def hotspots_body(trace: Trace, top: int | None) -> dict:
    """Kernels (bounded by ``top`` when given), memory ops, launches, stages, steps, denoise summary, CPU ops."""
    kernels = analyze_kernels(trace)
    launches = analyze_launches(trace)
    stage_result = analyze_stages(trace)
    cpu_ops = analyze_cpu_ops(trace)
    limit = len(kernels) if top is None else top
    return {
        "trace": trace_info(trace),
        "kernels": kernels[:limit],
        "kernels_total": totals(kernels),
        "kernels_shown": min(limit, len(kernels)),
        "memory_ops": analyze_memory_ops(trace),
        "launches": launches["launches"],
        "host_launches": launches["host_launches"],
        "graph_launches": launches["graph_launches"],
        "runtime_calls": launches["runtime_calls"],
        "unresolved_calls": launches["unresolved_calls"],
        "stages": stage_result["stages"],
        "unattributed": stage_result["unattributed"],
        "steps": stage_result["steps"],
        "denoise": stage_result["denoise"],
        "cpu_ops": cpu_ops[: (len(cpu_ops) if top is None else top)],
        "cpu_ops_total": cpu_op_totals(cpu_ops),
    }


def rank_summary(path: str | Path, processes: int | None = None) -> tuple[dict, dict]:
    """One rank's hotspots body and its rank figures: all a several-rank report needs of its trace."""
    trace = load_trace(path, processes)
    return hotspots_body(trace, None), rank_figures(trace)


def rank_summaries(paths: list[str], meanwhile: Callable[[], object] | None = None) -> list[tuple[dict, dict]]:
    """``rank_summary`` of each trace, one process per trace up to the host's cores (the cores left over decode
    pieces of each trace; ``meanwhile`` runs here while they work): each process holds one trace at a time, so
    memory is bounded per rank; results come back in ``paths`` order, and a trace's error is raised here."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(len(paths), cores) if pieces.usable_processes() > 1 else 1  # (1 where fork is missing)
    if workers < 2:
        return [rank_summary(p) for p in paths]
    import numpy  # noqa: F401  (each rank's analysis needs it: imported once here, not once per worker)
    with pieces.forked_pool(workers) as pool:
        pending = pool.map(rank_summary, paths, [max(1, cores // len(paths))] * len(paths))
        if meanwhile is not None:
            meanwhile()
        return list(pending)
