"""The one request path: a request's evidence (its log verdict, the engine's exit, its perf dump and outputs, the
GPU's neighbours) judged into valid, invalid or failed. Cold cells, warm-engine requests and profiled runs all
come here, so one rule decides what counts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import engine_process, fileio, log_gates, media, perf_dump

@dataclasses.dataclass(frozen=True)
class RequestJudgement:
    status: str  # valid | invalid | failed
    reasons: tuple[str, ...]
    perf: dict[str, Any] | None
    outputs: tuple[dict[str, Any], ...]


def find_outputs(run_dir: Path, stem: str, task: str | None = None) -> list[Path]:
    """This run's outputs of the kinds its task produces (media.py): ``<stem>[_N].<ext>`` in its own directory."""
    return media.split_outputs(run_dir, stem, task)[0]


def judge_request(*, verdict: log_gates.GateVerdict, returncode: int | None, stop_reason: str | None,
                  perf_dump_path: Path, output_paths: Sequence[Path], memory_kind: str) -> RequestJudgement:
    """One request's status from its evidence; every reason that applies is kept, not only the first."""
    reasons: list[str] = []
    failed = False
    if stop_reason == engine_process.TIMEOUT_REASON:
        failed = True
        reasons.append("engine.timeout: stopped after the cell timeout")
    elif stop_reason:
        reasons.append(f"{stop_reason}: engine stopped at once on this line")
    if returncode not in (0, None) and not stop_reason:
        failed = True
        reasons.append(f"engine.exit_code: exited {returncode}")
    reasons += [f"{r.code}: {r.message}" for r in verdict.reasons if not (stop_reason and r.code == stop_reason)]
    perf = None
    if perf_dump_path.is_file():
        try:
            perf = perf_dump.load_perf_dump(perf_dump_path, memory_kind).to_json()
        except perf_dump.PerfDumpError as exc:
            reasons.append(f"perf_dump.invalid: {exc.reason}")
    else:
        reasons.append("artifacts.no_perf_dump: the run wrote no perf dump")
    outputs = tuple({"path": str(p), "sha256": fileio.sha256_file(p), "bytes": p.stat().st_size} for p in output_paths)
    if not outputs:
        reasons.append("artifacts.no_output: the run saved no output file")
    status = "failed" if failed else ("invalid" if reasons else "valid")
    # a request that does not count carries no numbers; its dump stays on disk at perf_dump_path for debugging
    return RequestJudgement(status, tuple(reasons), perf if status == "valid" else None, outputs)


def with_contention(status: str, reasons: Sequence[str], before: Sequence[Mapping[str, Any]],
                    after: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """A cell next to a foreign GPU process does not count, however good its own evidence looks."""
    reasons = list(reasons)
    if before or after:
        pids = sorted({p["pid"] for p in [*before, *after]})
        reasons.append(f"gpu.contended: foreign GPU process(es) {pids} at the cell boundaries")
        if status == "valid":
            status = "contended"
    return status, reasons
