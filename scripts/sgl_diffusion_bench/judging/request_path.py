"""The one request path: a request's evidence (its log verdict, the engine's exit, its perf dump and outputs, the
GPU's neighbours) judged into valid, invalid or failed. Cold cells, warm-engine requests and profiled runs all
come here, so one rule decides what counts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TextIO

from .. import contract, fileio, progress
from ..engine import engine_process
from . import host_load, log_gates, media, memory_evidence, output_check, perf_dump, validity
from .cell import Cell
from ..engine import adapter_record
from ..engine.inside.cpu_adapter import sgl_cpu_adapter

@dataclasses.dataclass(frozen=True)
class RequestJudgement:
    status: str  # valid | invalid | failed
    reasons: tuple[str, ...]
    perf: dict[str, Any] | None
    outputs: tuple[dict[str, Any], ...]


def find_outputs(run_dir: Path, stem: str, task: str | None = None) -> list[Path]:
    """This run's outputs of the kinds its task produces (media.py): ``<stem>[_N].<ext>`` in its own directory."""
    return media.split_outputs(run_dir, stem, task)[0]


NO_OUTPUT_SAVED = "artifacts.no_output: the run saved no output file"
NO_PERF_DUMP_WRITTEN = "artifacts.no_perf_dump: the run wrote no perf dump"


def _request_evidence(verdict: log_gates.GateVerdict) -> list[str]:
    """A request's log must show the request ran: an empty segment, or one without the engine's own line for a saved
    output or a dumped perf file, proves nothing however good the files beside it look."""
    if verdict.lines_seen == 0:
        return ["log.empty_segment: the request's log is empty: nothing in it shows the request ran"]
    if not verdict.saved_outputs and not verdict.metrics_dumps:
        return ["log.no_request_evidence: the request's log has no 'Output saved to' and no 'Metrics dumped to' "
                "line: nothing in it shows the request ran to the end"]
    return []


def judge_request(*, verdict: log_gates.GateVerdict, returncode: int | None, stop_reason: str | None,
                  perf_dump_path: Path | None, output_paths: Sequence[Path], memory_kind: str | None,
                  requested: output_check.RequestedShape = output_check.NOT_REQUESTED,
                  no_perf_dump_reason: str = NO_PERF_DUMP_WRITTEN,
                  no_output_reason: str = NO_OUTPUT_SAVED) -> RequestJudgement:
    """One request's status from its evidence; every reason that applies is kept, not only the first. Every
    output is opened (output_check.py): one that does not decode at the ``requested`` shape does not count. The
    ``no_*_reason`` texts let judge_run tell "not given" from "not written"."""
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
    reasons += _request_evidence(verdict)
    perf = None
    if perf_dump_path is not None and perf_dump_path.is_file():
        try:
            perf = perf_dump.load_perf_dump(perf_dump_path, memory_kind).to_json()
        except perf_dump.PerfDumpError as exc:
            reasons.append(f"perf_dump.invalid: {exc.reason}")
    else:
        reasons.append(no_perf_dump_reason)
    outputs = tuple({"path": str(p), "sha256": fileio.sha256_file(p), "bytes": p.stat().st_size} for p in output_paths)
    for path in output_paths:
        try:
            output_check.check_output(path, requested)
        except output_check.OutputProblem as problem:
            reasons.append(f"{problem.code}: {problem.message}")
    if not outputs:
        reasons.append(no_output_reason)
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


@dataclasses.dataclass(frozen=True)
class Boundary:
    """What surrounded one request: foreign GPU processes and host load, sampled at its start and at its end."""

    contention_checked: bool
    gpu_before: Sequence[Mapping[str, Any]]
    gpu_after: Sequence[Mapping[str, Any]]
    host_before: Mapping[str, Any]
    host_after: Mapping[str, Any]

    @classmethod
    def unchecked(cls) -> "Boundary":
        return cls(False, [], [], {}, {})


def finish_cell(cell: Cell, *, verdict: log_gates.GateVerdict, returncode: int | None,
                stop_reason: str | None, stop_line: str | None, stopped_after_s: float | None, wall_s: float,
                perf_dump_path: Path, output_dir: Path, output_stem: str, task: str | None, memory_kind: str | None,
                boundary: Boundary | Callable[[], Boundary], requested: output_check.RequestedShape,
                request_error: str | None = None) -> None:
    """Judge one request (a cold cell's process, or one request of a warm engine) and write the verdict into its
    cell: status, reasons, perf (valid cells only), outputs and every gate. ``request_error``: a warm engine reported
    that the request raised (the engine itself serves on). A ``boundary`` callable is resolved after judging (a host
    sample's window runs meanwhile)."""
    outputs, others = media.split_outputs(output_dir, output_stem, task)
    judged = judge_request(verdict=verdict, returncode=returncode, stop_reason=stop_reason,
                           perf_dump_path=perf_dump_path, output_paths=outputs, memory_kind=memory_kind,
                           requested=requested)
    if request_error:
        judged = dataclasses.replace(judged, status="failed", reasons=(request_error, *judged.reasons), perf=None)
    boundary = boundary() if callable(boundary) else boundary
    gates = {"contention": {"checked": boundary.contention_checked, "before": list(boundary.gpu_before),
                            "after": list(boundary.gpu_after)},
             "log": verdict.to_json(), "stop": {"reason": stop_reason, "line": stop_line, "after_s": stopped_after_s},
             "host": host_load.gate(dict(boundary.host_before), dict(boundary.host_after))}
    status, reasons = with_contention(judged.status, judged.reasons, boundary.gpu_before, boundary.gpu_after)
    cell.status, cell.reasons, cell.wall_s, cell.returncode = status, reasons, round(wall_s, 3), returncode
    cell.perf, cell.outputs, cell.gates = judged.perf, list(judged.outputs), gates
    if others:  # listed for debugging, never taken as this task's output
        cell.other_files = [str(p) for p in others]
    validity.strip_numbers(cell)


def run_cold(cell: Cell, *, argv: Sequence[str], env: dict[str, str], run_dir: Path,
             gate: log_gates.RequestLogGate, perf_dump_path: Path, output_dir: Path, output_stem: str,
             task: str | None, timeout_s: float | None, echo: TextIO | None = None,
             foreign_check: Callable[[], list[dict[str, Any]]] | None = None,
             observe: Callable[[str], None] | None = None,
             on_started: Callable[[], None] | None = None,
             what: str = "engine: start, one request, exit") -> dict[str, Any] | None:
    """One `sglang generate` process, start to exit, judged into ``cell`` (campaign cells and profiled runs alike).

    ``observe`` sees every line too (the engine's effective settings); ``on_started`` is called once the engine
    process runs. Returns the CPU adapter's record of the run (None when the adapter printed nothing).

    The host is sampled at both ends: its window overlaps the engine's start (whose processes do not exist yet) and,
    once the engine says it dumped the request's metrics, the engine's shutdown (its process group left out), so
    nobody waits for the 0.1 s window after the exit (the tiny CPU engine takes 1-9 s to shut down after that line)."""
    before = foreign_check() if foreign_check else []
    host_before = host_load.start_sample()
    adapter_lines: list[str] = []
    memory = memory_evidence.MemoryEvidence()
    engine_group: list[int] = []
    host_after: list[Callable[[], dict[str, Any]]] = []

    def started(pid: int) -> None:
        engine_group.append(pid)
        if on_started is not None:
            on_started()

    def on_line(line: str) -> str | None:
        if sgl_cpu_adapter.TAG in line:
            adapter_lines.append(line)
        memory.feed(line)
        if observe is not None:
            observe(line)
        stop = gate.feed(line)
        if gate.metrics_dumped and not host_after:
            host_after.append(host_load.start_sample(exclude_group=engine_group[0]))
        return stop

    cell.started_at = contract.utc_now()
    cell.log_path = str(run_dir / "engine.log")
    with progress.phase(what, f"its log: {run_dir / 'engine.log'}") as ticker:
        run = engine_process.run_engine(list(argv), env, run_dir / "engine.log", on_line=on_line,
                                        timeout_s=timeout_s, echo=echo, on_started=started, ticker=ticker,
                                        cwd=run_dir)  # the engine records the git commit of its cwd
        if run.returncode or run.stop_reason:
            ticker.outcome = f"ended ({run.stop_reason or f'exit code {run.returncode}'})"
    after = foreign_check() if foreign_check else []
    if not host_after:  # no metrics line (a failed or stopped run): the window overlaps the judging below
        host_after.append(host_load.start_sample())

    def boundary() -> Boundary:
        return Boundary(foreign_check is not None, before, after, host_before(), host_after[0]())

    adapter = adapter_record.summarize(adapter_lines)
    finish_cell(cell, verdict=gate.verdict(), returncode=run.returncode, stop_reason=run.stop_reason,
                stop_line=run.stop_line, stopped_after_s=run.stopped_after_s, wall_s=run.wall_s,
                perf_dump_path=perf_dump_path, output_dir=output_dir, output_stem=output_stem, task=task,
                memory_kind=memory.kind, boundary=boundary, requested=output_check.requested_shape(argv))
    return adapter

