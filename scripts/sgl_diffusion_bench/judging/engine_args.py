"""What an engine run was asked to do and what it actually did, from its argv and its log. Pure functions.

- ``requests_bcg``: whether an argv asks for breakable CUDA graphs, so gates follow the flags a run carried, not the
  name of the arm that ran it (a ``--campaign ab`` arm may carry ``--enable-breakable-cuda-graph`` itself).
- ``EngineRunFacts``: the effective settings from the engine's ``server_args: {...}`` log line (warm-up mode, attention
  backend, residency, offloads) and each warm-up request the engine ran, with its cost, from its progress lines; the
  lines' patterns are the release's fact markers in data/log_markers.yaml.
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


def requests_bcg(argv: Sequence[str]) -> bool:
    """True when the last ``--enable-breakable-cuda-graph`` in ``argv`` is on (bare, or any value but false/0/no)."""
    values = argv_tokens.flag_values(argv, BCG_FLAG)
    return bool(values) and values[-1].lower() not in ("false", "0", "no", "off")


def fact_markers(markers: log_markers.MarkerSet | None = None) -> tuple[log_markers.Marker, ...]:
    """The fact markers of a release (data/log_markers.yaml); without one, every release's: a log read without a known
    version still yields its settings and warm-ups."""
    pool = markers.markers if markers is not None else log_markers.load_catalog().markers
    return tuple(m for m in pool if m.kind in log_markers.FACT_KINDS)


class EngineRunFacts:
    """Collects, line by line, the facts of one engine run: its effective settings and its warm-up requests."""

    def __init__(self, markers: log_markers.MarkerSet | None = None) -> None:
        self.server_args: dict[str, Any] | None = None
        self.warmups: list[dict[str, Any]] = []
        self._facts = tuple((m.kind, p, log_markers.required_literal(p))
                            for m in fact_markers(markers) for p in (m.compiled(),))

    def _match(self, kind: str, text: str) -> re.Match[str] | None:
        lowered = text.lower()
        for fact_kind, pattern, literal in self._facts:
            if fact_kind == kind and literal in lowered:
                match = pattern.search(text)
                if match:
                    return match
        return None

    def parse_server_args(self, line: str) -> dict[str, Any] | None:
        """The effective settings of one ``server_args: {...}`` log line, or None when the line is not one."""
        return self._settings(log_gates.clean_line(line))

    def parse_warmup(self, line: str) -> dict[str, Any] | None:
        """One finished warm-up request: what it was, its resolution, its steps and its seconds (the engine's own)."""
        return self._warmup(log_gates.clean_line(line))

    def _settings(self, text: str) -> dict[str, Any] | None:
        match = self._match("server_args", text)
        if not match:
            return None
        try:
            args = json.loads(match.group("args"))
        except json.JSONDecodeError:
            return None
        return {k: args[k] for k in EFFECTIVE_KEYS if k in args} if isinstance(args, dict) else None

    def _warmup(self, text: str) -> dict[str, Any] | None:
        match = self._match("warmup_done", text.split("\r")[-1])
        if not match:
            return None
        groups = match.groupdict()
        steps = (groups.get("steps") or "").strip()
        done, _, total = steps.rpartition("/") if "/" in steps else (steps, "", steps)
        return {"kind": (groups.get("what") or "").strip() or "warmup req",
                "resolution": groups["shape"].strip() if groups.get("shape") is not None else None,
                "steps": int(done) if done.isdigit() else None, "of_steps": int(total) if total.isdigit() else None,
                "seconds": float(groups["seconds"])}

    def feed(self, line: str) -> None:
        text = log_gates.clean_line(line)  # once per line: this runs on every line an engine prints
        if self.server_args is None:
            settings = self._settings(text)
            if settings is not None:
                self.server_args = settings
                return
        warmup = self._warmup(text)
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


