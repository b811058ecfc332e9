"""Read a torch.profiler Chrome trace (``.json`` or ``.json.gz``) once, decoding only the fields analyses use.

Decoding is typed (msgspec Structs), so the large ``args`` of CPU ops and Python frames are skipped rather than
materialised: a 130 MB trace decodes in a fraction of a second and a few hundred MB of memory. Every way a file can
fail to be a trace becomes an ``InputError`` (exit 2) with a hint, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import msgspec

from .. import inputs
from ..contract import InputError
from .model import Trace, build_trace

GZIP_MAGIC = b"\x1f\x8b"
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)")
# Microseconds. A duration is never negative and never longer than ~115 days; a timestamp is finite and bounded, so
# sums over millions of events stay finite (1.7e308 or -5 in a trace is damage, refused as not a trace).
Duration = Annotated[float, msgspec.Meta(ge=0, le=1e13)]
Timestamp = Annotated[float, msgspec.Meta(ge=-1e18, le=1e18)]
Id = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class _Args(msgspec.Struct, gc=False):
    correlation: Id | None = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Id | str = 0
    tid: Id | str = 0
    ts: Timestamp = 0.0
    dur: Duration = 0.0
    args: _Args | None = None


class _DistributedInfo(msgspec.Struct, gc=False):
    rank: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)] | None = None
    world_size: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] | None = None


class _TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[_Event]
    distributedInfo: _DistributedInfo | None = None


_DECODER = msgspec.json.Decoder(_TraceFile | list[_Event])


def read_trace_bytes(path: Path) -> bytes:
    """The decompressed JSON text of a trace file."""
    try:
        if path.is_dir():
            raise IsADirectoryError(path)
        if not path.exists():
            raise FileNotFoundError(path)
        raw = inputs.read_bytes(path, "input.trace_unreadable", gunzip=False)  # a FIFO is refused, never read
    except FileNotFoundError as exc:
        raise InputError("input.trace_not_found", f"trace file not found: {path}",
                         "pass the *.trace.json.gz the profiler wrote (its path is printed at the end of the "
                         "run)") from exc
    except IsADirectoryError as exc:
        raise InputError("input.trace_is_directory", f"{path} is a directory, not a trace file",
                         "pass the trace file itself, e.g. <dir>/*.trace.json.gz") from exc
    except OSError as exc:
        raise InputError("input.trace_unreadable", f"cannot read {path}: {exc}",
                         "check the path and permissions") from exc
    if raw[:2] == GZIP_MAGIC:
        raw = inputs.gunzip_bounded(raw, str(path), "input.trace_truncated", "the profiler may still have been "
                                    "writing it; re-copy the file or re-run the profile")
    if not raw.strip():
        raise InputError("input.trace_empty", f"{path} is empty",
                         "the profiler wrote nothing; re-run the profile and wait for 'Saved profiler traces'")
    return raw


def decode_events(raw: bytes, source: str) -> tuple[list[_Event], _DistributedInfo | None]:
    try:
        decoded = _DECODER.decode(raw)
    except RecursionError:  # a 100,000-deep object in a skipped field: refused like a deep array
        raise InputError("input.trace_corrupt", f"{source} nests deeper than a JSON reader can follow",
                         "pass the trace the profiler wrote; a trace nests a few levels deep") from None
    except msgspec.ValidationError as exc:
        raise InputError("input.not_a_trace", f"{source} is JSON but not a Chrome trace: {exc}",
                         "pass a torch.profiler trace (an object with a 'traceEvents' list)") from exc
    except msgspec.DecodeError as exc:
        truncated = "truncated" in str(exc).lower()
        raise InputError("input.trace_truncated" if truncated else "input.trace_corrupt",
                         f"{source} is not valid JSON: {exc}",
                         "the file is cut off or damaged; re-copy it or re-run the profile") from exc
    if isinstance(decoded, list):
        return decoded, None
    return decoded.traceEvents, decoded.distributedInfo


def load_trace(path: str | Path) -> Trace:
    """Parse one trace file into the compact ``Trace`` model."""
    path = Path(path)
    raw = read_trace_bytes(path)
    size = len(raw)
    events, dist = decode_events(raw, str(path))
    del raw
    if not events:
        raise InputError("input.trace_empty", f"{path} holds no trace events",
                         "the profiler recorded nothing; check that the profiled region actually ran")
    rank = dist.rank if dist is not None else None
    if rank is None:
        match = _RANK_IN_NAME.search(path.name)
        rank = int(match.group(1)) if match else None
    return build_trace(events, source=str(path), json_bytes=size, rank=rank,
                       world_size=dist.world_size if dist is not None else None)
