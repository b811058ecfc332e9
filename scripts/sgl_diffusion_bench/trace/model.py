"""The trace model: one compact, columnar table per event kind, interned names, and stage/step tags.

Built once per file by ``build_trace``; every analysis reads it and nothing mutates it afterwards.

How events are tied together (the same link the ``ac2g`` flow arrows draw in a trace viewer): a device op (kernel,
memcpy, memset) carries the ``correlation`` id of the host runtime/driver call that launched it, and a CUDA-graph
replay gives all its kernels the correlation id of the one ``cudaGraphLaunch``. The host call then sits on a CPU
thread inside the stage and step ranges, so each kernel is attributed to the stage and step that *launched* it.

Stages come from what the trace carries:
- ``annotations``: ``record_function`` ranges (``TextEncodingStage``, ``DenoisingStage``, ``DecodingStage``, ...);
  the outermost enclosing range names the stage, ``denoising_step_N`` ranges name the steps.
- ``python_frames``: traces written by ``sglang generate --profile`` have no stage annotations, only stack frames;
  the outermost frame of a module under ``.../pipelines_core/stages/<module>.py`` on the launching thread names the
  stage (``denoising`` -> ``DenoisingStage``), and ``ProfilerStep#N`` ranges name the steps.

Steps come from ``denoising_step_N`` annotations, else ``ProfilerStep#N`` ranges, else (``step_frames``) the Python
frames of the denoise loop's per-step method ``_run_denoising_step``: sglang 0.5.23 traces carry only
``STAGE <id>`` ranges and no step range at all, but every loop iteration runs that method once (model-specific stages
override it under the same name), so its outermost frames, numbered in time order, are the steps.
"""

from __future__ import annotations

import dataclasses
import re
from array import array
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import numpy as np

KERNEL, MEMCPY, MEMSET = 0, 1, 2
DEVICE_KINDS = {"kernel": KERNEL, "Kernel": KERNEL, "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
                "gpu_memset": MEMSET, "Memset": MEMSET}
RUNTIME, DRIVER = 0, 1
CALL_KINDS = {"cuda_runtime": RUNTIME, "Runtime": RUNTIME, "cuda_driver": DRIVER, "Driver": DRIVER}
CPU_OP_CATEGORIES = {"cpu_op", "Operator"}

STEP_ANNOTATION = re.compile(r"^(?:denoising_step|denoise_step)_(\d+)$")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# Stage annotations are plain identifiers; op-level records such as "nccl:all_reduce" or "FSDP::..." are not stages.
STAGE_ANNOTATION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Python frame of a pipeline stage module, as torch.profiler names it: "<path>/stages/denoising.py(1123): forward".
STAGE_FRAME = re.compile(r"/stages/([a-z][a-z0-9_]*)\.py\(\d+\): ")
NON_STAGE_MODULES = frozenset({"base", "validators", "utils"})
# The denoise loop's per-step method, as a Python frame: "<path>/stages/denoising.py(1612): _run_denoising_step".
STEP_FRAME_SUFFIX = ": _run_denoising_step"


@dataclasses.dataclass(frozen=True)
class Events:
    """A columnar table of complete ('X') events of one kind; ``name`` indexes ``Trace.names``. Columns are typed
    arrays (``array.array``): read like lists, passed between processes and to numpy as plain memory."""

    name: array  # of int64
    ts: array  # of float64
    dur: array  # of float64
    thread: array  # int64; for cpu_ops: the (pid, tid) they ran on, which their nesting (self time) is read from
    kind: array  # int64; empty for cpu_ops
    correlation: array  # int64; empty for cpu_ops

    def __len__(self) -> int:
        return len(self.name)


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    intervals: tuple[tuple[float, float], ...]  # outermost CPU ranges, sorted, non-overlapping

    @property
    def cpu_us(self) -> float:
        return sum(end - start for start, end in self.intervals)


@dataclasses.dataclass(frozen=True)
class Step:
    number: int
    label: str
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class Trace:
    source: str
    json_bytes: int
    event_count: int
    rank: int | None
    world_size: int | None
    names: list[str]
    device: Events
    calls: Events
    annotations: Events
    cpu_ops: Events
    stages: tuple[Stage, ...]
    stage_source: str  # "annotations" | "python_frames" | "none"
    steps: tuple[Step, ...]
    step_source: str  # "step_annotations" | "profiler_steps" | "step_frames" | "none"
    # int64 arrays, like the tables' columns:
    device_call: array  # per device op: index into ``calls`` of its launch, -1 when the launch is not in the trace
    call_stage: array  # per call: index into ``stages``, -1 outside every stage
    call_step: array  # per call: index into ``steps``, -1 outside every step
    device_stages: array  # per device op: the stage of its launch, -1 when none
    device_steps: array  # per device op: the step of its launch, -1 when none

    def device_stage(self, i: int) -> int:
        return self.device_stages[i]

    def device_step(self, i: int) -> int:
        return self.device_steps[i]


def _new_events() -> Events:
    return Events(array("q"), array("d"), array("d"), array("q"), array("q"), array("q"))


def stage_name_for_module(module: str) -> str:
    """``text_encoding`` -> ``TextEncodingStage``: the engine names its stage classes after their modules."""
    return "".join(part.capitalize() for part in module.split("_")) + "Stage"


TABLES = ("device", "calls", "annotations", "cpu_ops", "frames", "step_frames")


@dataclasses.dataclass(frozen=True)
class EventTables:
    """The events an analysis keeps, split into tables by kind, with names and (pid, tid) threads interned.

    Ids are local to one ``TableBuilder``: the runs of pieces of one file decoded in several processes are joined
    by ``merge_tables``, which renumbers them. ``frames`` are stage-module Python frames named after their stage,
    ``step_frames`` the denoise loop's per-step frames."""

    event_count: int
    names: list[str]
    threads: list[tuple]
    device: Events
    calls: Events
    annotations: Events
    cpu_ops: Events
    frames: Events
    step_frames: Events


class TableBuilder:
    """Sorts decoded events into ``EventTables``, one batch after another (the pieces of one file, in file order),
    names and threads interned across batches: a batch's events can be dropped as soon as it is added."""

    def __init__(self) -> None:
        self._name_ids: dict[str, int] = {}
        self._thread_ids: dict[tuple, int] = {}
        self._tables = {field: _new_events() for field in TABLES}
        self._event_count = 0

    def add(self, events: Sequence) -> None:
        """One pass sorts the complete ('X') events into per-kind lists; each column is then one comprehension
        (per-event work kept out of Python function calls: this runs over every event of the trace)."""
        device_kinds, call_kinds, cpu_op_categories = DEVICE_KINDS, CALL_KINDS, CPU_OP_CATEGORIES
        ops, device, calls, annotations, frames, frame_names, step_frames = [], [], [], [], [], [], []
        for e in events:
            cat = e.cat
            if cat in cpu_op_categories:  # the most numerous events first
                if e.ph == "X":
                    ops.append(e)
            elif e.ph != "X":
                continue
            elif cat in device_kinds:
                device.append(e)
            elif cat in call_kinds:
                calls.append(e)
            elif cat == "user_annotation":
                annotations.append(e)
            elif cat == "python_function" and "/stages/" in e.name:
                match = STAGE_FRAME.search(e.name)
                if match and match.group(1) not in NON_STAGE_MODULES:
                    frames.append(e)
                    frame_names.append(stage_name_for_module(match.group(1)))
                if e.name.endswith(STEP_FRAME_SUFFIX):
                    step_frames.append(e)
        self._event_count += len(events)
        for field, rows, kinds, names in (("cpu_ops", ops, None, None), ("device", device, device_kinds, None),
                                          ("calls", calls, call_kinds, None), ("annotations", annotations, {}, None),
                                          ("frames", frames, {}, frame_names), ("step_frames", step_frames, {}, None)):
            self._extend(self._tables[field], rows, kinds, names)

    def _extend(self, table: Events, rows: list, kinds: dict[str, int] | None, names: list[str] | None) -> None:
        """Append ``rows``: cpu ops (``kinds`` None) keep no kind or link; device ops and calls keep both; ranges
        (``kinds`` empty) get kind 0 and no link."""
        name_ids, thread_ids = self._name_ids, self._thread_ids
        table.name.extend(array("q", [name_ids.setdefault(n, len(name_ids))
                                      for n in ([e.name for e in rows] if names is None else names)]))
        table.ts.extend(array("d", [e.ts for e in rows]))
        table.dur.extend(array("d", [e.dur for e in rows]))
        table.thread.extend(array("q", [thread_ids.setdefault((e.pid, e.tid), len(thread_ids)) for e in rows]))
        if kinds:
            table.kind.extend(array("q", [kinds[e.cat] for e in rows]))
            table.correlation.extend(array("q", [-1 if (a := e.args) is None or a.correlation is None
                                                 else a.correlation for e in rows]))
        elif kinds is not None:
            table.kind.extend(array("q", bytes(8 * len(rows))))
            table.correlation.extend(array("q", [-1]) * len(rows))

    def tables(self) -> EventTables:
        return EventTables(event_count=self._event_count, names=list(self._name_ids),
                           threads=list(self._thread_ids), **self._tables)


def merge_tables(parts: Sequence[EventTables]) -> EventTables:
    """Pieces of one file (in file order) as one ``EventTables``: ids renumbered, rows concatenated in order."""
    if len(parts) == 1:
        return parts[0]
    import numpy as np
    name_ids: dict[str, int] = {}
    thread_ids: dict[tuple, int] = {}
    merged = {field: _new_events() for field in TABLES}
    for part in parts:
        name_map = np.array([name_ids.setdefault(n, len(name_ids)) for n in part.names], dtype=np.int64)
        thread_map = np.array([thread_ids.setdefault(t, len(thread_ids)) for t in part.threads], dtype=np.int64)
        for field in TABLES:
            source, target = getattr(part, field), merged[field]
            target.name.frombytes(name_map[np.frombuffer(source.name, dtype=np.int64)].tobytes())
            target.thread.frombytes(thread_map[np.frombuffer(source.thread, dtype=np.int64)].tobytes())
            target.ts.extend(source.ts)
            target.dur.extend(source.dur)
            target.kind.extend(source.kind)
            target.correlation.extend(source.correlation)
    return EventTables(event_count=sum(p.event_count for p in parts), names=list(name_ids),
                       threads=list(thread_ids), **merged)


def build_trace(tables: EventTables, *, source: str, json_bytes: int, rank: int | None,
                world_size: int | None) -> Trace:
    """Link launches to their device ops and tag each launch with the stage and step it ran in."""
    import numpy as np
    names, device, calls, annotations = tables.names, tables.device, tables.calls, tables.annotations
    stages, stage_source, stage_ranges, per_thread = _stages(names, annotations, tables.frames)
    steps, step_source = _steps(names, annotations, tables.step_frames)
    call_stage = _assign(calls, stage_ranges, per_thread)
    call_step = _assign(calls, {None: _outermost([(s.start, s.end, i) for i, s in enumerate(steps)])}, per_thread=False)
    device_call = _launches(device, calls)
    launched = device_call >= 0

    def per_device(per_call: np.ndarray) -> array:
        return _int_array(np.where(launched, per_call[np.maximum(device_call, 0)] if per_call.size else -1, -1))

    return Trace(source=source, json_bytes=json_bytes, event_count=tables.event_count, rank=rank,
                 world_size=world_size, names=names, device=device, calls=calls, annotations=annotations,
                 cpu_ops=tables.cpu_ops, stages=stages, stage_source=stage_source, steps=steps,
                 step_source=step_source, device_call=_int_array(device_call), call_stage=_int_array(call_stage),
                 call_step=_int_array(call_step), device_stages=per_device(call_stage),
                 device_steps=per_device(call_step))


def _int_array(values: np.ndarray) -> array:
    import numpy as np
    out = array("q")
    out.frombytes(values.astype(np.int64, copy=False).tobytes())
    return out


def _launches(device: Events, calls: Events) -> np.ndarray:
    """Per device op, the index of the call with its correlation id (the last such call), -1 when none."""
    import numpy as np
    wanted = np.frombuffer(device.correlation, dtype=np.int64)
    ids = np.frombuffer(calls.correlation, dtype=np.int64)
    if not ids.size:
        return np.full(wanted.size, -1, dtype=np.int64)
    by_id = np.argsort(ids, kind="stable")  # equal ids keep call order: the last of a run is the last call
    sorted_ids = ids[by_id]
    last = np.searchsorted(sorted_ids, wanted, "right") - 1
    found = (last >= 0) & (wanted >= 0)
    found[found] = sorted_ids[last[found]] == wanted[found]
    return np.where(found, by_id[np.maximum(last, 0)], -1)


def _outermost(ranges: Iterable[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Drop ranges that start inside an earlier kept range (nested or overlapping): each instant gets one owner."""
    kept: list[tuple[float, float, int]] = []
    for start, end, ident in sorted(ranges, key=lambda r: (r[0], -r[1])):
        if kept and start < kept[-1][1]:
            continue
        kept.append((start, end, ident))
    return kept


def _stages(names: list[str], annotations: Events, frames: Events):
    """Stage ranges from annotations when the trace has them, else from stage-module Python frames."""
    candidates = [i for i, n in enumerate(annotations.name)
                  if STAGE_ANNOTATION.match(names[n]) and not STEP_ANNOTATION.match(names[n])]
    if candidates:
        table, source, per_thread = annotations, "annotations", False
    elif len(frames):
        table, source, per_thread, candidates = frames, "python_frames", True, list(range(len(frames)))
    else:
        return (), "none", {}, False
    order: dict[str, int] = {}
    for i in sorted(candidates, key=lambda i: table.ts[i]):
        order.setdefault(names[table.name[i]], len(order))
    grouped: dict[object, list[tuple[float, float, int]]] = {}
    for i in candidates:
        key = table.thread[i] if per_thread else None
        grouped.setdefault(key, []).append((table.ts[i], table.ts[i] + table.dur[i], order[names[table.name[i]]]))
    ranges = {key: _outermost(r) for key, r in grouped.items()}
    intervals: dict[int, list[tuple[float, float]]] = {}
    for kept in ranges.values():
        for start, end, ident in kept:
            intervals.setdefault(ident, []).append((start, end))
    stages = tuple(Stage(name, tuple(union_intervals(intervals.get(ident, []))))
                   for name, ident in sorted(order.items(), key=lambda kv: kv[1]))
    return stages, source, ranges, per_thread


def _steps(names: list[str], annotations: Events, step_frames: Events) -> tuple[tuple[Step, ...], str]:
    for pattern, source in ((STEP_ANNOTATION, "step_annotations"), (PROFILER_STEP, "profiler_steps")):
        found = []
        for i, n in enumerate(annotations.name):
            match = pattern.match(names[n])
            if match:
                start = annotations.ts[i]
                found.append(Step(int(match.group(1)), names[n], start, start + annotations.dur[i]))
        if found:
            return tuple(sorted(found, key=lambda s: (s.start, s.number))), source
    if len(step_frames):
        # An override that calls super() nests a second frame of the same name: keep the outermost per thread.
        grouped: dict[int, list[tuple[float, float, int]]] = {}
        for i, (ts, dur, thread) in enumerate(zip(step_frames.ts, step_frames.dur, step_frames.thread, strict=True)):
            grouped.setdefault(thread, []).append((ts, ts + dur, i))
        kept = sorted((r for ranges in grouped.values() for r in _outermost(ranges)), key=lambda r: r[0])
        return tuple(Step(n, f"denoising_step_{n}", start, end) for n, (start, end, _) in enumerate(kept)), \
            "step_frames"
    return (), "none"


def _assign(calls: Events, ranges: dict, per_thread: bool) -> np.ndarray:
    """For each call, the id of the kept range containing its start (on its own thread when ``per_thread``)."""
    import numpy as np
    ts = np.frombuffer(calls.ts, dtype=np.float64)
    threads = np.frombuffer(calls.thread, dtype=np.int64)
    out = np.full(len(calls), -1, dtype=np.int64)
    for key, kept in ranges.items():
        if not kept:
            continue
        starts, ends, ids = (np.asarray(column) for column in zip(*kept, strict=True))
        rows = np.flatnonzero(threads == key) if per_thread else np.arange(len(calls))
        at = ts[rows]
        j = np.searchsorted(starts, at, side="right") - 1  # the latest range starting at or before the call
        inside = (j >= 0) & (at < ends[np.maximum(j, 0)])
        out[rows[inside]] = ids[j[inside]]
    return out


def union_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping intervals, so overlapping time is counted once."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union_intervals(intervals))
