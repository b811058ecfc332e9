"""The options every engine-touching CLI shares: which interpreter's sglang, and whether a degraded probe will do."""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from .. import contract
from ..engine import capabilities, engine_probe, engine_python
from . import _runner


class Options(Protocol):
    """A parser or one of its argument groups: what options are added to."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action: ...


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine-python", metavar="PATH",
                        help="the Python whose sglang to drive (default: $" + engine_python.ENV_VAR + ", else this "
                             "interpreter); the bundle stays in its own environment")
    parser.add_argument("--accept-degraded-probe", action="store_true",
                        help="continue when sglang's parser cannot be imported and the probe only read its sources")


def probe(args: argparse.Namespace, *, refresh: bool = False, accept_degraded: bool | None = None,
          keep_interpreter: bool = False) -> engine_probe.ProbeResult:
    """The probe of the engine these arguments name (cached unless refresh; degraded only if accepted; a real probe's
    interpreter kept for the first warm engine if ``keep_interpreter``)."""
    return engine_probe.probe_engine(
        refresh=refresh, python=engine_python.resolve(args.engine_python),
        accept_degraded=args.accept_degraded_probe if accept_degraded is None else accept_degraded,
        keep_interpreter=keep_interpreter)


def add_engine_run_options(group: Options) -> None:
    """First-class engine options of a run, each validated against the probe when the command is built."""
    group.add_argument("--warmup-mode", help="the engine's --warmup-mode (0.5.23: off, request, server; default "
                       "request), checked against the probe")
    group.add_argument("--warmup-steps", type=_runner.bounded_int(1, 1000),
                       help="denoise steps per warmup request (engine's --warmup-steps)")
    group.add_argument("--component-residency", nargs="+", metavar="COMPONENT=MODE",
                       help="placement per component, e.g. all=resident (engine's --component-residency)")
    group.add_argument("--performance-mode", help="the engine's --performance-mode (0.5.23: manual, auto, speed, "
                       "memory), checked against the probe")


def probe_result(args: argparse.Namespace, tool: str,
                 caps: capabilities.EngineCapabilities | None = None) -> _runner.Result:
    """--probe-engine: the engine.v1 document; a degraded probe exits 3 (never cached) unless accepted."""
    cache = None
    if caps is None:
        result = probe(args, refresh=args.refresh_probe, accept_degraded=True)
        caps = result.capabilities
        cache = {"path": str(result.cache_path), "hit": result.cache_hit,
                 "written": not (result.cache_hit or caps.degraded)}
    refused = bool(caps.degraded) and not args.accept_degraded_probe
    doc = contract.envelope("engine.v1", tool, ok=not refused, engine=caps.to_json(), cache=cache)
    text = (f"{caps.label} (probe: {caps.method}); warmup flag {caps.warmup_flag}; BCG {caps.has_bcg}; quality "
            f"levels {list(caps.distinct_quality_levels)} aliases {dict(caps.quality_aliases)}; profiler dir env "
            f"{list(caps.profiler_dir_env)}; {len(caps.flags)} flags")
    if caps.degraded:
        text += f"\nDEGRADED: {caps.degraded_reason()} (not cached)"
    return _runner.Result(doc, text, exit_code=int(contract.ExitCode.PRECONDITION) if refused else 0)
