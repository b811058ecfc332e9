"""What a campaign's outputs do to its cells and its verdict.

Output identity is part of validity: a cell whose bytes differ from its comparator at a level that promises the same
bytes (or a lossy output below the SSIM/PSNR thresholds) is invalid, with a reason naming both hashes. A campaign
whose identity-level outputs differ gets the non-performance verdict ``outputs_differ``: its timings are never read
as a speedup. Invalid cells carry no numbers: their ``perf`` is dropped (the raw dump path stays for debugging).
Pure functions over a campaign's cells (cell.Cell) and its bench-report.v1 summary.
"""

from __future__ import annotations

from typing import Any, Mapping, MutableMapping, Sequence

from . import quality
from .cell import Cell

OUTPUTS_DIFFER = "outputs_differ"
EXIT_OUTPUTS_DIFFER = "outputs_differ"  # the cleanup ledger's exit reason for such a campaign


def strip_numbers(cell: Cell) -> None:
    """A cell that does not count shows no figure anywhere; its perf dump stays on disk at perf_dump_path."""
    if not cell.valid:
        cell.perf = None


def apply_output_checks(cells: Sequence[Cell], arms: Mapping[str, Mapping[str, Any]],
                        baseline: str, engine_levels: Sequence[str] | None = None,
                        thresholds: Mapping[str, quality.Thresholds] | None = None) -> dict[str, Any] | None:
    """Judge the outputs of every used cell, mark the cells that fail (status invalid, reason, no numbers), and
    return ``summary.output_quality``. Idempotent: run it after every cell."""
    doc = quality.output_quality(cells, arms, baseline, thresholds, engine_levels)
    for index, reason in quality.invalidations(doc).items():
        cell = next(c for c in cells if c.index == index)
        if reason not in cell.reasons:
            cell.reasons.append(reason)
        if cell.valid:
            cell.status = "invalid"
        strip_numbers(cell)
    return doc


def apply_to_comparison(comparison: MutableMapping[str, Any] | None,
                        output_quality: Mapping[str, Any] | None) -> MutableMapping[str, Any] | None:
    """Differing bytes at an identity level replace every performance verdict with ``outputs_differ``."""
    if comparison is None or not quality.outputs_differ(output_quality):
        return comparison
    checks = [c for c in output_quality["checks"] if c["kind"] == "byte_identity" and not c["passed"]]
    named = "; ".join(quality.identity_reason(c, m) for c in checks for m in c["mismatches"][:2]) or \
        "identity-level cells have no outputs to compare"
    reason = (f"outputs differ where the quality level promises the same bytes, so no timing is a speedup: {named}")
    comparison.update(verdict=OUTPUTS_DIFFER, advice=None, next_step=None)  # no timing advice helps here
    for metric in comparison["metrics"].values():
        metric.update(verdict=OUTPUTS_DIFFER, reason=reason, advice=None, next_step=None)
    return comparison


def exit_reason(cells: Sequence[Cell]) -> str:
    """success, outputs_differ (a cell's bytes broke the identity contract), or error."""
    if any(r.startswith(quality.IDENTITY_REASON) for c in cells for r in c.reasons):
        return EXIT_OUTPUTS_DIFFER
    return "success" if cells and all(c.valid for c in cells) else "error"
