"""The ``engines`` block of a campaign report: one record per engine start (what it cost, what it served, which
other starts it overlapped) and where the engines' wall time went, warm or cold."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any, Sequence

from ..engine import warm_engine
from ..judging import engine_args, memory_evidence
from ..judging.cell import Cell


@dataclasses.dataclass
class EngineStart:
    """One start of one engine configuration: what it cost and what it served."""

    id: str
    key_index: int
    arms: list[str]
    argv: list[str]
    log_path: Path
    started_at: str
    load_s: float | None = None
    warmup_s: float = 0.0
    warmup_requests: int = 0
    measured_s: float = 0.0
    measured_requests: int = 0
    shutdown_s: float | None = None
    wall_s: float | None = None
    memory_bytes: int | None = None
    memory_kind: str = "process_rss"  # what memory_bytes measured: the group's RSS, or used device memory (NVML)
    status: str = "starting"  # starting | launched (loading in the background) | serving | failed | closed
    reasons: list[str] = dataclasses.field(default_factory=list)
    captures: int = 0
    standin_modules: tuple[str, ...] = ()  # served from a stand-in while it started (log_gates)
    first_measured_cell: int | None = None
    engine: warm_engine.WarmEngine | None = None
    adapter_lines: list[str] = dataclasses.field(default_factory=list)
    # what the engine's perf-dump memory figures are, from its own log (memory_evidence.py), for every request
    memory: memory_evidence.MemoryEvidence = dataclasses.field(default_factory=memory_evidence.MemoryEvidence)
    facts: engine_args.EngineRunFacts = dataclasses.field(default_factory=engine_args.EngineRunFacts)
    memory_basis: str = "after warm-up"  # when memory_bytes was taken, or why it was not
    launched_at: str | None = None  # the process spawned (milliseconds; started_at keeps its seconds form)
    ready_at: str | None = None  # the driver's READY, read by the log thread (started_at is the launch)
    finished_at: str | None = None  # warm-up done: the engine can serve measured requests
    closed_at: str | None = None  # its shutdown done
    overlapped_with: list[str] = dataclasses.field(default_factory=list)  # engines whose start spans cross this one's
    gpu_before: Any = None  # GPU pids and used memory just before the launch (None on CPU)
    finished_monotonic: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "arms": self.arms, "argv": self.argv, "log_path": str(self.log_path),
                "started_at": self.started_at, "load_s": _r(self.load_s), "warmup_s": _r(self.warmup_s),
                "warmup_requests": self.warmup_requests, "measured_s": _r(self.measured_s),
                "measured_requests": self.measured_requests, "shutdown_s": _r(self.shutdown_s),
                "wall_s": _r(self.wall_s), "memory_bytes": self.memory_bytes, "memory_kind": self.memory_kind,
                "perf_memory": self.memory.to_json(),
                "status": self.status, "reasons": self.reasons, "bcg_captures": self.captures,
                **({"standin_modules": list(self.standin_modules)} if self.standin_modules else {}),
                "first_measured_cell": self.first_measured_cell, "engine_run": self.facts.to_json(),
                "memory_basis": self.memory_basis, "launched_at": self.launched_at, "ready_at": self.ready_at,
                "finished_at": self.finished_at, "closed_at": self.closed_at,
                "overlapped_with": self.overlapped_with}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def first_measured_effect(cells: Sequence[Cell], metric: str, threshold_pct: float) -> list[dict[str, Any]]:
    """Per engine, the first measured request against the other measured requests of the same arm on that engine
    (arms sharing an engine may ask for different requests).

    ``differs`` when it lies further from their median than both ``threshold_pct`` and the others' own spread."""
    out = []
    by_engine: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        if cell.engine and cell.valid and cell.metric(metric) is not None:
            by_engine.setdefault(cell.engine["id"], []).append(cell)
    for engine_id, served in by_engine.items():
        first = next((c for c in served if c.engine["first_measured"]), None)
        if first is None:
            continue
        rest = [c.metric(metric) for c in served if c is not first and c.arm == first.arm]
        row: dict[str, Any] = {"engine": engine_id, "cell": first.index, "arm": first.arm,
                               "value": first.metric(metric), "others_median": None, "deviation_pct": None,
                               "others_spread_pct": None, "differs": None}
        if rest:
            median = statistics.median(rest)
            spread = max(abs(v - median) / median * 100 for v in rest) if median else None
            deviation = (first.metric(metric) - median) / median * 100 if median else None
            row.update(others_median=round(median, 4), deviation_pct=_r(deviation), others_spread_pct=_r(spread))
            if deviation is not None and spread is not None:
                row["differs"] = abs(deviation) > max(threshold_pct, spread)
        out.append(row)
    return out


def engines_block(mode: str, schedule: str, residency: dict[str, Any] | None, starts: list[dict[str, Any]],
                  cells: Sequence[Cell], metric: str, threshold_pct: float,
                  warmup_requests: int, overlap: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report's ``engines`` block: how many engine processes ran and where their wall time went."""
    wall = sum(s["wall_s"] or 0.0 for s in starts)
    measured = sum(s["measured_s"] or 0.0 for s in starts)
    in_requests = sum((c.metric("e2e_ms") or 0.0) / 1000 for c in cells if c.valid)
    return {"mode": mode, "schedule": schedule, "residency": residency, "overlap": overlap, "starts": starts,
            "engine_starts": len(starts), "warmup_requests_per_start": warmup_requests,
            "time": {"engine_wall_s": _r(wall), "loading_s": _r(sum(s["load_s"] or 0.0 for s in starts)),
                     "warmup_s": _r(sum(s["warmup_s"] or 0.0 for s in starts)), "measured_wall_s": _r(measured),
                     "measured_e2e_s": _r(in_requests),
                     "measured_share": round(in_requests / wall, 5) if wall else None},
            "first_measured": first_measured_effect(cells, metric, threshold_pct) if mode == "warm" else []}


def cold_engines_block(cells: Sequence[Cell], metric: str, threshold_pct: float) -> dict[str, Any]:
    """Cold mode in the same terms: one engine start per cell (a cell's wall covers load, warmup and request)."""
    starts = [{"id": f"cell{c.index}", "arms": [c.arm], "argv": c.argv, "log_path": c.log_path,
               "started_at": c.started_at, "load_s": None, "warmup_s": None, "warmup_requests": 0,
               "measured_s": None, "measured_requests": 1, "shutdown_s": None, "wall_s": c.wall_s,
               "memory_bytes": None, "memory_kind": None,  # a cold cell's footprint is not measured
               "perf_memory": {"kind": (c.perf or {}).get("memory_kind"), "basis": "the cell's own engine log"},
               "status": "closed", "reasons": [], "bcg_captures": None,
               "first_measured_cell": c.index} for c in cells if c.status != "skipped"]
    return engines_block("cold", "one_process_per_cell", None, starts, cells, metric, threshold_pct, 0)
