"""Starting the engines of a warm campaign side by side: whether the next engine may load while the first one warms
up, and what the report says about it.

A warm campaign with two engine configurations (eager vs BCG) used to start them one after the other: load, warm-up,
load, warm-up. When both fit at once, the second is *launched* (its process spawned, its log read by a thread) as soon
as the first has loaded and its footprint is measured, and *finished* (READY awaited, warm-up requests served) before
the first measured request, so that no measured request runs beside an engine that is still loading. Each engine's
load and warm-up stay measured, from its own log: the overlap shows in the timestamps (``started_at`` is the launch,
``ready_at``, ``finished_at``), not in derived figures.

Where the model's weights are on local disk, the decision can be taken before anything loads: when every engine
fits at once by the weights' size (``MARGIN_AT_LAUNCH`` over them), all engines are launched together, so the second
engine's load and start-up warm-up (the first boot's kernel compile) run beside the first's instead of after its
load. Otherwise it is taken once, when the first engine is READY, from that engine's measured footprint. Either way
it is recorded with its reason and ``when``. ``auto`` overlaps on a GPU lease only (at launch when the weights tell,
else after the first load): on CPU the engines share the host's cores, so an overlapped load slows the warm-up
beside it; ``early`` launches together wherever the weights fit (else as ``on``); ``on`` overlaps after the first
load wherever memory allows (the CPU tests use both); ``off`` never does.
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

MODES = ("auto", "early", "on", "off")
# the first engine's footprint is taken after its load, before warm-up and requests grow it: a second engine must fit
# this many times over (warm mode's residency margin applies to footprints taken after warm-up)
MARGIN_AFTER_LOAD = 2.0
# before any engine has loaded, only the weights on disk are known: every engine must fit them this many times over
# (a FLUX.1-dev-shaped engine on the H200 held 1.07 x its 23.4 GiB of weights after load)
MARGIN_AT_LAUNCH = 1.5
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
GIB = 1024 ** 3


def model_path_of(argv: Sequence[str]) -> str | None:
    """The ``--model-path`` an engine command loads (``--model-path=X`` or ``--model-path X``)."""
    for n, token in enumerate(argv):
        if token.startswith("--model-path="):
            return token.split("=", 1)[1]
        if token == "--model-path" and n + 1 < len(argv):
            return argv[n + 1]
    return None


def weights_on_disk(model_path: str | None) -> int | None:
    """Bytes of weight files below a local model folder (links followed); None for a hub id or an empty folder."""
    if not model_path:
        return None
    root = Path(model_path)
    if not root.is_dir():
        return None
    total = sum(f.stat().st_size for f in root.rglob("*") if f.suffix in WEIGHT_SUFFIXES and f.is_file())
    return total or None


def decide_at_launch(mode: str, *, engines: int, schedule: str, on_gpu: bool, weights_bytes: int | None,
                     available_bytes: int | None) -> dict[str, Any] | None:
    """Launch every engine together? The record when yes; None when the decision waits for the first engine's load
    (not asked for, one engine, unknown weights or memory, or not enough room by the weights)."""
    if engines < 2 or schedule == "alternating_blocks" or not (mode == "early" or (mode == "auto" and on_gpu)):
        return None
    if weights_bytes is None or available_bytes is None:
        return None
    need = int(weights_bytes * engines * MARGIN_AT_LAUNCH)
    if available_bytes < need:
        return None
    return {"mode": mode, "overlapped": True, "when": "at_launch", "weights_bytes": weights_bytes,
            "reason": f"all {engines} engines launched together: need {gib(need)} ({MARGIN_AT_LAUNCH:g} x "
                      f"{gib(weights_bytes)} of weights on disk per engine), free {gib(available_bytes)}",
            "first_engine_bytes": None, "available_bytes": available_bytes, "needed_bytes": need,
            "memory_kind": "device" if on_gpu else "process_rss", "margin": MARGIN_AT_LAUNCH}


def decide(mode: str, *, engines: int, schedule: str, on_gpu: bool, first_bytes: int | None,
           available_bytes: int | None) -> dict[str, Any]:
    """Whether the other engine(s) may load beside the first, and why; ``first_bytes`` is the first engine's footprint
    after its load (RSS on CPU, growth of used device memory on a GPU), ``available_bytes`` what is free now."""
    need = int(first_bytes * (engines - 1) * MARGIN_AFTER_LOAD) if first_bytes and engines > 1 else None
    doc: dict[str, Any] = {"mode": mode, "overlapped": False, "when": "after_first_load", "reason": None,
                           "first_engine_bytes": first_bytes,
                           "available_bytes": available_bytes, "needed_bytes": need,
                           "memory_kind": "device" if on_gpu else "process_rss", "margin": MARGIN_AFTER_LOAD}
    if engines < 2:
        doc["reason"] = "one engine configuration: nothing to overlap"
    elif mode == "off":
        doc["reason"] = "--engine-overlap off: engines start one after the other"
    elif schedule == "alternating_blocks":
        doc["reason"] = "--warm-schedule alternating_blocks: one engine resident at a time"
    elif mode == "auto" and not on_gpu:
        doc["reason"] = ("CPU: engines loading side by side would share the host's cores; --engine-overlap on "
                         "overlaps here too")
    elif need is None or available_bytes is None:
        doc["reason"] = "memory could not be measured: engines start one after the other to be safe"
    elif available_bytes < need:
        doc["reason"] = (f"not enough free memory for {engines} engines at once: need {gib(need)} "
                         f"({MARGIN_AFTER_LOAD:g} x the first engine's {gib(first_bytes)} after load), free "
                         f"{gib(available_bytes)}")
    else:
        doc.update(overlapped=True, reason=f"the other engine(s) fit beside the first: need {gib(need)} "
                                           f"({MARGIN_AFTER_LOAD:g} x {gib(first_bytes)} after load), free "
                                           f"{gib(available_bytes)}")
    return doc


def not_decided(mode: str, engines: int) -> dict[str, Any]:
    """The record before (or without) a decision: one configuration, or a first engine that never loaded."""
    reason = ("one engine configuration: nothing to overlap" if engines < 2 else
              "not decided: the first engine did not load")
    return {"mode": mode, "overlapped": False, "reason": reason, "first_engine_bytes": None, "available_bytes": None,
            "needed_bytes": None, "memory_kind": None, "margin": MARGIN_AFTER_LOAD}


def gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.2f} GiB"


def utc_of(monotonic: float) -> str:
    """A ``time.monotonic()`` instant as UTC with milliseconds (engine spans cross within seconds)."""
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=time.monotonic() - monotonic)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def overlapping(spans: Mapping[str, tuple[float, float | None]]) -> dict[str, list[str]]:
    """Per engine, the other engines whose start span (launch to end of warm-up) crosses its own; an open span
    (still loading) runs to now. Spans that only touch (one starts as the other ends) do not overlap."""
    now = time.monotonic()
    closed = {k: (a, b if b is not None else now) for k, (a, b) in spans.items()}
    return {k: [o for o, (c, d) in closed.items() if o != k and a < d and c < b] for k, (a, b) in closed.items()}


def summary_line(engines: Mapping[str, Any]) -> str | None:
    """One Markdown line: which engines started side by side, or why they did not (None without a decision)."""
    overlap = engines.get("overlap")
    if not overlap or (engines.get("grouping") or {}).get("engine_configurations", 0) < 2:
        return None
    starts: Sequence[Mapping[str, Any]] = engines.get("starts") or []
    pairs = _pairs(starts)
    if pairs:
        loads = "; ".join(f"{s['id']} load {s['load_s']:.1f} s + warm-up {s['warmup_s']:.1f} s"
                          for s in starts if s.get("overlapped_with") and s.get("load_s") is not None)
        return (f"- Engine overlap: {', '.join(f'{a} with {b}' for a, b in pairs)} started side by side "
                f"({overlap['reason']}); measured from each engine's own log: {loads}. No measured request ran "
                "while an engine was loading.")
    return f"- Engine overlap: none ({overlap['reason']})."


def _pairs(starts: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for start in starts:
        for other in start.get("overlapped_with") or []:
            pair = tuple(sorted((start["id"], other)))
            if pair not in seen:
                seen.append(pair)  # type: ignore[arg-type]
    return seen
