"""The A/B verdict of one load point: its blocks (A1 B1 B2 A2 per round, the same trace each) become campaign cells
whose "perf" holds the block's p50, p99 and throughput, and the campaign's own statistics (stats.metric_change:
bootstrap interval over blocks within rounds, every round in the same direction, noise floor) judge each figure.
Throughput is better higher: its verdict is read the other way round.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..results import stats
from ..campaign.design import ABBA_POSITIONS
from ..judging.cell import Cell
from .metrics import VERDICT_METRICS, block_metrics

FLIPPED = {"improved": "regressed", "regressed": "improved"}


def block_plan(rounds: int) -> list[tuple[str, int, str]]:
    """(arm, round, position) of every block in order: A1 B1 B2 A2 per round."""
    return [(arm, r, position) for r in range(1, rounds + 1) for arm, position in ABBA_POSITIONS]


def block_cells(blocks: Sequence[Mapping[str, Any]]) -> list[Cell]:
    """One valid cell per block with figures; a block with failed requests or without latencies is not valid."""
    cells = []
    for index, block in enumerate(blocks):
        figures = block["metrics"]
        complete = figures["failed_requests"] == 0 and figures["latency_p50"] is not None
        perf = {name: figures[name] * (1000.0 if name.startswith("latency") else 1.0)
                for name, _ in VERDICT_METRICS} if complete else None
        cells.append(Cell(index=index, arm=block["arm"], round=block["round"], position=block["position"],
                          status="valid" if complete else "invalid", perf=perf))
    return cells


def compare(blocks: Sequence[Mapping[str, Any]], *, threshold_pct: float, resamples: int, seed: int,
            confidence: float, min_rounds: int) -> dict[str, Any]:
    """Per verdict metric: stats.metric_change's result (latencies in ms), with its direction."""
    cells = block_cells(blocks)
    out = {}
    for name, better in VERDICT_METRICS:
        change = stats.metric_change(cells, "A", "B", name, threshold_pct=threshold_pct, resamples=resamples,
                                     seed=seed, confidence=confidence, min_rounds=min_rounds)
        if better == "higher":
            change["verdict"] = FLIPPED.get(change["verdict"], change["verdict"])
        out[name] = {**change, "better": better, "unit": "ms" if name.startswith("latency") else "requests/s"}
    return out


def overall(per_point: Sequence[Mapping[str, Any]]) -> str:
    """One word over every load point's metrics: regressed if any figure regressed, improved if some improved and
    none regressed, insufficient_data if none could be judged, else no_significant_change."""
    verdicts = [m["verdict"] for point in per_point for m in point.values()]
    if "regressed" in verdicts:
        return "regressed"
    if "improved" in verdicts:
        return "improved"
    if verdicts and all(v == "insufficient_data" for v in verdicts):
        return "insufficient_data"
    return "no_significant_change"


def shape_changes(blocks: Sequence[Mapping[str, Any]], *, threshold_pct: float, resamples: int, seed: int,
                  confidence: float, min_rounds: int) -> list[dict[str, Any]]:
    """Per request shape (size and steps): the change of B's median latency against A's over the blocks, with its
    interval and verdict, so a change that speeds one shape up and slows another down shows."""
    shapes = sorted({r.shape for block in blocks for r in block["requests"]})
    out = []
    for shape in shapes:
        per_block = []
        for block in blocks:
            mine = [r for r in block["requests"] if r.shape == shape]
            per_block.append({**block, "metrics": block_metrics(mine, block["duration"], None)})
        cells = block_cells(per_block)
        change = stats.metric_change(cells, "A", "B", "latency_p50", threshold_pct=threshold_pct,
                                     resamples=resamples, seed=seed, confidence=confidence, min_rounds=min_rounds)
        out.append({"shape": shape, "requests": sum(1 for b in blocks for r in b["requests"] if r.shape == shape),
                    "baseline_p50_ms": change["baseline_mean"], "candidate_p50_ms": change["candidate_mean"],
                    "change_pct": change["change_pct"], "ci_low_pct": change["ci_low_pct"],
                    "ci_high_pct": change["ci_high_pct"], "interval_reason": change["interval_reason"],
                    "verdict": change["verdict"]})
    return out
