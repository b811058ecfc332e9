"""The evidence plot: every cell's E2E by run order, one colour per arm; contended cells (another busy process on
the host) drawn hollow, cells that do not count marked with a cross at the axis; the verdict and its interval in the
title, so the picture alone cannot be read as more certain than the numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..results import perf_compare, report
from ..judging.cell import Cell


def title(camp: Mapping[str, Any]) -> str:
    comparison = camp["summary"].get("comparison")
    if not comparison:
        return "no verdict: the campaign compared no two arms"
    metric = comparison["primary_metric"]
    label = {"e2e_ms": "E2E", "denoise_ms": "Denoise"}.get(metric, metric)  # a change in %, whatever the axis unit
    return f"verdict: {comparison['verdict']} — {label} change {perf_compare.change_with_interval(comparison, metric)}"


def render(camp: Mapping[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [Cell.from_json(c) for c in camp["cells"]]
    contended = set(camp["summary"].get("host_contention", {}).get("contended_cells") or [])
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, arm in enumerate(report.arm_order(camp["campaign"], cells)):
        for hollow in (False, True):
            points = [(n, c.metric("e2e_ms") / 1000) for n, c in enumerate(cells) if c.arm == arm and c.valid
                      and c.metric("e2e_ms") and (c.index in contended) == hollow]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", linestyle="none", color=f"C{i}",
                        markerfacecolor="none" if hollow else f"C{i}",
                        label=f"{arm} (contended host)" if hollow else arm)
    invalid = [n for n, c in enumerate(cells) if not c.valid]
    if invalid:
        ax.plot(invalid, [0] * len(invalid), marker="x", linestyle="none", color="red", label="not counted")
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"R{c.round}\n{c.position or ''}" if c.round is not None else str(c.index) for c in cells],
                       fontsize="small")
    ax.set_ylabel("E2E (s)")
    ax.set_xlabel("run order")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title(camp), fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
