"""One report for a sweep (sweep-report.v1): per shard its campaign's verdict, change and interval, latency and
allocated memory per arm, validity and output hashes per cell; per arm the comparison with the engine's nightly perf
baseline for the shard's scenario and GPU class where the engine ships one (``baseline_check.for_report``); every
shard that did not finish, with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import work_dirs
from ..judging import baseline_check
from . import driver, plan as sweep_plan, state as sweep_state


NO_REASON = {"done": "cells not valid", "running": "still running", "pending": "not run yet", "failed": "unknown"}


def _mean(stats: Any) -> float | None:
    """An arm's mean over its steady state: the figure the change is taken between (a median beside a change of
    means can point the other way)."""
    return stats.get("mean") if isinstance(stats, dict) else None


def _report_of(folder: Path, shard_id: str, found: dict[str, Any]) -> dict[str, Any] | None:
    """The bench-report of the shard: its result when done, else its last attempt's document if it wrote one (either
    only when it is a valid bench-report.v1: a damaged one reads as none)."""
    name = "result.json" if found["status"] == "done" else f"attempt-{found['attempts']}.stdout.json"
    return sweep_state.load_result(folder, shard_id, name)[0]


def shard_row(folder: Path, shard, found: dict[str, Any], engine_dir: str | None = None) -> dict[str, Any]:
    report = _report_of(folder, shard.id, found)
    recorded = found["state"] or {}
    row: dict[str, Any] = {"id": shard.id, "preset": shard.preset.name, "task": shard.preset.task,
                           "overrides": shard.overrides, "repeat": shard.repeat, "gpus": shard.num_gpus,
                           "status": found["status"], "reason": found["reason"], "attempts": found["attempts"],
                           "executor": recorded.get("executor"), "wall_s": recorded.get("wall_s"),
                           "report_path": None, "verdict": None, "verdict_reason": None, "primary_metric": None,
                           "change_pct": None, "ci_low_pct": None, "ci_high_pct": None, "confidence": None,
                           "interval_reason": None, "host": None, "arms": {}, "cells": [], "valid": False,
                           "nightly": {}}
    if report is None:
        return row
    row["report_path"] = str(sweep_state.shard_dir(folder, shard.id) / "result.json") if found["status"] == "done" \
        else None
    summary = report.get("summary") or {}
    comparison = summary.get("comparison") or {}
    metric = comparison.get("primary_metric")
    figures = (comparison.get("metrics") or {}).get(metric) or {}
    host = summary.get("host_contention")
    row.update(verdict=comparison.get("verdict"), verdict_reason=comparison.get("reason"), primary_metric=metric,
               change_pct=figures.get("change_pct"), ci_low_pct=figures.get("ci_low_pct"),
               ci_high_pct=figures.get("ci_high_pct"), interval_reason=figures.get("interval_reason"),
               confidence=(comparison.get("bootstrap") or {}).get("confidence"),
               host={"sampled_cells": host["sampled_cells"], "contended_cells": host["contended_cells"]}
               if host else None)
    for arm, stats in (summary.get("arms") or {}).items():
        row["arms"][arm] = {"e2e_ms": _mean(stats.get("e2e_ms")), "denoise_ms": _mean(stats.get("denoise_ms")),
                            "peak_memory_mb": _mean(stats.get("peak_memory_mb")),
                            "memory_kind": stats.get("memory_kind"), "n_valid": stats.get("n_valid"),
                            "n_cells": stats.get("n_cells")}
    row["cells"] = [{"position": c.get("position"), "arm": c.get("arm"), "status": c.get("status"),
                     "outputs_sha256": [o["sha256"] for o in c.get("outputs", []) if o.get("sha256")]}
                    for c in report.get("cells", [])]
    source = row["report_path"] or str(sweep_state.shard_dir(folder, shard.id))
    campaign = report.get("campaign") if isinstance(report.get("campaign"), dict) else {}
    row["nightly"] = {str(arm): baseline_check.for_report(report, str(arm), source, engine_dir)
                      for arm in campaign.get("arms") or row["arms"]}
    row["valid"] = bool(row["cells"]) and all(c["status"] == "valid" for c in row["cells"])
    return row


def merge(folder: Path, engine_dir: str | None = None) -> dict[str, Any]:
    """The sweep-report.v1 payload; artifacts are written by merge_render. The nightly baselines are read from
    ``engine_dir`` (default: the engine this Python imports)."""
    engine_dir = engine_dir or work_dirs.sglang_location()["package_dir"]
    spec = driver.spec_of_folder(folder)
    current = driver.status(folder, spec)
    rows = [shard_row(folder, shard, _found(folder, shard), engine_dir) for shard in spec.shards]
    failures = [{"id": r["id"], "preset": r["preset"], "status": r["status"],
                 "reason": r["reason"] or NO_REASON[r["status"]]}
                for r in rows if r["status"] != "done" or not r["valid"]]
    return {"name": spec.name, "folder": str(folder), "counts": current["counts"], "shards": rows,
            "failures": failures, "baseline_regressions": baseline_regressions(rows)}


def baseline_regressions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every arm that failed its nightly baseline: a sweep used as a nightly check must not pass over one."""
    return [{"id": row["id"], "preset": row["preset"], "arm": arm, "scenario": check["scenario"],
             "gpu_class": check["gpu_class"], "change_pct": check["change_pct"], "over": check["over"]}
            for row in rows for arm, check in row["nightly"].items() if check["status"] == "fail"]


def report_ok(report: dict[str, Any]) -> bool:
    """No shard unfinished or invalid, and no arm over its nightly baseline's bound."""
    return not report["failures"] and not report["baseline_regressions"]


def _found(folder: Path, shard) -> dict[str, Any]:
    return sweep_state.shard_status(folder, shard.id, sweep_plan.shard_hash(shard))
