"""Device time by kernel name (and memcpy/memset apart), plus CPU ops by self time: where the time goes."""

from __future__ import annotations

from array import array

from ..model import KERNEL, Trace
from ..nesting import op_nesting


def _table(trace: Trace, rows: list[int], names: array, durs: array) -> list[dict]:
    import numpy as np
    picked = np.asarray(rows, dtype=np.int64)
    name_ids = np.frombuffer(names, dtype=np.int64)[picked]
    counts = np.bincount(name_ids, minlength=len(trace.names))
    sums = np.bincount(name_ids, weights=np.frombuffer(durs, dtype=np.float64)[picked], minlength=len(trace.names))
    present = np.flatnonzero(counts)
    total = dict(zip(present.tolist(), sums[present].tolist(), strict=True))
    grand = sum(total.values())
    table = [{"name": trace.names[n], "count": c, "total_us": round(total[n], 3), "mean_us": round(total[n] / c, 3),
              "share": round(total[n] / grand, 6) if grand > 0 else 0.0}
             for n, c in zip(present.tolist(), counts[present].tolist(), strict=True)]
    table.sort(key=lambda r: (-r["total_us"], r["name"]))
    return table


def kernel_rows(trace: Trace, kind: int = KERNEL, stage: int | None = None) -> list[int]:
    """Indices of device ops of one kind, optionally only those launched inside stage ``stage``."""
    if stage is None:
        return [i for i, k in enumerate(trace.device.kind) if k == kind]
    pairs = zip(trace.device.kind, trace.device_stages, strict=True)
    return [i for i, (k, s) in enumerate(pairs) if k == kind and s == stage]


def analyze_kernels(trace: Trace, rows: list[int] | None = None) -> list[dict]:
    """Kernels by total device time (name, count, total_us, mean_us, share of all kernel time), largest first."""
    rows = kernel_rows(trace) if rows is None else rows
    return _table(trace, rows, trace.device.name, trace.device.dur)


def analyze_memory_ops(trace: Trace) -> list[dict]:
    rows = [i for i, k in enumerate(trace.device.kind) if k != KERNEL]
    return _table(trace, rows, trace.device.name, trace.device.dur)


def analyze_cpu_ops(trace: Trace) -> list[dict]:
    """CPU ops by self time (their own time, nested ops' time taken out), largest first: each instant of host time
    counts under one name only, so the shares of all rows add up to 1. ``inclusive_us`` keeps the nested time (an
    op nested in one of its own name adds nothing to it)."""
    import numpy as np
    ops = trace.cpu_ops
    own, recursive = op_nesting(ops)
    names = np.asarray(ops.name, dtype=np.int64)
    counts = np.bincount(names, minlength=len(trace.names))
    present = np.flatnonzero(counts).tolist()
    self_sums = np.bincount(names, weights=own, minlength=len(trace.names))
    inclusive_sums = np.bincount(names, weights=np.where(recursive, 0.0, np.asarray(ops.dur, dtype=np.float64)),
                                 minlength=len(trace.names))
    count = dict(zip(present, counts[present].tolist(), strict=True))
    self_us = dict(zip(present, self_sums[present].tolist(), strict=True))
    inclusive = dict(zip(present, inclusive_sums[present].tolist(), strict=True))
    grand = sum(self_us.values())
    table = [{"name": trace.names[n], "count": c, "self_us": round(self_us[n], 3),
              "inclusive_us": round(inclusive[n], 3), "mean_self_us": round(self_us[n] / c, 3),
              "share": round(self_us[n] / grand, 6) if grand > 0 else 0.0} for n, c in count.items()]
    table.sort(key=lambda r: (-r["self_us"], r["name"]))
    return table


def cpu_op_totals(table: list[dict]) -> dict:
    """``self_us`` is the host time spent inside any op (nested time once)."""
    return {"distinct": len(table), "count": sum(r["count"] for r in table),
            "self_us": round(sum(r["self_us"] for r in table), 3)}


def totals(table: list[dict]) -> dict:
    return {"distinct": len(table), "count": sum(r["count"] for r in table),
            "total_us": round(sum(r["total_us"] for r in table), 3)}
