"""Read a torch.profiler Chrome trace (``.json`` or ``.json.gz``) once, decoding only the fields analyses use.

Decoding is typed (``events``), and a large file is decoded by several processes at once (``pieces``). Every way a
file can fail to be a trace becomes an ``InputError`` (exit 2) with a hint, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import msgspec

from .. import inputs
from ..contract import InputError
from . import pieces
from .events import DECODER, DistributedInfo, Event
from .model import TableBuilder, Trace, build_trace

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)")


def read_trace_file(path: Path) -> bytes:
    """A trace file's bytes as they are on disk (gzip or not)."""
    try:
        if path.is_dir():
            raise IsADirectoryError(path)
        if not path.exists():
            raise FileNotFoundError(path)
        return inputs.read_bytes(path, "input.trace_unreadable", gunzip=False)  # a FIFO is refused, never read
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


def trace_text(raw: bytes, path: Path) -> bytes:
    """The JSON text of a trace file's bytes: decompressed when gzip (bounded), refused when empty."""
    if raw[:2] == inputs.GZIP_MAGIC:
        raw = inputs.gunzip_bounded(raw, str(path), "input.trace_truncated", "the profiler may still have been "
                                    "writing it; re-copy the file or re-run the profile")
    if not raw.strip():
        raise InputError("input.trace_empty", f"{path} is empty",
                         "the profiler wrote nothing; re-run the profile and wait for 'Saved profiler traces'")
    return raw


def read_trace_bytes(path: Path) -> bytes:
    """The decompressed JSON text of a trace file."""
    return trace_text(read_trace_file(path), path)


def decode_events(raw: bytes, source: str) -> tuple[list[Event], DistributedInfo | None]:
    try:
        decoded = DECODER.decode(raw)
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


def _tables(path: Path, processes: int, meanwhile: Callable[[], object] | None):
    """The file's event tables, ``distributedInfo`` and JSON size: in pieces where the file is large (mapped when
    plain, decompressed as it is decoded when gzip), else decoded whole (which also gives every error its code)."""
    text = pieces.map_plain_file(path)
    if text is None:
        raw = read_trace_file(path)
        streamed = pieces.decode_gzip_in_pieces(raw, processes, meanwhile) if raw[:2] == inputs.GZIP_MAGIC else None
        if streamed is not None:
            return streamed
        text = trace_text(raw, path)
        del raw
    in_pieces = pieces.decode_in_pieces(text, processes, meanwhile)
    if in_pieces is not None:
        return (*in_pieces, len(text))
    events, dist = decode_events(text, str(path))
    size = len(text)
    del text
    builder = TableBuilder()
    builder.add(events)
    return builder.tables(), dist, size


def load_trace(path: str | Path, processes: int | None = None, meanwhile: Callable[[], object] | None = None) -> Trace:
    """Parse one trace file into the compact ``Trace`` model. A large file is decoded piece by piece by up to
    ``processes`` processes (default: the host's cores, see ``pieces``), and this process runs ``meanwhile`` (the
    caller's own loading, e.g. imports) while workers decode."""
    path = Path(path)
    tables, dist, size = _tables(path, pieces.usable_processes(processes), meanwhile)
    if not tables.event_count:
        raise InputError("input.trace_empty", f"{path} holds no trace events",
                         "the profiler recorded nothing; check that the profiled region actually ran")
    rank = dist.rank if dist is not None else None
    if rank is None:
        match = _RANK_IN_NAME.search(path.name)
        rank = int(match.group(1)) if match else None
    return build_trace(tables, source=str(path), json_bytes=size, rank=rank,
                       world_size=dist.world_size if dist is not None else None)
