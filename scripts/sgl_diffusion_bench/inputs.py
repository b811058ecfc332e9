"""Reading a user's input file without trusting it: only regular files (a named pipe is refused, never blocked on),
bounded size, strict UTF-8, JSON without NaN/Infinity, bounded nesting and bounded integers. Every refusal is an
InputError (exit 2), never a traceback, a hang or an exit 70.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from pathlib import Path
from typing import Any

from . import contract, fileio

MAX_INPUT_BYTES = 4 << 30  # a 340 MB trace is normal; a file larger than this is not an input of ours
MAX_GUNZIP_RATIO, MAX_GUNZIP_FLOOR = 200, 64 << 20
GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip member
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 30  # ns timestamps and byte counts fit; a 4,300-digit integer is an attack, not a figure
# The largest duration (ms) or memory figure (MiB) a measurement can be: 1e12 ms is 31 years, 1e12 MiB an exbibyte.
# Bounding figures where they are read keeps every sum, mean and difference over them finite.
MAX_FIGURE = 1e12
OUT_OF_RANGE = "input.out_of_range"


def open_regular(path: str | Path, code: str) -> int:
    """A read-only fd on ``path`` once it is known to be a regular file (fileio.open_regular_fd: opening never
    blocks, nothing is read before the check), of bounded size; every refusal is an InputError with ``code``."""
    try:
        fd, st = fileio.open_regular_fd(path)
    except FileNotFoundError:
        raise contract.InputError(code, f"{path} does not exist", "check the path") from None
    except fileio.NotRegularFileError:
        raise contract.InputError(code, f"{path} is not a regular file (a directory, pipe, socket or device)",
                                  "pass a regular file") from None
    except OSError as exc:
        raise contract.InputError(code, f"{path} cannot be read: {exc.strerror}", "pass a readable file") from None
    if st.st_size > MAX_INPUT_BYTES:
        os.close(fd)
        raise contract.InputError(code, f"{path} is {st.st_size} bytes (max {MAX_INPUT_BYTES})", "pass a smaller file")
    return fd


def read_bytes(path: str | Path, code: str, *, gunzip: bool | None = None, max_bytes: int | None = None) -> bytes:
    """The file's bytes (decompressed when it is gzip: by ``.gz`` suffix, or ``gunzip=True``); ``max_bytes`` is a
    tighter bound than MAX_INPUT_BYTES for a kind of input that is never large (a spec)."""
    fd = open_regular(path, code)
    size = os.fstat(fd).st_size
    if max_bytes is not None and size > max_bytes:
        os.close(fd)
        raise contract.InputError(code, f"{path} is {size} bytes; this kind of input is at most {max_bytes}",
                                  "pass the file itself, trimmed to what it needs")
    limit = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(limit + 1)  # a /proc file says 0 bytes and may give more: read no further than the bound
    except OSError as exc:  # /proc/self/mem and the like: a regular file that refuses to be read
        raise contract.InputError(code, f"{path} cannot be read: {exc.strerror or exc}",
                                  "pass an ordinary file") from None
    if len(data) > limit:
        raise contract.InputError(code, f"{path} gives more than {limit} bytes", "pass a smaller file")
    if gunzip or (gunzip is None and str(path).endswith(".gz")):
        data = gunzip_bounded(data, str(path), code)
    return data


def gunzip_limit(compressed_bytes: int) -> int:
    """The most bytes gzip data of this size may decompress to before it is refused as a bomb: MAX_GUNZIP_RATIO
    times its size (at least MAX_GUNZIP_FLOOR), never past MAX_INPUT_BYTES. Real traces compress 10-30 times, a bomb
    of zeros a thousand."""
    return min(MAX_INPUT_BYTES, max(MAX_GUNZIP_FLOOR, MAX_GUNZIP_RATIO * compressed_bytes))


def gunzip_bounded(data: bytes, source: str, code: str, hint: str = "pass an intact .gz file") -> bytes:
    """gzip data decompressed, refused past ``gunzip_limit``."""
    limit = gunzip_limit(len(data))
    pieces: list[bytes] = []
    total, rest = 0, data
    try:
        while rest:  # one gzip member per turn (a file may hold several, as gzip.decompress reads them)
            inflater = zlib.decompressobj(wbits=31)
            budget = limit + 1 - total
            piece = inflater.decompress(rest, budget)  # one allocation per member: a 6 GB trace is not copied
            if len(piece) >= budget:
                raise contract.InputError(code, f"{source} decompresses past {limit} bytes ({len(data)} "
                                          "compressed): a gzip bomb, not a file the tools wrote",
                                          "pass the file the profiler or the tool wrote")
            if not inflater.eof:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            pieces.append(piece)
            total += len(piece)
            rest = inflater.unused_data
    except (EOFError, zlib.error) as exc:
        raise contract.InputError(code, f"{source}: gzip stream is truncated or corrupt ({exc})", hint) from None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def decode_text(data: bytes, source: str, code: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise contract.InputError(code, f"{source} is not UTF-8 text (byte {exc.start})", "pass a UTF-8 file") from None


def read_text(path: str | Path, code: str) -> str:
    return decode_text(read_bytes(path, code, gunzip=False), str(path), code)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not valid JSON")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text} (overflows a float) is not valid JSON")
    return value


def parse_json(text: str, source: str, code: str) -> Any:
    """Strict JSON: no NaN/Infinity (not even as an overflowing 1e999), bounded integers and nesting."""
    # Text with fewer brackets than the limit cannot nest past it: the character scan is skipped.
    depth = max_depth(text) if text.count("[") + text.count("{") > MAX_JSON_DEPTH else 0
    if depth > MAX_JSON_DEPTH:
        raise contract.InputError(code, f"{source} nests {depth} levels deep (max {MAX_JSON_DEPTH})",
                                  "pass the document the tool wrote")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise contract.InputError(code, f"{source} is not valid JSON: {str(exc)[:200]}",
                                  "pass the document the tool wrote") from None


def max_depth(text: str) -> int:
    """The deepest bracket nesting (arrays and objects alike) outside strings, without recursion (so a 10^6-deep
    input cannot crash it)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def load_json(path: str | Path, code: str) -> Any:
    """A JSON (or .json.gz) input file, refused as InputError on any of the hazards in the module docstring."""
    data = read_bytes(path, code)
    return parse_json(decode_text(data, str(path), code), str(path), code)


def load_object_or_none(path: str | Path) -> dict[str, Any] | None:
    """A JSON object the tools keep in their own folders (a sweep's state, a shard's result): None when it is
    missing, unreadable, hostile (any hazard above) or not an object, so the caller treats it as absent."""
    try:
        document = load_json(path, "input.unreadable")
    except contract.InputError:
        return None
    return document if isinstance(document, dict) else None


_YAML_INT = re.compile(r"[-+]?(?:0x[0-9a-fA-F_]+|0o?[0-7_]+|0b[01_]+|[0-9][0-9_]*)")  # YAML 1.1 integer forms
MAX_YAML_BYTES = 1 << 20  # a spec is a page of settings: a megabyte of it is a generated file or an attack


def load_yaml(path: str | Path, code: str, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """A user's YAML (or JSON) document under the same rules as load_json: a regular file of bounded size, strict
    UTF-8, bounded nesting, no anchors or aliases (a billion-laughs file expands from a few lines), no duplicate keys
    (YAML would keep the last one silently), bounded integers and finite numbers (``.inf``/``.nan`` refused)."""
    import yaml

    text = decode_text(read_bytes(path, code, gunzip=False, max_bytes=max_bytes), str(path), code)
    try:
        _check_yaml_events(yaml.parse(text, Loader=yaml.SafeLoader), str(path), code)
        document = yaml.load(text, Loader=_strict_loader())
    except yaml.YAMLError as exc:
        raise contract.InputError(code, f"{path} is not valid YAML: {str(exc)[:300]}",
                                  "fix the file (a YAML mapping, no anchors, each key once)") from None
    _check_numbers(document, str(path), code)
    return document


def _check_yaml_events(events: Any, source: str, code: str) -> None:
    """Nesting, aliases and long integers from the event stream (iterative: a 10^5-deep file cannot recurse)."""
    import yaml

    depth = 0
    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise contract.InputError(code, f"{source} nests deeper than {MAX_JSON_DEPTH} levels",
                                          "flatten the document")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise contract.InputError(code, f"{source} uses YAML anchors or aliases (line "
                                      f"{event.start_mark.line + 1})", "write each value out where it is used")
        if isinstance(event, yaml.ScalarEvent) and event.style is None and len(event.value) > MAX_INT_DIGITS and \
                _YAML_INT.fullmatch(event.value):
            raise contract.InputError(code, f"{source}: a number of more than {MAX_INT_DIGITS} digits (line "
                                      f"{event.start_mark.line + 1})", "quote it if it is text")


def _strict_loader() -> Any:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _check_numbers(document: Any, source: str, code: str) -> None:
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise contract.InputError(code, f"{source} holds a non-finite number ({node})",
                                      "give a finite number (.inf and .nan are not values here)")
