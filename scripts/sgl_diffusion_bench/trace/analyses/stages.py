"""Per stage and per step: GPU time as the union of kernel intervals (overlaps once), kernels, launches, CPU time.

Kernels are attributed through their launch (see ``trace.model``), so a kernel that runs on the device after its
stage's CPU range closed still counts for the stage that launched it; a CUDA-graph replay counts for the stage of its
``cudaGraphLaunch``. Steps that lie wholly inside the denoise stage are the denoise steps used for per-step figures; a
profiler step that runs past the stage's end (the engine's last ``ProfilerStep`` also holds decoding) is partial.
"""

from __future__ import annotations

import bisect
import re

from ..model import KERNEL, Trace, union_intervals
from .launches import is_graph_launch, is_kernel_launch

DENOISE_STAGE = re.compile(r"denois", re.I)
NOT_DENOISE_STAGE = re.compile(r"before", re.I)
UNATTRIBUTED = "(no stage)"


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


class _Bucket:
    __slots__ = ("intervals", "kernels", "host_launches", "graph_launches")

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.kernels = 0
        self.host_launches = 0
        self.graph_launches = 0

    def figures(self) -> dict:
        merged = union_intervals(self.intervals)
        return {"gpu_us": round(sum(e - s for s, e in merged), 3), "kernels": self.kernels,
                "host_launches": self.host_launches, "graph_launches": self.graph_launches}


def _bucketed(trace: Trace, key_of_call) -> dict:
    """Group kernels and launch calls by ``key_of_call(call_index)`` (None drops them)."""
    buckets: dict = {}
    is_launch, is_graph = call_flags(trace)
    for c in range(len(trace.calls)):
        key = key_of_call(c)
        if key is None:
            continue
        bucket = buckets.get(key) or buckets.setdefault(key, _Bucket())
        bucket.host_launches += is_launch[c]
        bucket.graph_launches += is_graph[c]
    dev = trace.device
    key_cache: dict = {}
    for kind, c, ts, dur in zip(dev.kind, trace.device_call, dev.ts, dev.dur, strict=True):
        if kind != KERNEL:
            continue
        key = key_cache.get(c, key_cache)
        if key is key_cache:  # graph replays share one call: look each call up once
            key = key_cache[c] = key_of_call(c) if c >= 0 else key_of_call(None)
        if key is None:
            continue
        bucket = buckets.get(key) or buckets.setdefault(key, _Bucket())
        bucket.kernels += 1
        bucket.intervals.append((ts, ts + dur))
    return buckets


def _ops_inside(starts: list[float], intervals) -> int:
    return sum(bisect.bisect_left(starts, e) - bisect.bisect_left(starts, s) for s, e in intervals)


def _inside(intervals, start: float, end: float) -> bool:
    return any(s <= start and end <= e for s, e in intervals)


def analyze_stages(trace: Trace) -> dict:
    """``stages`` (name -> figures), ``steps`` (list), and the ``denoise`` summary (None without a denoise stage)."""
    stage_of, step_of = trace.call_stage, trace.call_step
    by_stage = _bucketed(trace, lambda c: UNATTRIBUTED if c is None or stage_of[c] < 0 else stage_of[c])
    op_starts = sorted(trace.cpu_ops.ts)
    stages = {}
    for i, stage in enumerate(trace.stages):
        figures = by_stage[i].figures() if i in by_stage else _Bucket().figures()
        figures.update(cpu_us=round(stage.cpu_us, 3), cpu_ops=_ops_inside(op_starts, stage.intervals))
        stages[stage.name] = figures
    unattributed = by_stage[UNATTRIBUTED].figures() if UNATTRIBUTED in by_stage else None
    if unattributed is not None and not (unattributed["kernels"] or unattributed["host_launches"]
                                         or unattributed["graph_launches"]):
        unattributed = None  # only non-launch calls (syncs, attribute queries) ran outside the stages

    denoise = denoise_stage_index(trace)
    denoise_intervals = trace.stages[denoise].intervals if denoise >= 0 else ()
    by_step = _bucketed(trace, lambda c: None if c is None or step_of[c] < 0 else step_of[c])
    by_step_denoise = _bucketed(trace, lambda c: None if c is None or step_of[c] < 0 or stage_of[c] != denoise
                                else step_of[c]) if denoise >= 0 else {}
    steps = []
    for j, step in enumerate(trace.steps):
        figures = by_step[j].figures() if j in by_step else _Bucket().figures()
        figures.update(label=step.label, number=step.number, cpu_us=round(step.end - step.start, 3),
                       in_denoise=bool(denoise_intervals) and _inside(denoise_intervals, step.start, step.end))
        steps.append(figures)
    return {"stages": stages, "unattributed": unattributed, "steps": steps,
            "denoise": _denoise_summary(trace, denoise, stages, steps, by_step_denoise)}


def _denoise_summary(trace: Trace, denoise: int, stages: dict, steps: list[dict], by_step_denoise: dict):
    if denoise < 0:
        return None
    name = trace.stages[denoise].name
    full = [j for j, s in enumerate(steps) if s["in_denoise"]]
    per_step = None
    if full:
        totals = {"gpu_us": 0.0, "kernels": 0, "host_launches": 0, "graph_launches": 0, "cpu_us": 0.0}
        for j in full:
            figures = by_step_denoise[j].figures() if j in by_step_denoise else _Bucket().figures()
            for key in ("gpu_us", "kernels", "host_launches", "graph_launches"):
                totals[key] += figures[key]
            totals["cpu_us"] += steps[j]["cpu_us"]
        per_step = {k: round(v / len(full), 3) for k, v in totals.items()}
    dev = trace.device
    intervals = [(ts, ts + dur)
                 for kind, stage, ts, dur in zip(dev.kind, trace.device_stages, dev.ts, dev.dur, strict=True)
                 if kind == KERNEL and stage == denoise]
    span = (max(e for _, e in intervals) - min(s for s, _ in intervals)) if intervals else 0.0
    busy = stages[name]["gpu_us"]
    return {"stage": name, "steps": len(full), "step_labels": [steps[j]["label"] for j in full],
            "partial_steps": [s["label"] for j, s in enumerate(steps) if not s["in_denoise"] and j in by_step_denoise],
            "per_step": per_step, "span_us": round(span, 3), "idle_us": round(max(span - busy, 0.0), 3),
            "idle_share": round((span - busy) / span, 6) if span > 0 else 0.0}
