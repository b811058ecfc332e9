"""check_readiness: can preset X run here, now? GPUs free, a token or a local copy of gated weights, the installed
engine's flags, disk, input assets, and whether the hub answers (measured, short timeout). Exit 0 when ready, 3
when not (the document lists every reason)."""

from __future__ import annotations

import argparse
import os

from .. import contract, presets, selftest
from ..engine import capabilities, engine_probe
from ..campaign import readiness
from . import _runner

TOOL = "check_readiness"
EPILOG = """examples:
  python3 scripts/check_readiness.py --model tiny-flux-cpu --json
  python3 scripts/check_readiness.py --model flux --hub-timeout-s 2 --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("--model", help="the preset to check (see bench_diffusion_denoise.py --list-models)")
    parser.add_argument("--model-path", help="the preset's request against this local diffusers pipeline directory "
                                             "(the model check is then that directory; no hub, no cache)")
    parser.add_argument("--engine-capabilities", default="installed",
                        help="'installed' (probe, cached), 'recent', or an engine.v1 JSON file")
    parser.add_argument("--hub-timeout-s", type=_runner.bounded_float(0, 60, low_open=True),
                        default=readiness.DEFAULT_HUB_TIMEOUT_S, help="how long to wait for the hub (default 3)")
    return parser


def _caps(spec: str) -> capabilities.EngineCapabilities:
    if spec == "installed":
        return engine_probe.probe_engine().capabilities
    if spec == "recent":
        return capabilities.recent_engine_capabilities()
    from pathlib import Path

    return capabilities.load_capabilities_file(Path(spec))


def render(payload: dict) -> str:
    lines = [f"{payload['preset']}: {'READY' if payload['ready'] else 'NOT READY'} here, now"]
    for name, check in payload["checks"].items():
        lines.append(f"  [{'ok' if check['ok'] else 'NO'}] {name}: {check['reason']}")
    hub = payload["hub"]
    if hub["checked"]:
        lines.append(f"  hub {hub['endpoint']}: {'reachable' if hub['reachable'] else 'unreachable'} "
                     f"({hub['latency_ms']} ms{'; ' + hub['error'] if hub['error'] else ''})")
    return "\n".join(lines)


def handle(args: argparse.Namespace) -> _runner.Result:
    if not args.model:
        raise contract.UsageError("usage.missing_model", "--model is required", f"{TOOL} --model tiny-flux-cpu")
    preset = presets.get_preset(args.model)
    payload = readiness.assess(preset, _caps(args.engine_capabilities), dict(os.environ),
                               hub_timeout_s=args.hub_timeout_s, model_path=args.model_path)
    doc = contract.envelope("readiness.v1", TOOL, ok=payload["ready"], **payload)
    return _runner.Result(doc, render(payload),
                          exit_code=0 if payload["ready"] else int(contract.ExitCode.PRECONDITION))


def self_tests() -> list[selftest.Check]:
    def offline_hub() -> str:
        hub = readiness.hub_reachability({"HF_HUB_OFFLINE": "1"})
        if hub["checked"] or hub["reachable"]:
            raise AssertionError(f"offline setting not honoured: {hub}")
        return "an offline setting is reported, the hub not asked"

    return [*selftest.schema_checks(["readiness.v1"]), selftest.Check("offline", offline_hub)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
