"""First request vs steady state: each warm engine's first measured request is set beside the rest, not inside them.

A warm engine's first measured request still pays one-off costs the next ones do not (allocator growth, a lazily
built kernel, a first BCG capture), so the statistics and the verdict are taken over the steady state: every valid
cell except the first measured request of each warm engine that served another valid measured request of the same
arm (an engine that served one request of an arm has no steady state to set it apart from: that request counts).
The first requests are reported beside the steady-state figures (``summary.arms.<arm>.first_requests``). A cold
campaign's cells each start their own engine and carry no warm engine, so nothing is set apart there. Pure functions
over cells (cell.Cell), read back from stored reports the same way.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..judging.cell import Cell

RULE = ("statistics and verdict over the steady state: every valid cell except the first measured request of each "
        "warm engine that served another valid measured request of the same arm; those first requests are reported "
        "beside it (a cold campaign's cells each start their own engine: none is set apart)")


def _counted(cell: Cell) -> bool:
    return cell.valid and bool(cell.perf)


def first_cells(cells: Iterable[Cell]) -> list[Cell]:
    """The valid first measured requests of the warm engines, in cell order."""
    return [c for c in cells if _counted(c) and c.engine and c.engine.get("first_measured")]


def excluded(cells: Sequence[Cell]) -> set[int]:
    """Indices of the cells set apart from the steady state (see the module's rule)."""
    served: dict[tuple[str, str], int] = {}
    for c in cells:
        if _counted(c) and c.engine:
            served[(c.engine["id"], c.arm)] = served.get((c.engine["id"], c.arm), 0) + 1
    return {c.index for c in first_cells(cells) if served[(c.engine["id"], c.arm)] > 1}


def first_requests(cells: Sequence[Cell], arm: str) -> list[dict[str, Any]]:
    """The arm's first measured request on each warm engine: cell, engine, e2e and denoise, and whether it counts
    in the steady state (only when its engine served no other request of the arm)."""
    apart = excluded(cells)
    return [{"cell": c.index, "engine": c.engine["id"], "e2e_ms": c.metric("e2e_ms"),
             "denoise_ms": c.metric("denoise_ms"), "in_steady_state": c.index not in apart}
            for c in first_cells(cells) if c.arm == arm]


def comparison_block(cells: Sequence[Cell]) -> dict[str, Any]:
    """The comparison's ``steady_state``: the rule and the cells it set apart."""
    return {"rule": RULE, "excluded_cells": sorted(excluded(cells))}


KEPT = "yes (its engine served no other request of the arm)"


def _s(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms / 1000:.6f}"


def markdown(summary: Mapping[str, Any], arms: Sequence[str]) -> list[str]:
    """The report's paragraph: each arm's first request(s) beside its steady-state mean, and what the verdict uses."""
    rows = []
    for arm in arms:
        stats = summary["arms"].get(arm) or {}
        for first in stats.get("first_requests") or []:
            steady = stats["e2e_ms"]
            rows.append(f"| {arm} | {first['engine']} | cell {first['cell']} | {_s(first['e2e_ms'])} | "
                        f"{_s(first['denoise_ms'])} | {_s(steady['mean'])} over {steady['n']} | "
                        f"{KEPT if first['in_steady_state'] else 'no'} |")
    if not rows:
        return []
    return ["First measured request of each warm engine, beside the steady state (the verdict and the statistics "
            "are on the steady state: every valid cell except these first requests, where their engine served "
            "another request of the same arm):", "",
            "| Arm | Engine | Cell | First E2E (s) | First denoise (s) | Steady-state mean E2E (s) "
            "| In the steady state |",
            "|---|---|---|---:|---:|---:|---|", *rows, ""]
