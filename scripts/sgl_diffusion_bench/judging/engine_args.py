"""What an engine run was asked to do and what it actually did, from its argv and its log. Pure functions.

- ``requests_bcg``: whether an argv asks for breakable CUDA graphs, so gates follow the flags a run carried, not the
  name of the arm that ran it (a ``--campaign ab`` arm may carry ``--enable-breakable-cuda-graph`` itself).
- ``EngineRunFacts``: the effective settings from the engine's ``server_args: {...}`` log line (warm-up mode, attention
  backend, residency, offloads) and each warm-up request the engine ran, with its cost, from its progress lines.
- ``per_arm``: each arm's effective settings and warm-up cost from those facts (run_record's account of what ran).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

from .. import argv_tokens
from . import log_gates, log_markers

BCG_FLAG = "--enable-breakable-cuda-graph"
# server_args keys a reader of a benchmark needs to know were in effect (the full line holds ~150 keys).
EFFECTIVE_KEYS = ("num_gpus", "tp_size", "sp_degree", "ulysses_degree", "ring_degree", "attention_backend",
                  "component_attention_backends", "component_residency", "dit_cpu_offload", "dit_layerwise_offload",
                  "text_encoder_cpu_offload", "image_encoder_cpu_offload", "vae_cpu_offload", "pin_cpu_memory",
                  "enable_torch_compile", "enable_breakable_cuda_graph", "bcg_text_buckets", "warmup", "warmup_mode",
                  "warmup_resolutions", "warmup_steps", "performance_mode", "quality", "cache_dit_config")
SERVER_ARGS = re.compile(r"server_args: (\{.*\})\s*$")
# tqdm's final line of the engine's warm-up loop, e.g.
# "Warmup requests: 100%|...| 1/1 [00:56<00:00, 56.69s/req, server warmup req (1024x1024, 50 steps), last=56.12s]"
WARMUP_DONE = re.compile(r"Warmup requests: 100%\|.*?(\d+)/\1 \[[^,\]]*, [^,\]]*, (?P<what>[^()\]]*?)\s*"
                         r"\((?P<shape>[^,)]*), (?P<steps>[^)]*?) steps?\), last=(?P<last>[\d.]+)s\]")
# sglang 0.5.10.post1: "Warmup req (1/1) processed in 1.71 seconds"
WARMUP_DONE_0510 = re.compile(r"Warmup req \((\d+)/(\d+)\) processed in ([\d.]+) seconds")


def requests_bcg(argv: Sequence[str]) -> bool:
    """True when the last ``--enable-breakable-cuda-graph`` in ``argv`` is on (bare, or any value but false/0/no)."""
    values = argv_tokens.flag_values(argv, BCG_FLAG)
    return bool(values) and values[-1].lower() not in ("false", "0", "no", "off")


def parse_server_args(line: str) -> dict[str, Any] | None:
    """The effective settings of one ``server_args: {...}`` log line, or None when the line is not one."""
    match = SERVER_ARGS.search(log_gates.clean_line(line))
    if not match:
        return None
    try:
        args = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return {k: args[k] for k in EFFECTIVE_KEYS if k in args} if isinstance(args, dict) else None


def parse_warmup(line: str) -> dict[str, Any] | None:
    """One finished warm-up request: what it was, its resolution, its steps and its seconds (the engine's own)."""
    text = log_gates.clean_line(line).split("\r")[-1]
    match = WARMUP_DONE.search(text)
    if not match:
        legacy = WARMUP_DONE_0510.search(text)
        return {"kind": "warmup req", "resolution": None, "steps": None, "of_steps": None,
                "seconds": float(legacy.group(3))} if legacy else None
    steps = match.group("steps").strip()
    total = steps.split("/")[-1]
    return {"kind": match.group("what").strip() or "warmup req", "resolution": match.group("shape").strip(),
            "steps": int(steps.split("/")[0]) if steps.split("/")[0].isdigit() else None,
            "of_steps": int(total) if total.isdigit() else None, "seconds": float(match.group("last"))}


class EngineRunFacts:
    """Collects, line by line, the facts of one engine run: its effective settings and its warm-up requests."""

    def __init__(self) -> None:
        self.server_args: dict[str, Any] | None = None
        self.warmups: list[dict[str, Any]] = []

    def feed(self, line: str) -> None:
        if self.server_args is None and "server_args:" in line:
            self.server_args = parse_server_args(line)
        elif "Warmup requests: 100%" in line or "Warmup req (" in line:
            warmup = parse_warmup(line)
            # tqdm prints its last state twice (refresh, then close): one request, not two
            if warmup and (not self.warmups or warmup != self.warmups[-1]):
                self.warmups.append(warmup)

    def to_json(self) -> dict[str, Any]:
        return {"server_args": self.server_args, "warmups": list(self.warmups),
                "warmup_s": round(sum(w["seconds"] for w in self.warmups), 3) if self.warmups else None}


def per_arm(runs: Iterable[tuple[str, int | None, dict[str, Any]]]) -> dict[str, Any]:
    """``effective``: each arm's settings (its first run that logged them); ``warmups``: each arm's warm-up requests,
    their total seconds and which run (cell index, or None for a warm engine's start) paid them."""
    effective: dict[str, Any] = {}
    warmups: dict[str, Any] = {}
    for arm, cell, facts in runs:
        if facts["server_args"] is not None:
            effective.setdefault(arm, facts["server_args"])
        totals = warmups.setdefault(arm, {"requests": 0, "seconds": 0.0, "per_cell": []})
        totals["per_cell"].append({"cell": cell, "warmups": facts["warmups"]})
        totals["requests"] += len(facts["warmups"])
        totals["seconds"] = round(totals["seconds"] + (facts["warmup_s"] or 0.0), 3)
    return {"effective": effective, "warmups": warmups}


def log_gate(markers: log_markers.MarkerSet, argv: Sequence[str], *, quality: str | None,
             **kwargs: Any) -> log_gates.RequestLogGate:
    """The log gate of one run: BCG is expected when the run's flags ask for it (an ab arm may carry BCG flags),
    not when the arm is named so; ``quality`` is the level the engine runs the request at (the invocation's
    ``quality_level``: an alias resolved, the pinned default filled in), never the arm's label."""
    return log_gates.RequestLogGate(markers, bcg_expected=requests_bcg(argv), quality=quality,
                                    **{"require_native": True, **kwargs})


