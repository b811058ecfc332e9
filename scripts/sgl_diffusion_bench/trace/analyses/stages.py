"""Per stage and per step: GPU time as the union of kernel intervals (overlaps once), kernels, launches, CPU time.

Kernels are attributed through their launch (see ``trace.model``), so a kernel that runs on the device after its
stage's CPU range closed still counts for the stage that launched it; a CUDA-graph replay counts for the stage of its
``cudaGraphLaunch``. Steps that lie wholly inside the denoise stage are the denoise steps used for per-step figures; a
profiler step that runs past the stage's end (the engine's last ``ProfilerStep`` also holds decoding) is partial.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from ..model import KERNEL, Trace
from .launches import is_graph_launch, is_kernel_launch

if TYPE_CHECKING:
    import numpy as np

DENOISE_STAGE = re.compile(r"denois", re.I)
NOT_DENOISE_STAGE = re.compile(r"before", re.I)


def denoise_stage_index(trace: Trace) -> int:
    """Index of the denoise stage (``DenoisingStage`` and variants, not ``...BeforeDenoisingStage``), or -1."""
    for i, stage in enumerate(trace.stages):
        if DENOISE_STAGE.search(stage.name) and not NOT_DENOISE_STAGE.search(stage.name):
            return i
    return -1


def call_flags(trace: Trace) -> tuple[list[bool], list[bool]]:
    """Per call: is it a per-kernel launch; is it a graph launch (classified once per distinct name)."""
    kernel = {n: is_kernel_launch(trace.names[n]) for n in set(trace.calls.name)}
    graph = {n: is_graph_launch(trace.names[n]) for n in kernel}
    return [kernel[n] for n in trace.calls.name], [graph[n] for n in trace.calls.name]


def _empty() -> dict:
    return {"gpu_us": 0.0, "kernels": 0, "host_launches": 0, "graph_launches": 0}


def _union_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals sorted by start (touching ones merge), summed in start order."""
    import numpy as np
    reach = np.maximum.accumulate(ends)
    opens = np.flatnonzero(np.concatenate(([True], starts[1:] > reach[:-1])))
    return sum((np.maximum.reduceat(ends, opens) - starts[opens]).tolist())


@dataclasses.dataclass(frozen=True)
class _Columns:
    """The kernel and call columns the per-key figures read, as numpy arrays, made once per analysis."""
    starts: np.ndarray  # per kernel
    ends: np.ndarray
    launched_by: np.ndarray  # index into calls, -1 when the launch is not in the trace
    stage: np.ndarray  # the stage of its launch, -1 when none
    is_launch: np.ndarray  # per call, 1.0 or 0.0
    is_graph: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> _Columns:
        import numpy as np
        dev = trace.device
        kernel = np.asarray(dev.kind, dtype=np.int64) == KERNEL
        starts = np.asarray(dev.ts, dtype=np.float64)[kernel]
        is_launch, is_graph = (np.asarray(flags, dtype=np.float64) for flags in call_flags(trace))
        return cls(starts, starts + np.asarray(dev.dur, dtype=np.float64)[kernel],
                   np.asarray(trace.device_call, dtype=np.int64)[kernel],
                   np.asarray(trace.device_stages, dtype=np.int64)[kernel], is_launch, is_graph)


def _bucketed(columns: _Columns, call_keys: np.ndarray, orphan_key: int) -> dict[int, dict]:
    """Figures per key of the launching call (``call_keys``: one per call, -1 drops it) over kernels and launch
    calls; a kernel whose launch is not in the trace goes to ``orphan_key`` (-1 drops it). Only keys some call or
    kernel has appear."""
    import numpy as np
    kept, launched_by = call_keys >= 0, columns.launched_by
    kernel_keys = np.full(launched_by.size, orphan_key, dtype=np.int64)
    if call_keys.size:
        kernel_keys = np.where(launched_by >= 0, call_keys[np.maximum(launched_by, 0)], orphan_key)
    size = int(max(call_keys.max(initial=-1), kernel_keys.max(initial=-1))) + 1
    calls = np.bincount(call_keys[kept], minlength=size)
    launches = np.bincount(call_keys[kept], weights=columns.is_launch[kept], minlength=size)
    graphs = np.bincount(call_keys[kept], weights=columns.is_graph[kept], minlength=size)
    kernels = np.bincount(kernel_keys[kernel_keys >= 0], minlength=size)
    order = np.lexsort((columns.starts, kernel_keys))
    starts, ends = columns.starts[order], columns.ends[order]
    bounds = np.searchsorted(kernel_keys[order], np.arange(size + 1))
    return {key: {"gpu_us": round(_union_us(starts[bounds[key]:bounds[key + 1]], ends[bounds[key]:bounds[key + 1]])
                                  if kernels[key] else 0.0, 3),
                  "kernels": int(kernels[key]), "host_launches": int(launches[key]),
                  "graph_launches": int(graphs[key])}
            for key in np.flatnonzero(calls + kernels).tolist()}


def _ops_inside(starts: np.ndarray, intervals) -> int:
    import numpy as np
    return sum(int(np.searchsorted(starts, e)) - int(np.searchsorted(starts, s)) for s, e in intervals)


def _inside(intervals, start: float, end: float) -> bool:
    return any(s <= start and end <= e for s, e in intervals)


def analyze_stages(trace: Trace) -> dict:
    """``stages`` (name -> figures), ``steps`` (list), and the ``denoise`` summary (None without a denoise stage)."""
    import numpy as np
    stage_of, step_of = np.asarray(trace.call_stage, dtype=np.int64), np.asarray(trace.call_step, dtype=np.int64)
    outside = len(trace.stages)  # the key of calls and kernels outside every stage
    columns = _Columns.of(trace)
    by_stage = _bucketed(columns, np.where(stage_of < 0, outside, stage_of), outside)
    op_starts = np.sort(np.asarray(trace.cpu_ops.ts, dtype=np.float64))
    stages = {}
    for i, stage in enumerate(trace.stages):
        figures = by_stage.get(i) or _empty()
        figures.update(cpu_us=round(stage.cpu_us, 3), cpu_ops=_ops_inside(op_starts, stage.intervals))
        stages[stage.name] = figures
    unattributed = by_stage.get(outside)
    if unattributed is not None and not (unattributed["kernels"] or unattributed["host_launches"]
                                         or unattributed["graph_launches"]):
        unattributed = None  # only non-launch calls (syncs, attribute queries) ran outside the stages

    denoise = denoise_stage_index(trace)
    denoise_intervals = trace.stages[denoise].intervals if denoise >= 0 else ()
    by_step = _bucketed(columns, step_of, -1)
    by_step_denoise = _bucketed(columns, np.where(stage_of == denoise, step_of, -1), -1) if denoise >= 0 else {}
    steps = []
    for j, step in enumerate(trace.steps):
        figures = by_step.get(j) or _empty()
        figures.update(label=step.label, number=step.number, cpu_us=round(step.end - step.start, 3),
                       in_denoise=bool(denoise_intervals) and _inside(denoise_intervals, step.start, step.end))
        steps.append(figures)
    return {"stages": stages, "unattributed": unattributed, "steps": steps,
            "denoise": _denoise_summary(trace, columns, denoise, stages, steps, by_step_denoise)}


def _denoise_summary(trace: Trace, columns: _Columns, denoise: int, stages: dict, steps: list[dict],
                     by_step_denoise: dict):
    if denoise < 0:
        return None
    name = trace.stages[denoise].name
    full = [j for j, s in enumerate(steps) if s["in_denoise"]]
    per_step = None
    if full:
        totals = {"gpu_us": 0.0, "kernels": 0, "host_launches": 0, "graph_launches": 0, "cpu_us": 0.0}
        for j in full:
            figures = by_step_denoise.get(j) or _empty()
            for key in ("gpu_us", "kernels", "host_launches", "graph_launches"):
                totals[key] += figures[key]
            totals["cpu_us"] += steps[j]["cpu_us"]
        per_step = {k: round(v / len(full), 3) for k, v in totals.items()}
    inside = columns.stage == denoise
    span = float(columns.ends[inside].max() - columns.starts[inside].min()) if inside.any() else 0.0
    busy = stages[name]["gpu_us"]
    return {"stage": name, "steps": len(full), "step_labels": [steps[j]["label"] for j in full],
            "partial_steps": [s["label"] for j, s in enumerate(steps) if not s["in_denoise"] and j in by_step_denoise],
            "per_step": per_step, "span_us": round(span, 3), "idle_us": round(max(span - busy, 0.0), 3),
            "idle_share": round((span - busy) / span, 6) if span > 0 else 0.0}
