"""Strict reading of the engine's perf dump (``sglang generate --perf-dump-path``).

The dump's layout differs by release (see ``schemas/perf-dump.v1.schema.json``); every layout is checked against
that schema, so a missing or mistyped required key is an error with a reason instead of a silent ``n/a``. Unknown
extra keys are tolerated: newer engines add fields. What is extracted, and from where, is recorded next to each
figure (``denoise_source``, ``peak_memory_source``) so a report never has to guess.

Layouts (``PerfMetrics.layout``):
- ``legacy``: no ``memory_checkpoints``.
- ``sglang-0.5.10``: ``before_forward``/``after_forward`` checkpoints, four memory fields.
- ``sglang-0.5.23``: adds ``load_peak``/``runtime_peak``/``warmup_peak`` and ``peak_host_anon_mb``.
"""

from __future__ import annotations

import dataclasses
import os
import math
from pathlib import Path
from typing import Annotated, Any, Mapping

import msgspec

from .. import contract, inputs

SCHEMA_ID = "perf-dump.v1"
MEMORY_KINDS = ("device", "process_rss")
DENOISE_STAGE_SUFFIXES = ("DenoisingStage", "RefinementStage")
NOT_DENOISE_MARKER = "BeforeDenoisingStage"
RUNTIME_PEAK_CHECKPOINT = "runtime_peak"
NEWER_CHECKPOINTS = ("load_peak", "runtime_peak", "warmup_peak")

# Denoise sources: where PerfMetrics.denoise_ms came from.
DENOISE_FROM_STAGES = "stages"  # sum of steps[] whose name ends with DenoisingStage/RefinementStage
DENOISE_FROM_STEPS = "denoise_steps_ms"  # fallback: sum of the per-step records
# Peak memory sources.
PEAK_FROM_RUNTIME = "runtime_peak"  # memory_checkpoints.runtime_peak.peak_reserved_mb (0.5.23+)
PEAK_FROM_MAX = "max_checkpoint_peak_reserved"  # max peak_reserved_mb over all checkpoints
# A pipeline has tens of stages and a run at most hundreds of denoising steps; past these the dump is not one
# request's record, and its comparison would be a document of millions of rows.
MAX_STAGE_NAMES = 1_000
MAX_DENOISE_STEPS = 10_000


class PerfDumpError(contract.InputError):
    """A perf dump that is missing, unreadable or malformed (or holds a figure out of range: ``code``
    input.out_of_range); ``reason`` is one line for a cell's invalid reasons."""

    def __init__(self, path: str, reason: str, code: str | None = None):
        hint = ("no engine run records a figure or a step count this large: pass the dump the engine wrote, "
                "unedited" if code == inputs.OUT_OF_RANGE else
                "check that the run finished and wrote a complete --perf-dump-path file; "
                "a run without a valid perf dump cannot be reported")
        super().__init__(code or "input.perf_dump_invalid", f"perf dump {path}: {reason}", hint)
        self.path = path
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class PerfMetrics:
    """The figures one perf dump supports, with the source of each derived figure."""

    e2e_ms: float
    denoise_ms: float | None
    denoise_source: str | None
    denoise_stage_names: tuple[str, ...]
    stages: tuple[tuple[str, float], ...]  # pipeline stages, execution order
    denoise_steps_ms: tuple[float, ...]  # index = step number
    step0_ms: float | None
    steady_step_mean_ms: float | None  # mean of steps >= 1
    peak_memory_mb: float | None
    peak_memory_source: str | None
    peak_memory_checkpoint: str | None
    memory_kind: str | None  # None: the run's evidence does not say (memory_evidence.py); peak figures withheld
    layout: str
    commit_hash: str | None
    warnings: tuple[str, ...]
    # Scheduler/worker bookkeeping the engine times among its steps ("Scheduler.return_result.spill_arrays",
    # "GPUWorker.frame_materialize_for_return"; 0.5.23): kept apart from the pipeline stages.
    internal_steps: tuple[tuple[str, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``perf`` object of a bench-report.v1 cell."""
        return {
            "e2e_ms": self.e2e_ms,
            "denoise_ms": self.denoise_ms,
            "denoise_source": self.denoise_source,
            "denoise_stage_names": list(self.denoise_stage_names),
            "stages": dict(self.stages),
            "stage_order": [name for name, _ in self.stages],
            "denoise_steps_ms": list(self.denoise_steps_ms),
            "step0_ms": self.step0_ms,
            "steady_step_mean_ms": self.steady_step_mean_ms,
            "peak_memory_mb": self.peak_memory_mb,
            "peak_memory_source": self.peak_memory_source,
            "peak_memory_checkpoint": self.peak_memory_checkpoint,
            "memory_kind": self.memory_kind,
            "layout": self.layout,
            "commit_hash": self.commit_hash,
            "warnings": list(self.warnings),
            "internal_steps": dict(self.internal_steps),
        }


def is_internal_step(name: str) -> bool:
    """A scheduler/worker step (``Class.method...``), not a pipeline stage: stage names hold no dot."""
    return "." in name


def is_denoise_stage(name: str) -> bool:
    """The reference rule: ends with DenoisingStage or RefinementStage and is not a *BeforeDenoisingStage."""
    return name.endswith(DENOISE_STAGE_SUFFIXES) and NOT_DENOISE_MARKER not in name


def load_perf_dump(path: str | Path, memory_kind: str | None) -> PerfMetrics:
    """Read and parse one dump file; every problem is a PerfDumpError naming the file and the reason."""
    path = Path(path)
    if not os.path.lexists(path):
        raise PerfDumpError(str(path), "file not found (the run wrote no perf dump)")
    try:
        text = inputs.read_text(path, "input.perf_dump_invalid")  # regular files only, strict UTF-8
    except contract.InputError as exc:
        raise PerfDumpError(str(path), f"unreadable: {exc.message}") from None
    if not text.strip():
        raise PerfDumpError(str(path), "file is empty (the run was interrupted while writing it?)")
    checked = _decode_checked(text)
    if checked is not None:
        return parse_perf_dump(checked, memory_kind, source=str(path), schema_checked=True)
    try:
        document = inputs.parse_json(text, str(path), "input.perf_dump_invalid")  # no NaN/Infinity, bounded
    except contract.InputError as exc:
        raise PerfDumpError(str(path), f"not valid JSON ({exc.message}); 0.5.10 writes in place, so a partial "
                                       f"write is possible") from None
    return parse_perf_dump(document, memory_kind, source=str(path))


def parse_perf_dump(document: Any, memory_kind: str | None, source: str = "<perf dump>", *,
                    schema_checked: bool = False) -> PerfMetrics:
    """Parse an already-decoded dump. ``memory_kind`` says what the memory figures are: ``device`` memory,
    ``process_rss`` when the CPU adapter stands in for the device memory API, or None when the run's evidence does
    not say (memory_evidence.py): then no peak figure is reported, since nobody could say what it measured.
    ``schema_checked``: the document came from ``_decode_checked``, whose typed decoding already holds it to the
    schema and the figure bound."""
    if memory_kind is not None and memory_kind not in MEMORY_KINDS:
        raise ValueError(f"memory_kind must be one of {MEMORY_KINDS}, not {memory_kind!r}")
    if not isinstance(document, dict):
        raise PerfDumpError(source, f"top level is {type(document).__name__}, expected an object")
    if not schema_checked:
        _require_in_range(document, source)
        problems = contract.validation_errors(document, SCHEMA_ID)
        if problems:
            raise PerfDumpError(source, f"does not match {SCHEMA_ID}: " + "; ".join(problems[:5]))
        _require_finite(document, source)

    warnings: list[str] = []
    stages: dict[str, float] = {}
    internal: dict[str, float] = {}
    repeated: set[str] = set()
    for entry in document["steps"]:
        name = entry["name"]
        table = internal if is_internal_step(name) else stages
        if name in table and name not in repeated:
            repeated.add(name)
            warnings.append(f"stage {name} appears more than once; its durations are summed")
        table[name] = table.get(name, 0.0) + float(entry["duration_ms"])
    if len(stages) + len(internal) > MAX_STAGE_NAMES:
        raise PerfDumpError(source, f"names {len(stages) + len(internal)} different steps (at most "
                                    f"{MAX_STAGE_NAMES}: a pipeline has tens)", inputs.OUT_OF_RANGE)

    steps = _denoise_steps(document.get("denoise_steps_ms", []), source)
    denoise_names = tuple(n for n in stages if is_denoise_stage(n))
    stage_sum = sum(stages[n] for n in denoise_names)
    if denoise_names and stage_sum > 0:
        denoise_ms, denoise_source = stage_sum, DENOISE_FROM_STAGES
    elif steps and sum(steps) > 0:
        denoise_ms, denoise_source = sum(steps), DENOISE_FROM_STEPS
        warnings.append("no denoising stage time in steps[]; denoise is the sum of denoise_steps_ms")
    else:
        denoise_ms, denoise_source = None, None
        warnings.append("no denoising stage and no per-step records: denoise time was not measured")

    checkpoints: Mapping[str, Mapping[str, Any]] = document.get("memory_checkpoints") or {}
    peak_mb, peak_source, peak_checkpoint = _peak_memory(checkpoints)
    if peak_mb is None:
        warnings.append("no memory checkpoints: peak memory was not measured")
    elif memory_kind is None:
        peak_mb, peak_source, peak_checkpoint = None, None, None
        warnings.append("peak memory withheld: the run's log says neither that an accelerator was present nor "
                        "that the CPU adapter's memory stand-in ran, so its figures could be either")

    commit = document.get("commit_hash")
    return PerfMetrics(
        e2e_ms=float(document["total_duration_ms"]),
        denoise_ms=denoise_ms,
        denoise_source=denoise_source,
        denoise_stage_names=denoise_names,
        stages=tuple(stages.items()),
        denoise_steps_ms=tuple(steps),
        step0_ms=steps[0] if steps else None,
        steady_step_mean_ms=(sum(steps[1:]) / len(steps[1:])) if len(steps) > 1 else None,
        peak_memory_mb=peak_mb,
        peak_memory_source=peak_source,
        peak_memory_checkpoint=peak_checkpoint,
        memory_kind=memory_kind,
        layout=_layout(checkpoints),
        commit_hash=commit if isinstance(commit, str) and commit not in ("", "N/A") else None,
        warnings=tuple(warnings),
        internal_steps=tuple(internal.items()),
    )


def _require_in_range(document: dict[str, Any], source: str) -> None:
    """Every number in the dump's figures is at most inputs.MAX_FIGURE: a duration of 1.7e308 ms is finite but no
    measurement, and sums or changes over it would overflow. Read before the schema check, shape unchecked."""
    checkpoints = document.get("memory_checkpoints")
    values = [document.get("total_duration_ms"),
              *(e.get("duration_ms") for key in ("steps", "denoise_steps_ms")
                for e in _list(document.get(key)) if isinstance(e, dict)),
              *(v for c in (checkpoints.values() if isinstance(checkpoints, dict) else ()) if isinstance(c, dict)
                for v in c.values())]
    too_large = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                 and abs(v) > inputs.MAX_FIGURE]
    if too_large:
        raise PerfDumpError(source, f"a duration or memory figure is {too_large[0]!r} (at most "
                                    f"{inputs.MAX_FIGURE:g} ms or MiB: no run measures that)", inputs.OUT_OF_RANGE)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_Figure = Annotated[float, msgspec.Meta(ge=0, le=inputs.MAX_FIGURE)]
_OptionalFigure = _Figure | msgspec.UnsetType


_Text = str | msgspec.UnsetType


def _struct(name: str, fields: list[tuple[Any, ...]]) -> type:
    """A typed record of the dump (fields as (name, type[, default])); made by msgspec.defstruct since its fields are
    read only through msgspec.to_builtins."""
    return msgspec.defstruct(name, fields, gc=False)


_Step = _struct("_Step", [("name", Annotated[str, msgspec.Meta(min_length=1)]), ("duration_ms", _Figure)])
_DenoiseStep = _struct("_DenoiseStep", [("step", Annotated[int, msgspec.Meta(ge=0)]), ("duration_ms", _Figure)])
_MemorySnapshot = _struct("_MemorySnapshot", [("peak_reserved_mb", _Figure)] + [
    (key, _OptionalFigure, msgspec.UNSET)
    for key in ("allocated_mb", "reserved_mb", "peak_allocated_mb", "peak_host_anon_mb")])
# perf-dump.v1 as types, with every figure within inputs.MAX_FIGURE. It never accepts what the schema refuses; what
# it refuses and the schema accepts (an integer step written 2.0) takes the checked path. ``meta`` is checked to be
# an object and left undecoded (never read).
_Dump = _struct("_Dump", [
    ("total_duration_ms", Annotated[float, msgspec.Meta(gt=0, le=inputs.MAX_FIGURE)]),
    ("steps", list[_Step]),
    ("denoise_steps_ms", list[_DenoiseStep] | msgspec.UnsetType, msgspec.UNSET),
    ("memory_checkpoints", dict[str, _MemorySnapshot] | msgspec.UnsetType, msgspec.UNSET),
    *((key, _Text, msgspec.UNSET) for key in ("timestamp", "request_id", "commit_hash", "tag")),
    ("meta", dict[str, msgspec.Raw] | msgspec.UnsetType, msgspec.UNSET),
])
_DUMP_DECODER = msgspec.json.Decoder(_Dump)


def _decode_checked(text: str) -> dict[str, Any] | None:
    """The dump decoded by type in one C pass (a 400,000-step dump in a tenth of a second; jsonschema takes a
    minute), or None when it does not decode: then the checked path says why, in the schema's words."""
    try:
        dump = _DUMP_DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return msgspec.to_builtins(msgspec.structs.replace(dump, meta=msgspec.UNSET))


def _require_finite(document: dict[str, Any], source: str) -> None:
    """NaN passes a JSON Schema "number" check; a Python caller can hand one in (load_perf_dump rejects them)."""
    checkpoints = (document.get("memory_checkpoints") or {}).values()
    values = [document["total_duration_ms"], *(e["duration_ms"] for e in document["steps"]),
              *(e["duration_ms"] for e in document.get("denoise_steps_ms", [])),
              *(v for c in checkpoints for v in c.values() if isinstance(v, (int, float)))]
    if any(not math.isfinite(float(v)) for v in values):
        raise PerfDumpError(source, "a duration or memory figure is not a finite number")


def _denoise_steps(entries: list[dict[str, Any]], source: str) -> list[float]:
    """Per-step durations indexed by step number; steps must be 0..n-1, each once."""
    if len(entries) > MAX_DENOISE_STEPS:
        raise PerfDumpError(source, f"denoise_steps_ms holds {len(entries)} steps (at most {MAX_DENOISE_STEPS})",
                            inputs.OUT_OF_RANGE)
    by_step: dict[int, float] = {}
    for entry in entries:
        step = entry["step"]
        if step in by_step:
            raise PerfDumpError(source, f"denoise_steps_ms lists step {step} twice")
        by_step[step] = float(entry["duration_ms"])
    if by_step and sorted(by_step) != list(range(len(by_step))):
        raise PerfDumpError(source, f"denoise_steps_ms steps are not 0..{len(by_step) - 1}: {sorted(by_step)}")
    return [by_step[i] for i in range(len(by_step))]


def _peak_memory(checkpoints: Mapping[str, Mapping[str, Any]]) -> tuple[float | None, str | None, str | None]:
    """Prefer runtime_peak (serving memory; load_peak is dominated by weight loading), else the max over all."""
    if RUNTIME_PEAK_CHECKPOINT in checkpoints:
        return float(checkpoints[RUNTIME_PEAK_CHECKPOINT]["peak_reserved_mb"]), PEAK_FROM_RUNTIME, \
            RUNTIME_PEAK_CHECKPOINT
    if not checkpoints:
        return None, None, None
    name = max(checkpoints, key=lambda n: float(checkpoints[n]["peak_reserved_mb"]))
    return float(checkpoints[name]["peak_reserved_mb"]), PEAK_FROM_MAX, name


def _layout(checkpoints: Mapping[str, Mapping[str, Any]]) -> str:
    if not checkpoints:
        return "legacy"
    if any(n in checkpoints for n in NEWER_CHECKPOINTS) or any("peak_host_anon_mb" in c
                                                                  for c in checkpoints.values()):
        return "sglang-0.5.23"
    return "sglang-0.5.10"
