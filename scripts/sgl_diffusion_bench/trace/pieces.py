"""Decode one large trace in several processes at once: its JSON is cut at event boundaries into pieces that each
decode alone, each worker decodes and splits its piece into tables, and the parent joins the tables in file order.

Decoding is most of the cost of reading a trace, and one core does it at a few hundred MB/s. A cut is a ``}``,
``,``, ``{`` sequence (whitespace allowed) outside any string, between two objects of the event list: a piece that ends
inside a string or an unclosed object is not valid JSON, so a misplaced cut makes its piece fail to decode and the
caller decodes the whole file in one process instead (which also gives the real error of a damaged file).

Workers are forked, so the text is shared, not sent. A piece becomes a document of its own by writing the brackets
it lacks just outside it, in the worker's own copy-on-write view of the text (a private mapping of an uncompressed
file: no byte is copied or even read by the parent); decompressed text is immutable ``bytes``, so there each worker
copies its piece once.
"""

from __future__ import annotations

import concurrent.futures
import mmap
import multiprocessing
import os
import re
import sys
from pathlib import Path
from typing import Callable

import msgspec

from .. import fileio
from .events import DECODER, DistributedInfo
from .model import EventTables, split_events

MIN_BYTES = 16 << 20  # below this, starting workers costs more than it saves
MAX_PROCESSES = 4
GZIP_MAGIC = b"\x1f\x8b"
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_HEAD = b'"traceEvents"'
_FIRST_TOKEN = re.compile(rb"\s*(\S)")
_shared: bytes | mmap.mmap = b""  # the text, set in the parent just before the workers are forked


def usable_processes(limit: int | None = None) -> int:
    """Worker processes this host offers a trace (its cores, at most ``MAX_PROCESSES``), 1 where fork is missing."""
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, MAX_PROCESSES, cores if limit is None else limit))


def map_plain_file(path: Path) -> mmap.mmap | None:
    """A private, writable mapping of a large uncompressed regular file (writes stay in the writing process), or None
    for anything else: small, gzip, unreadable or not a regular file (the caller's reader then gives its answer)."""
    try:
        fd, st = fileio.open_regular_fd(path)
    except (OSError, fileio.NotRegularFileError):
        return None
    try:
        if st.st_size < MIN_BYTES or os.pread(fd, 2, 0) == GZIP_MAGIC:
            return None
        return mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def cut_points(text, pieces: int) -> list[tuple[int, int]] | None:
    """``(end of one event, start of the next)`` byte offsets near each 1/``pieces`` of the text, all after the event
    list's key, or None when there is no such key or no boundary past the first 1/``pieces``."""
    head = text.find(_HEAD) if _is_object(text) else 0
    if head < 0:
        return None
    cuts: list[tuple[int, int]] = []
    for k in range(1, pieces):
        match = _BOUNDARY.search(text, max(len(text) * k // pieces, head, cuts[-1][1] if cuts else 0))
        if match is None:
            break
        cuts.append((match.start() + 1, match.end() - 1))
    return cuts or None


def _is_object(text) -> bool:
    """Whether the document is ``{"traceEvents": [...], ...}`` rather than a bare list of events."""
    first = _FIRST_TOKEN.match(text)
    return first is not None and first.group(1) == b"{"


def _decode_piece(start: int, end: int, opening: bytes, closing: bytes):
    """Worker: ``_shared[start:end]`` between ``opening`` and ``closing`` (what makes it a document of its own),
    decoded and split into tables, with its ``distributedInfo``; None when it does not decode."""
    if isinstance(_shared, mmap.mmap):  # this process's private view: write the brackets around the piece
        _shared[start - len(opening):start] = opening
        _shared[end:end + len(closing)] = closing
        piece = memoryview(_shared)[start - len(opening):end + len(closing)]
    else:
        piece = memoryview(bytearray(len(opening) + end - start + len(closing)))  # one copy, no slice in between
        piece[:len(opening)] = opening
        piece[len(opening):len(opening) + end - start] = memoryview(_shared)[start:end]
        piece[len(piece) - len(closing):] = closing
    try:
        decoded = DECODER.decode(piece)
    except (msgspec.DecodeError, RecursionError):
        return None
    finally:
        piece.release()
    if isinstance(decoded, list):
        return split_events(decoded), None
    return split_events(decoded.traceEvents), decoded.distributedInfo


def decode_in_pieces(text, processes: int, meanwhile: Callable[[], object] | None = None) \
        -> tuple[list[EventTables], DistributedInfo | None] | None:
    """The tables of ``text`` (one per piece, in file order) and its ``distributedInfo``, from ``processes``
    workers, running ``meanwhile`` here once they are started; None when the text is too small to be worth it or
    cannot be cut cleanly (then decode it whole)."""
    global _shared
    if processes < 2 or len(text) < MIN_BYTES:
        return None
    cuts = cut_points(text, processes)
    if cuts is None:
        return None
    starts = [0] + [start for _, start in cuts]
    ends = [end for end, _ in cuts] + [len(text)]
    events_only, close = (b'{"traceEvents":[', b"]}") if _is_object(text) else (b"[", b"]")
    openings = [b""] + [events_only] * len(cuts)  # the first piece has the document's head
    closings = [close] * len(cuts) + [b""]  # the last piece has the document's tail
    _shared = text
    try:
        with concurrent.futures.ProcessPoolExecutor(len(starts), mp_context=multiprocessing.get_context("fork")) \
                as pool:
            pending = pool.map(_decode_piece, starts, ends, openings, closings)  # every worker forked by now
            if meanwhile is not None:
                meanwhile()
            results = list(pending)
    except concurrent.futures.BrokenExecutor:  # a worker killed (out of memory, a signal): one process
        return None
    finally:
        _shared = b""
    if any(r is None for r in results):
        return None
    info = next((i for _, i in results if i is not None), None)
    return [tables for tables, _ in results], info
