"""A bench report on the terminal: a few lines per campaign (each cell, the verdict, the noise floor, the next step)
and the one closing line a long run ends with, so the last thing on screen says what happened and where it is."""

from __future__ import annotations

from typing import Any, Mapping

from . import perf_compare, request_verdicts
from .report import cells_of


def render_campaign_text(doc: Mapping[str, Any]) -> str:
    """A bench-report.v1 in a few lines for the terminal: each cell, the verdict, the noise floor, the next step."""
    lines = [f"{doc['campaign']['preset']} [{doc['campaign']['mode']}] label {doc['campaign']['label']}: "
             f"{'OK' if doc['ok'] else 'NOT OK'}; report {doc['plan']['report_path']}"]
    lines += [f"engine {c['mode']}: {c['reason']}" for c in [doc["engines"].get("choice")] if c]
    for cell in cells_of(doc):
        e2e_ms = cell.metric("e2e_ms")
        lines.append(f"  #{cell.index} {cell.arm} {cell.position or ''} {cell.status}"
                     + (f" e2e {e2e_ms:.1f} ms" if e2e_ms is not None else "")
                     + (f" — {cell.reasons[0]}" if cell.reasons else ""))
    comparison = doc["summary"]["comparison"]
    if comparison:
        primary = comparison["primary_metric"]
        lines += [f"verdict: {comparison.get('verdict')} ({comparison.get('rule', '')})",
                  f"{primary} change {perf_compare.change_with_interval(comparison, primary)}"]
        lines += perf_compare.render_noise_floor(comparison["metrics"][comparison["primary_metric"]])
        if comparison.get("next_step"):
            lines.append(f"next step: {comparison['next_step']}")
    lines += request_verdicts.text(doc["summary"])
    host = doc["summary"].get("host_contention")
    if host and host["contended_cells"]:
        lines.append(f"host: {host['note']}")
    for key, path in (doc.get("artifacts") or {}).items():
        lines.append(f"{key}: {path}")
    return "\n".join(lines)


def campaign_summary(doc: Mapping[str, Any]) -> str:
    """One line: the campaign, OK or not, valid cells, the verdict with its change and interval, where the files are."""
    cells = cells_of(doc)
    parts = [f"{doc['campaign']['preset']} [{doc['campaign']['mode']}] {doc['campaign']['label']}: "
             f"{'OK' if doc['ok'] else 'NOT OK'}", f"{sum(c.valid for c in cells)}/{len(cells)} cells valid"]
    comparison = doc["summary"]["comparison"]
    if comparison:
        primary = comparison["primary_metric"]
        parts.append(f"verdict {comparison.get('verdict')}, {primary} "
                     f"{perf_compare.change_with_interval(comparison, primary)}")
    artifacts = doc.get("artifacts") or {}
    if artifacts.get("report_md"):
        parts.append(f"Markdown {artifacts['report_md']}")
    if doc["plan"].get("report_path"):
        parts.append(f"report {doc['plan']['report_path']}")
    return "; ".join(parts)
