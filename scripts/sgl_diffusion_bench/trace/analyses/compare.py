"""Two traces side by side (e.g. eager vs CUDA graph): the PR profile table and the kernels that changed most.

The scope is the denoise stage when both traces have one (the recurring per-step work a graph replaces), else the
whole trace; the document says which.
"""

from __future__ import annotations

from ..model import KERNEL, Trace, union_intervals
from .hotspots import analyze_kernels
from .stages import analyze_stages, call_flags, denoise_stage_index

METRICS = (
    ("gpu_kernels", "GPU kernels", "count"),
    ("host_kernel_launches", "Host per-kernel launches, CUDA runtime + driver", "count"),
    ("graph_launches", "cudaGraphLaunch calls", "count"),
    ("captured_segments_per_step", "Captured segments per step", "count"),
    ("host_kernel_launches_per_step", "Host per-kernel launches per denoise step", "count"),
    ("gpu_busy_ms_per_step", "GPU busy time per denoise step (ms)", "ms"),
    ("gpu_kernel_time_ms", "Cumulative GPU kernel time (ms)", "ms"),
    ("gpu_busy_ms", "GPU busy time, kernel intervals unioned (ms)", "ms"),
    ("cpu_stage_ms", "Profiled CPU stage duration (ms)", "ms"),
)


def scope_figures(trace: Trace, use_denoise: bool) -> dict:
    """The table's figures for one trace: inside the denoise stage, or over the whole trace."""
    stage = denoise_stage_index(trace) if use_denoise else -1
    in_scope = (lambda c: c >= 0 and trace.call_stage[c] == stage) if stage >= 0 else (lambda c: True)
    is_launch, is_graph = call_flags(trace)
    calls = [c for c in range(len(trace.calls)) if in_scope(c)]
    dev = trace.device
    rows = [i for i in range(len(dev)) if dev.kind[i] == KERNEL and (stage < 0 or trace.device_stage(i) == stage)]
    intervals = [(dev.ts[i], dev.ts[i] + dev.dur[i]) for i in rows]
    if stage >= 0:
        cpu_intervals = trace.stages[stage].intervals
    else:
        cpu_intervals = tuple(iv for s in trace.stages for iv in s.intervals)
    denoise = analyze_stages(trace)["denoise"] or {}
    steps, per_step = denoise.get("steps", 0), denoise.get("per_step")
    graph = sum(is_graph[c] for c in calls)
    figures = {
        "gpu_kernels": len(rows),
        "host_kernel_launches": sum(is_launch[c] for c in calls),
        "graph_launches": graph,
        "captured_segments_per_step": round(graph / steps, 3) if steps else None,
        "host_kernel_launches_per_step": per_step["host_launches"] if per_step and stage >= 0 else None,
        "gpu_busy_ms_per_step": round(per_step["gpu_us"] / 1000, 3) if per_step and stage >= 0 else None,
        "gpu_kernel_time_ms": round(sum(dev.dur[i] for i in rows) / 1000, 3),
        "gpu_busy_ms": round(sum(e - s for s, e in union_intervals(intervals)) / 1000, 3),
        "cpu_stage_ms": (round(sum(e - s for s, e in union_intervals(cpu_intervals)) / 1000, 3)
                         if cpu_intervals else None),
    }
    return {"scope": trace.stages[stage].name if stage >= 0 else "whole_trace", "steps": steps,
            "figures": figures, "kernels": analyze_kernels(trace, rows)}


def compare_traces(a: Trace, b: Trace, labels: tuple[str, str], top: int = 15) -> dict:
    use_denoise = denoise_stage_index(a) >= 0 and denoise_stage_index(b) >= 0
    fa, fb = scope_figures(a, use_denoise), scope_figures(b, use_denoise)
    metrics = []
    for key, label, unit in METRICS:
        va, vb = fa["figures"][key], fb["figures"][key]
        delta = round(vb - va, 3) if va is not None and vb is not None else None
        metrics.append({"key": key, "label": label, "unit": unit, "a": va, "b": vb, "delta": delta})
    ka = {r["name"]: r for r in fa["kernels"]}
    kb = {r["name"]: r for r in fb["kernels"]}
    changes = []
    for name in sorted(set(ka) | set(kb)):
        ra, rb = ka.get(name, {}), kb.get(name, {})
        ca, cb = ra.get("count", 0), rb.get("count", 0)
        ta, tb = ra.get("total_us", 0.0), rb.get("total_us", 0.0)
        changes.append({"name": name, "count_a": ca, "count_b": cb, "delta_count": cb - ca, "total_us_a": ta,
                        "total_us_b": tb, "delta_us": round(tb - ta, 3)})
    by_count = sorted((c for c in changes if c["delta_count"]), key=lambda c: (-abs(c["delta_count"]), c["name"]))
    by_time = sorted(changes, key=lambda c: (-abs(c["delta_us"]), c["name"]))
    return {"labels": {"a": labels[0], "b": labels[1]}, "scope": fa["scope"] if use_denoise else "whole_trace",
            "steps": {"a": fa["steps"], "b": fb["steps"]}, "metrics": metrics,
            "kernel_names": {"a": len(ka), "b": len(kb), "only_a": len(set(ka) - set(kb)),
                             "only_b": len(set(kb) - set(ka))},
            "count_changes": by_count[:top], "time_changes": by_time[:top]}
