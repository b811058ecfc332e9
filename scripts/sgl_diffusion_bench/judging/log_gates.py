"""Evidence gates over the engine's log: does one request's log support calling its row valid?

A zero exit code proves little: `sglang generate` catches per-request errors and exits 0, `--backend auto` silently
falls back to diffusers, and a breakable-CUDA-graph (BCG) row can run eager. The markers that reveal this are data
(``data/log_markers.yaml``, one set per engine release). ``RequestLogGate`` is fed the engine's lines as they arrive and
says the moment the run must be stopped (a diffusers fallback); ``scan_log`` applies the same gate to a recorded log.

Pseudo-use in a runner::

    gate = RequestLogGate(log_markers.markers_for_version(installed_version), bcg_expected=True, quality="high")
    for line in child.stdout:
        if gate.feed(line):
            terminate(child)
    verdict = gate.verdict()       # verdict.valid, verdict.reasons, verdict.to_json()
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .. import contract
from .log_markers import FACT_KINDS, Marker, MarkerSet, required_literal

# ANSI colour and cursor codes (the engine colours numbers and paths; tqdm moves the cursor and hides it with private
# modes such as ESC[?25l), and a colour code whose ESC was lost on the way ("[0m", "[1;36m").
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[\d+(?:;\d+)*m")
MAX_RECORDED_LINES = 50  # per list; a crash loop must not turn a verdict into megabytes
MAX_LINE_CHARS = 400


@dataclasses.dataclass(frozen=True)
class Reason:
    code: str
    message: str
    line_no: int | None = None


@dataclasses.dataclass(frozen=True)
class LineRef:
    line_no: int
    line: str
    code: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line_no": self.line_no, "line": self.line}
        if self.code:
            out["code"] = self.code
        return out


@dataclasses.dataclass(frozen=True)
class BcgEvidence:
    expected: bool
    capture_seen: bool
    captured_graphs: int
    captured_segments: int | None
    signature_misses: int
    invalid_signals: tuple[LineRef, ...]
    late_fusion_lines: tuple[LineRef, ...]


@dataclasses.dataclass(frozen=True)
class GateVerdict:
    """What one request's log proves. ``to_json`` follows log-markers.v1 ``$defs/gate_verdict``."""

    valid: bool
    release: str
    reasons: tuple[Reason, ...]
    fallback: LineRef | None
    native_evidence: bool
    standin_modules: tuple[str, ...]  # served from a stand-in, not the real package (sorted)
    bcg: BcgEvidence
    failure_lines: tuple[LineRef, ...]
    generated_outputs: int | None
    saved_outputs: tuple[str, ...]
    metrics_dumps: tuple[str, ...]
    profiler_traces: tuple[str, ...]
    server_ready: bool
    lines_seen: int
    warnings: tuple[tuple[str, str], ...]  # (code, message)

    def reason_codes(self) -> list[str]:
        return [r.code for r in self.reasons]

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "release": self.release,
            "reasons": [dataclasses.asdict(r) for r in self.reasons],
            "fallback": self.fallback.to_json() if self.fallback else None,
            "native_evidence": self.native_evidence,
            "standin_modules": list(self.standin_modules),
            "bcg": {"expected": self.bcg.expected, "capture_seen": self.bcg.capture_seen,
                    "captured_graphs": self.bcg.captured_graphs, "captured_segments": self.bcg.captured_segments,
                    "signature_misses": self.bcg.signature_misses,
                    "invalid_signals": [s.to_json() for s in self.bcg.invalid_signals],
                    "late_fusion_lines": [s.to_json() for s in self.bcg.late_fusion_lines]},
            "failure_lines": [f.to_json() for f in self.failure_lines],
            "generated_outputs": self.generated_outputs,
            "saved_outputs": list(self.saved_outputs),
            "metrics_dumps": list(self.metrics_dumps),
            "profiler_traces": list(self.profiler_traces),
            "server_ready": self.server_ready,
            "lines_seen": self.lines_seen,
            "warnings": [{"code": c, "message": m} for c, m in self.warnings],
        }


def clean_line(line: str) -> str:
    """A log line without ANSI codes and line terminator, as the markers are written: the one stripper every reader
    of engine logs uses."""
    if "[" in line:
        line = ANSI.sub("", line)
    return line.rstrip("\r\n")


def _short(line: str) -> str:
    text = contract.redact(line.strip())
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


class RequestLogGate:
    """Gate over one request's engine log, fed line by line while the engine runs.

    ``bcg_expected``: the row claims breakable CUDA graphs. ``quality``: the request's --quality (late-fusion check).
    ``require_native``: the log covers model loading, so it must show the native loader ("(sgl-diffusion version)").
    ``profiling``: the row needs the engine's trace. ``prior_captures``: graphs a warm engine captured before this
    request's lines began (a warm-engine runner gates the startup log separately).
    """

    def __init__(self, markers: MarkerSet, *, bcg_expected: bool, quality: str | None = None,
                 require_native: bool = False, profiling: bool = False, prior_captures: int = 0):
        self.markers = markers
        self.bcg_expected = bcg_expected
        self.quality = quality
        self.require_native = require_native
        self.profiling = profiling
        self.prior_captures = prior_captures
        late_fusion_applies = bcg_expected and quality in markers.late_fusion_qualities
        compiled = [(m, m.compiled(quality)) for m in markers.markers if m.kind not in FACT_KINDS
                    and (m.kind != "late_fusion" or late_fusion_applies)]
        self._active = tuple((m, p, required_literal(p)) for m, p in compiled)
        self._line_no = 0
        self._stop_reason: str | None = None
        self._fallback: LineRef | None = None
        self._native = False
        self._server_ready = False
        self._captures = 0
        self._segments: int | None = None
        self._misses = 0
        self._generated: int | None = None
        self._lists: dict[str, list[Any]] = {k: [] for k in (
            "failure", "component", "bcg_invalid", "late_fusion", "profiler_problem", "outputs", "metrics", "traces")}
        self._omitted: dict[str, int] = {}
        self._warnings: dict[str, list[Any]] = {}  # code -> [first LineRef, count]
        self._standins: dict[str, LineRef] = {}  # module -> the first line that served it

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def metrics_dumped(self) -> bool:
        """The engine said it wrote the request's perf dump: the request is done, the process winds down."""
        return bool(self._lists["metrics"])

    def feed(self, line: str) -> str | None:
        """Take one log line; return a stop-reason code the first time a line means the run must stop now."""
        self._line_no += 1
        text = clean_line(line)
        lowered = text.lower()
        stop = None
        for marker, pattern, literal in self._active:
            if literal not in lowered:
                continue
            match = pattern.search(text)
            if match and self._record(marker, match, text) and self._stop_reason is None:
                self._stop_reason = stop = marker.code
        return stop

    def _keep(self, name: str, item: Any) -> None:
        if len(self._lists[name]) < MAX_RECORDED_LINES:
            self._lists[name].append(item)
        else:
            self._omitted[name] = self._omitted.get(name, 0) + 1

    def _record(self, marker: Marker, match: re.Match[str], text: str) -> bool:
        """Update the evidence; True when this marker stops the run."""
        ref = LineRef(self._line_no, _short(text), marker.code)
        groups = match.groupdict()
        kind = marker.kind
        if kind == "diffusers_fallback":
            if self._fallback is None:
                self._fallback = ref
        elif kind == "native_evidence":
            self._native = True
        elif kind == "component_fallback":
            self._keep("component", ref)
        elif kind == "engine_failure":
            self._keep("failure", ref)
        elif kind == "generated_outputs":
            self._generated = int(groups["count"])
        elif kind == "output_saved":
            self._keep("outputs", groups["path"])
        elif kind == "metrics_dumped":
            if groups["path"] not in self._lists["metrics"]:
                self._keep("metrics", groups["path"])
        elif kind == "profiler_trace_saved":
            self._keep("traces", groups["path"])
        elif kind == "profiler_problem":
            self._keep("profiler_problem", ref)
        elif kind == "server_ready":
            self._server_ready = True
        elif kind == "bcg_capture":
            self._captures += 1
            if groups.get("segments") is not None:
                self._segments = (self._segments or 0) + int(groups["segments"])
        elif kind in ("bcg_invalid", "bcg_signature_miss"):
            self._misses += kind == "bcg_signature_miss"
            self._keep("bcg_invalid", ref)
        elif kind == "late_fusion":
            if self._captures or self.prior_captures:
                self._keep("late_fusion", ref)
        elif kind == "warning":
            self._warn(marker.code, ref)
        elif kind == "standin_module":
            self._standins.setdefault(groups["module"], ref)
        return marker.stop

    def _warn(self, code: str, ref: LineRef) -> None:
        seen = self._warnings.setdefault(code, [ref, 0])
        seen[1] += 1

    def verdict(self) -> GateVerdict:
        """The evidence so far and whether it supports a valid row (call after the engine exits)."""
        reasons: list[Reason] = []
        warnings: list[tuple[str, str]] = [("log_markers.release_guessed", w) for w in self.markers.selection_warnings]
        lists = self._lists

        def first_per_code(refs: list[LineRef], prefix: str) -> None:
            seen: set[str] = set()
            for ref in refs:
                if ref.code not in seen:
                    seen.add(ref.code)
                    reasons.append(Reason(ref.code, f"{prefix} at log line {ref.line_no}: {ref.line}", ref.line_no))

        if self._fallback:
            reasons.append(Reason("backend.diffusers_fallback", "the engine fell back to the diffusers backend at log "
                                  f"line {self._fallback.line_no} ({self._fallback.line}); fix native backend "
                                  "selection (model path/--model-id) before measuring", self._fallback.line_no))
        first_per_code(lists["component"], "a component is not sglang's own implementation")
        first_per_code(lists["failure"], "engine failure")
        if self._generated == 0:
            reasons.append(Reason("engine.zero_outputs", "the engine generated 0 outputs", None))
        if self.require_native and not self._native and not self._fallback:
            reasons.append(Reason("backend.no_native_evidence", "no '(sgl-diffusion version)' component line: the log "
                                  "does not show the native sglang loader", None))
        capture_seen = bool(self._captures or self.prior_captures)
        if self.bcg_expected:
            if not self.markers.release.bcg_supported:
                reasons.append(Reason("bcg.unsupported_release", f"sglang {self.markers.release.id} has no breakable "
                                      "CUDA graphs; a BCG row cannot be measured on it", None))
            if not capture_seen:
                reasons.append(Reason("bcg.no_capture", "no '[Diffusion BCG] captured' marker: the graphs were never "
                                      "captured, so this row ran eager", None))
            first_per_code(lists["bcg_invalid"], "BCG evidence is invalid")
            first_per_code(lists["late_fusion"], f"quality fusion for quality={self.quality} mounted after BCG capture")
        else:
            if self._captures:
                reasons.append(Reason("bcg.unexpected_capture", "'[Diffusion BCG] captured' on a row run as eager: "
                                      "pass --enable-breakable-cuda-graph false", None))
            for ref in lists["bcg_invalid"]:
                warnings.append((ref.code or "bcg.signal", f"BCG marker on an eager run (harmless) at log line "
                                 f"{ref.line_no}: {ref.line}"))
        if self.profiling:
            if not lists["traces"]:
                reasons.append(Reason("profiler.no_trace", "no 'Saved profiler traces to:' line: the engine wrote no "
                                      "trace", None))
            first_per_code(lists["profiler_problem"], "profiler problem")
        else:
            for ref in lists["profiler_problem"]:
                warnings.append((ref.code or "profiler.problem", f"log line {ref.line_no}: {ref.line}"))
        for code, (ref, count) in self._warnings.items():
            times = f" ({count} times)" if count > 1 else ""
            warnings.append((code, f"log line {ref.line_no}{times}: {ref.line}"))
        if self._standins:
            first = min(self._standins.values(), key=lambda r: r.line_no)
            warnings.append(("engine.standin_kernels", f"stand-in modules ran instead of the real packages: "
                             f"{', '.join(sorted(self._standins))} (first at log line {first.line_no}): this is not "
                             "the engine users install, so its kernels and timings stand for no real run"))
        for name, count in self._omitted.items():
            warnings.append(("log.lines_omitted", f"{count} more '{name}' lines not recorded (limit "
                             f"{MAX_RECORDED_LINES})"))
        return GateVerdict(
            valid=not reasons, release=self.markers.release.id, reasons=tuple(reasons), fallback=self._fallback,
            native_evidence=self._native, standin_modules=tuple(sorted(self._standins)),
            bcg=BcgEvidence(self.bcg_expected, capture_seen, self._captures + self.prior_captures, self._segments,
                            self._misses, tuple(lists["bcg_invalid"]), tuple(lists["late_fusion"])),
            failure_lines=tuple(lists["failure"] + lists["component"]), generated_outputs=self._generated,
            saved_outputs=tuple(lists["outputs"]), metrics_dumps=tuple(lists["metrics"]),
            profiler_traces=tuple(lists["traces"]), server_ready=self._server_ready, lines_seen=self._line_no,
            warnings=tuple(warnings))


def scan_log(text: str, markers: MarkerSet, *, bcg_expected: bool = False, quality: str | None = None,
             require_native: bool = False, profiling: bool = False, prior_captures: int = 0) -> GateVerdict:
    """Gate a whole recorded log (line numbers count '\\n' as an editor does; '\\r' progress bars stay in a line)."""
    gate = RequestLogGate(markers, bcg_expected=bcg_expected, quality=quality, require_native=require_native,
                          profiling=profiling, prior_captures=prior_captures)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        gate.feed(line)
    return gate.verdict()
