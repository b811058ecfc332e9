"""judge_run's package side: the runner's own verdict on a run made elsewhere, from the files it left.

A warm campaign splits a request's evidence over two files: the request's own segment (``<run>/engine.log``) and the
warm engine's whole log (``<label>__warm-eN/engine.log``, beside the run directories), which holds model loading (the
native-backend evidence), BCG captures made at the engine's warm-up and the memory evidence. The runner reads both,
so judge_run does too: given ``--engine-log``, or found beside the request (the warm engine's log that brackets this
run's name with its BEGIN marker). Any reason that more evidence could cure says which file or flag supplies it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .. import inputs
from . import log_gates, log_markers, media, memory_evidence, output_check, request_path
from ..engine.inside.warm_driver import MARKER as WARM_MARKER

INTENTS = ("measure", "profile")
PROFILE_NOTE = ("timed under the engine's profiler: its timings are distorted by the profiler's own overhead and "
                "are never compared with unprofiled runs")
NO_PERF_DUMP_GIVEN = "artifacts.no_perf_dump_given: no --perf-dump was passed, so there is no measurement to judge"
NO_OUTPUT_GIVEN = "artifacts.no_output_given: no --output was passed, so no output file was checked"
# Reasons that more evidence could cure, and what would supply it.
CURES = {
    "backend.no_native_evidence": "a warm engine's request segment has no model loading: pass --engine-log "
                                  "<label>__warm-eN/engine.log (the warm engine's own log), or --no-require-native",
    "bcg.no_capture": "a warm engine captures its graphs at its warm-up, before this request: pass --engine-log "
                      "<label>__warm-eN/engine.log",
}


@dataclasses.dataclass(frozen=True)
class JudgeRequest:
    """What judge_run was given, built at the CLI's edge."""

    log: Path
    engine_version: str
    perf_dump: Path | None = None
    outputs: tuple[Path, ...] = ()
    exit_code: int | None = None
    bcg: bool = False
    quality: str | None = None
    task: str | None = None
    require_native: bool = True
    engine_log: Path | None = None
    intent: str = "measure"
    requested: output_check.RequestedShape = output_check.NOT_REQUESTED


def _read(path: Path) -> str:
    """An engine log (regular files only; a stray byte of a crashed process is kept as U+FFFD, not refused)."""
    return inputs.read_bytes(path, "input.unreadable", gunzip=False).decode("utf-8", errors="replace")


def find_engine_log(request_log: Path) -> Path | None:
    """The warm engine's log that served the run whose segment is ``request_log``: a ``*__warm-e*/engine.log``
    beside the run's directory whose BEGIN marker names that directory. None when there is none."""
    run_dir = request_log.resolve().parent
    begin = f"{WARM_MARKER} BEGIN {run_dir.name}"
    for candidate in sorted(run_dir.parent.glob("*__warm-e*/engine.log")):
        if candidate.is_file() and begin in _read(candidate):
            return candidate
    return None


def _engine_prefix(engine_text: str, run_name: str) -> list[str]:
    """The warm engine's lines before this run's BEGIN marker (all of them when no marker names the run)."""
    lines = engine_text.splitlines()
    begin = f"{WARM_MARKER} BEGIN {run_name}"
    cut = next((i for i, line in enumerate(lines) if line.strip() == begin), len(lines))
    return lines[:cut]


def _with_cure(reason: str, engine_log_used: bool) -> str:
    code = reason.split(":", 1)[0]
    cure = CURES.get(code)
    return f"{reason} ({cure})" if cure and not engine_log_used else reason


def judge(request: JudgeRequest) -> dict[str, Any]:
    """The judge-run.v1 payload (without the envelope)."""
    text = _read(request.log)
    markers = log_markers.markers_for_version(request.engine_version)
    engine_log = request.engine_log or find_engine_log(request.log)
    prefix = _engine_prefix(_read(engine_log), request.log.resolve().parent.name) if engine_log else []
    start = log_gates.scan_log("\n".join(prefix), markers, bcg_expected=request.bcg, quality=request.quality,
                               require_native=request.require_native) if engine_log else None
    profiling = request.intent == "profile"
    verdict = log_gates.scan_log(text, markers, bcg_expected=request.bcg, quality=request.quality,
                                 require_native=request.require_native and engine_log is None, profiling=profiling,
                                 prior_captures=start.bcg.captured_graphs if start else 0)
    memory = memory_evidence.evidence_of([*prefix, *text.splitlines()])
    wanted = media.output_suffixes(request.task)
    outputs = [p for p in request.outputs if p.suffix.lower() in wanted]
    judged = request_path.judge_request(
        verdict=verdict, returncode=request.exit_code, stop_reason=None, perf_dump_path=request.perf_dump,
        output_paths=[p for p in outputs if p.is_file()], memory_kind=memory.kind, requested=request.requested,
        no_perf_dump_reason=NO_PERF_DUMP_GIVEN if request.perf_dump is None else
        f"artifacts.no_perf_dump: {request.perf_dump} does not exist (the run wrote no perf dump there)",
        no_output_reason=NO_OUTPUT_GIVEN if not request.outputs else request_path.NO_OUTPUT_SAVED)
    reasons = [f"artifacts.output_missing: {p} does not exist" for p in outputs if not p.is_file()]
    # the engine start's own problems (loading, native backend) count for every request it served, as in the runner
    reasons += [f"{r.code}: {r.message} (in {engine_log})" for r in (start.reasons if start else ())
                if r.code.startswith("backend.")]
    reasons += [_with_cure(r, engine_log is not None) for r in judged.reasons]
    if not profiling and verdict.profiler_traces:
        reasons.append(f"profiler.timings_distorted: the run saved profiler traces "
                       f"({verdict.profiler_traces[0]}): its timings are not a measurement; judge it with "
                       "--intent profile")
    status = judged.status if judged.status == "failed" or not reasons else "invalid"
    return {"intent": {"purpose": request.intent, "bcg": request.bcg, "quality": request.quality,
                       "task": request.task, "engine_version": request.engine_version,
                       "require_native": request.require_native, "memory_kind": memory.kind,
                       "memory_basis": memory.basis, "engine_log": str(engine_log) if engine_log else None,
                       "requested": request.requested.to_json()},
            "status": status, "reasons": reasons, "log": verdict.to_json(),
            "perf": judged.perf if status == "valid" else None,
            "perf_dump_path": str(request.perf_dump) if request.perf_dump else None,
            "outputs": list(judged.outputs),
            "other_files": [str(p) for p in request.outputs if p.suffix.lower() not in wanted],
            "timing_note": PROFILE_NOTE if profiling else None,
            "standin_modules": sorted({*verdict.standin_modules, *(start.standin_modules if start else ())})}
