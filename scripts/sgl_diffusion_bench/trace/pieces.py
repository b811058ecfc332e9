"""Decode a large trace piece by piece, in several processes at once: its JSON is cut at event boundaries into
pieces of a few MB that each decode alone; each piece is decoded and split into tables while it is fresh in the
cache, its events are dropped before the next, and the tables are joined in file order.

Why pieces: decoding a whole 140 MB trace builds ~1 GB of short-lived objects in fresh memory, and touching fresh
memory is a large part of the cost on a virtual machine; a piece's objects reuse the memory the previous piece's
freed, which makes one process about a third faster and keeps its peak memory small. Why processes: the pieces are
independent, so contiguous runs of them go to forked workers (the text is shared, not sent) and each core decodes
its own run. A gzip file is decompressed a block at a time by the parent, which sends each piece to a worker as soon
as it is whole: decompressing overlaps decoding, and the decompressed text is never held whole.

A cut is a ``}``, ``,``, ``{`` sequence (whitespace allowed) outside any string, between two objects of the event
list: a piece that ends inside a string or an unclosed object is not valid JSON, so a misplaced cut makes its piece
fail to decode and the caller decodes the whole file in one go instead (which also gives the real error of a damaged
file).
"""

from __future__ import annotations

import concurrent.futures
import mmap
import multiprocessing
import os
import re
import signal
import sys
import zlib
from pathlib import Path
from typing import Callable

import msgspec

from .. import fileio, inputs
from .events import DECODER, DistributedInfo
from .model import EventTables, TableBuilder, merge_tables

MIN_BYTES = 8 << 20  # below this, the whole file is decoded in one go
PIECE_BYTES = 4 << 20
MAX_PROCESSES = 4
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_HEAD = b'"traceEvents"'
_FIRST_TOKEN = re.compile(rb"\s*(\S)")
_WORKER_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_shared: bytes | mmap.mmap = b""  # the text, set in the parent just before the workers are forked


def usable_processes(limit: int | None = None) -> int:
    """Worker processes this host offers a trace (its cores, at most ``MAX_PROCESSES``), 1 where fork is missing."""
    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, MAX_PROCESSES, cores if limit is None else limit))


def forked_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """``workers`` processes forked now, each ignoring SIGINT (Ctrl-C reaches this process, which stops them) and
    ending on SIGTERM (not raising this process's KeyboardInterrupt in a copy of it). Both signals are blocked while
    they fork, so none lands in a child before it has set its own."""
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                                  initializer=_worker_signals)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
    try:
        pool.submit(int)  # the fork start method starts every worker at the first task
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pool


def _worker_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WORKER_SIGNALS)


def map_plain_file(path: Path) -> mmap.mmap | None:
    """A read-only mapping of a large uncompressed regular file (its pages are read by whichever process decodes
    them, never copied into this one), or None for anything else: small, gzip, unreadable or not a regular file (the
    caller's reader then gives its answer)."""
    try:
        fd, st = fileio.open_regular_fd(path)
    except (OSError, fileio.NotRegularFileError):
        return None
    try:
        if st.st_size < MIN_BYTES or os.pread(fd, 2, 0) == inputs.GZIP_MAGIC:
            return None
        return mmap.mmap(fd, 0, prot=mmap.PROT_READ)
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


def _decode_run(run: list[tuple[int, int, bytes, bytes]]):
    """Pieces ``_shared[start:end]``, each between its ``opening`` and ``closing`` (what makes it a document of its
    own), decoded and added to one table builder one after another through one reused buffer; the tables, and the
    document's ``distributedInfo`` where a piece holds it. None when a piece does not decode."""
    text = memoryview(_shared)
    buffer = bytearray()
    builder, info = TableBuilder(), None
    try:
        for start, end, opening, closing in run:
            size = len(opening) + end - start + len(closing)
            if size > len(buffer):
                buffer = bytearray(size + PIECE_BYTES // 4)
            buffer[:len(opening)] = opening
            buffer[len(opening):len(opening) + end - start] = text[start:end]
            buffer[size - len(closing):size] = closing
            with memoryview(buffer)[:size] as piece:
                decoded, piece_info = _add_piece(builder, piece)
            if not decoded:
                return None
            info = piece_info or info
    finally:
        text.release()
    return builder.tables(), info


def _add_piece(builder: TableBuilder, piece) -> tuple[bool, DistributedInfo | None]:
    """Decode one piece (a document of its own) into ``builder``: whether it decoded, and its ``distributedInfo``."""
    try:
        decoded = DECODER.decode(piece)
    except (msgspec.DecodeError, RecursionError):
        return False, None
    if isinstance(decoded, list):
        builder.add(decoded)
        return True, None
    builder.add(decoded.traceEvents)
    return True, decoded.distributedInfo


def decode_in_pieces(text, processes: int, meanwhile: Callable[[], object] | None = None) \
        -> tuple[EventTables, DistributedInfo | None] | None:
    """The tables of ``text`` and its ``distributedInfo``, decoded piece by piece by ``processes`` processes (this
    one alone when 1), running ``meanwhile`` here while workers decode; None when the text is too small to be worth
    it or cannot be cut cleanly (then decode it whole)."""
    global _shared
    if len(text) < MIN_BYTES:
        return None
    cuts = cut_points(text, max(2, len(text) // PIECE_BYTES))
    if cuts is None:
        return None
    events_only, close = (b'{"traceEvents":[', b"]}") if _is_object(text) else (b"[", b"]")
    starts, ends = [0] + [start for _, start in cuts], [end for end, _ in cuts] + [len(text)]
    pieces = [(start, end, events_only if start else b"", close if end < len(text) else b"")
              for start, end in zip(starts, ends, strict=True)]
    runs = [pieces[len(pieces) * k // processes:len(pieces) * (k + 1) // processes]
            for k in range(min(processes, len(pieces)))]
    _shared = text
    try:
        if len(runs) == 1:
            results = [_decode_run(runs[0])]
        else:
            with forked_pool(len(runs)) as pool:
                pending = pool.map(_decode_run, runs)
                if meanwhile is not None:
                    meanwhile()
                results = list(pending)
    except concurrent.futures.BrokenExecutor:  # a worker killed (out of memory, a signal): decode in one go
        return None
    finally:
        _shared = b""
    return _joined(results)


def _joined(results: list) -> tuple[EventTables, DistributedInfo | None] | None:
    """The pieces' (tables, distributedInfo) in file order as one, or None when any piece did not decode."""
    if any(r is None for r in results):
        return None
    return merge_tables([tables for tables, _ in results]), next((i for _, i in results if i is not None), None)


def _inflate(raw: bytes, limit: int):
    """The decompressed text of gzip data (every member), in blocks of at most ``PIECE_BYTES``; ValueError past
    ``limit`` bytes, EOFError or zlib.error when the data is cut off or damaged."""
    total, rest = 0, raw
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        data = rest
        while not inflater.eof:
            block = inflater.decompress(data, PIECE_BYTES)
            data = inflater.unconsumed_tail
            total += len(block)
            if total > limit:
                raise ValueError("past the gzip bound")
            if not block and not data:
                raise EOFError("compressed data ended before the end-of-stream marker")
            if block:
                yield block
        rest = inflater.unused_data


def _decode_bytes(piece: bytes):
    """Worker: one piece sent whole, decoded and split; None when it does not decode."""
    builder = TableBuilder()
    decoded, info = _add_piece(builder, piece)
    return (builder.tables(), info) if decoded else None


def decode_gzip_in_pieces(raw: bytes, processes: int, meanwhile: Callable[[], object] | None = None) \
        -> tuple[EventTables, DistributedInfo | None, int] | None:
    """The tables, ``distributedInfo`` and decompressed size of gzip data, decompressed here a block at a time
    while ``processes`` workers decode the pieces already whole (this process alone when 1; ``meanwhile`` runs
    once every piece is handed out). None when the data is small, not a cuttable trace, or is damaged, cut off or
    past the gzip bound: then it is read whole, which gives the real answer."""
    if len(raw) * 4 < MIN_BYTES:  # traces compress 10-30 times: this one decompresses to a few MB at most
        return None
    pool = forked_pool(processes) if processes > 1 else None
    try:
        results, size = _stream_pieces(raw, pool)
        if results is None:
            return None
        if pool is not None and meanwhile is not None:
            meanwhile()
        done = [r.result() if pool is not None else r for r in results]
    except concurrent.futures.BrokenExecutor:
        return None
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    joined = _joined(done)
    return None if joined is None else (*joined, size)


def _stream_pieces(raw: bytes, pool):
    """Decompress ``raw``, cutting the text into pieces of about ``PIECE_BYTES`` as it grows; each piece goes to
    ``pool`` (a future back) or is decoded here. The results in file order and the text's size, or (None, 0)."""
    pending, results, size, head_done, wrap, searched = bytearray(), [], 0, False, None, 0

    def hand_out(piece: bytes) -> None:
        results.append(pool.submit(_decode_bytes, piece) if pool is not None else _decode_bytes(piece))

    try:
        for block in _inflate(raw, inputs.gunzip_limit(len(raw))):
            size += len(block)
            pending += block
            if wrap is None:
                wrap = (b'{"traceEvents":[', b"]}") if _is_object(pending) else (b"[", b"]")
            head = 0
            if not head_done:
                head = pending.find(_HEAD) if wrap[1] == b"]}" else 0
                if head < 0:
                    continue
            while len(pending) - head > PIECE_BYTES:
                # (a long event: the next search goes on from about where this one ended, not from the start)
                match = _BOUNDARY.search(pending, max(head, PIECE_BYTES * 3 // 4, searched - 1024))
                if match is None:
                    searched = len(pending)
                    break
                opening = wrap[0] if head_done else b""
                hand_out(b"".join((opening, pending[:match.start() + 1], wrap[1])))
                del pending[:match.end() - 1]
                head, head_done, searched = 0, True, 0
    except (ValueError, EOFError, zlib.error):
        return None, 0
    if not head_done:
        return None, 0  # no cut was made: small once decompressed, read whole
    hand_out(wrap[0] + bytes(pending))
    return results, size
