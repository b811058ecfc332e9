"""Per-request verdicts of a manifest campaign: each request's change and interval, judged on its own cells by the
comparison's own rule (stats.metric_change with the comparison's threshold, bootstrap, rounds and discards), and
whether its outputs kept their identity between the arms; then which shapes got faster, which slower.

A mixed-shape campaign's overall means mix shapes; the per-request verdicts say which shape moved. A request whose
identity-level outputs differ between the arms gets ``outputs_differ``, as a campaign does (validity.py). Pure
functions over cells (cell.Cell) and the bench-report.v1 summary blocks.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..judging import validity
from . import stats
from ..judging.cell import Cell

OUTCOMES = (("improved", "faster"), ("regressed", "slower"), ("no_significant_change", "no clear change"))
NO_VERDICT = "no verdict"  # insufficient data, or outputs that differ


def shape_label(request: dict[str, Any]) -> str:
    """``128x64, 2 steps`` (and ``, 16 frames`` for a video request), for tables."""
    words = [f"{request['width']}x{request['height']}"]
    if request.get("num_frames"):
        words.append(f"{request['num_frames']} frames")
    if request.get("num_inference_steps"):
        words.append(f"{request['num_inference_steps']} steps")
    return ", ".join(words)


def per_request(cells: Sequence[Cell], comparison: Mapping[str, Any] | None,
                output_quality: Mapping[str, Any] | None, metric: str) -> list[dict[str, Any]]:
    """``summary.requests``: one entry per manifest request, in manifest order."""
    by_request: dict[int, list[Cell]] = {}
    for cell in cells:
        if cell.request is not None:
            by_request.setdefault(cell.request["index"], []).append(cell)
    baseline = comparison["baseline_arm"] if comparison else None
    entries = []
    for index, mine in sorted(by_request.items()):
        request = next((c.request for c in mine if c.arm == baseline), mine[0].request)
        checks = [c for c in (output_quality or {}).get("checks", []) if c.get("request") == index]
        identity = [c["passed"] for c in checks if c["kind"] == "byte_identity"]
        identical = all(identity) if identity else None
        entries.append({**request, "shape": shape_label(request), "cells": [c.index for c in mine],
                        "change": _change(mine, comparison, metric, identical),
                        "outputs_identical": identical, "outputs_passed": all(c["passed"] for c in checks)
                        if checks else None})
    return entries


def _change(cells: Sequence[Cell], comparison: Mapping[str, Any] | None, metric: str,
            identical: bool | None) -> dict[str, Any] | None:
    if comparison is None:
        return None
    boot = comparison["bootstrap"]
    change = stats.metric_change(cells, comparison["baseline_arm"], comparison["candidate_arm"], metric,
                                 threshold_pct=comparison["threshold_pct"], resamples=boot["resamples"],
                                 seed=boot["seed"], confidence=boot["confidence"], min_rounds=comparison["min_rounds"],
                                 exclude=comparison["discarded_cells"])
    if identical is False:
        change.update(verdict=validity.OUTPUTS_DIFFER, advice=None,
                      reason="this request's outputs differ between the arms where its quality level promises the "
                             "same bytes, so no timing of it is a speedup")
    return change


def outcome(entry: Mapping[str, Any]) -> str:
    """faster, slower, no clear change, or no verdict."""
    verdict = (entry.get("change") or {}).get("verdict")
    return dict(OUTCOMES).get(verdict, NO_VERDICT)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}%"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _who(entry: Mapping[str, Any]) -> str:
    """The shape and request, with its change where it has a verdict (else why it has none)."""
    change = entry.get("change") or {}
    said = _pct(change.get("change_pct")) if outcome(entry) != NO_VERDICT else change.get("verdict", "no comparison")
    return f"{entry['shape']} (`{entry['request_id']}`, {said})"


def markdown(summary: Mapping[str, Any], manifest: Mapping[str, Any] | None) -> list[str]:
    """The 'shapes faster / slower / no clear change' table, then each request's figures; nothing without a
    manifest."""
    entries = summary.get("requests")
    if not entries or manifest is None:
        return []
    comparison = summary.get("comparison") or {}
    lines = ["", "### Per request", "",
             f"Manifest `{manifest['path']}` (sha256 `{manifest['sha256'][:16]}…`, read by the engine's "
             f"`{manifest['parser']}`): {len(entries)} request(s), each sent in every slot of every arm in file order "
             f"and judged on its own cells by the comparison's rule ({comparison.get('primary_metric', 'e2e_ms')})."]
    if comparison:
        lines += ["", "| Outcome | Shapes (request, change) |", "|---|---|"]
        for label in [*(name for _, name in OUTCOMES), NO_VERDICT]:
            mine = [_who(e) for e in entries if outcome(e) == label]
            lines.append(f"| {label} | {'; '.join(mine) or '-'} |")
    confidence = (comparison.get("bootstrap") or {}).get("confidence")
    ci_name = f"{confidence * 100:g}% CI" if confidence else "CI"
    lines += ["", f"| # | Request | Line | Shape | Baseline mean ms | Candidate mean ms | Change | {ci_name} | "
              "Verdict | Outputs identical |", "|---:|---|---:|---|---:|---:|---:|---|---|---|"]
    for e in entries:
        change = e.get("change") or {}
        ci = "n/a" if change.get("ci_low_pct") is None else f"[{_pct(change['ci_low_pct'])}, " \
                                                          f"{_pct(change['ci_high_pct'])}]"
        same = {True: "yes", False: "NO", None: "n/a"}[e["outputs_identical"]]
        lines.append(f"| {e['index'] + 1} | `{e['request_id']}` | {e['line'] or '-'} | {e['shape']} | "
                     f"{_ms(change.get('baseline_mean'))} | {_ms(change.get('candidate_mean'))} | "
                     f"{_pct(change.get('change_pct'))} | {ci} | {change.get('verdict', 'n/a')} | {same} |")
    return lines


def text(summary: Mapping[str, Any]) -> list[str]:
    """One line per outcome, for the terminal."""
    entries = summary.get("requests") or []
    if not entries or not summary.get("comparison"):
        return []
    return [f"requests {label}: " + ("; ".join(_who(e).replace("`", "") for e in entries if outcome(e) == label)
                                     or "-") for label in [*(name for _, name in OUTCOMES), NO_VERDICT]]
