"""judge_run: the verdict the benchmark runner would give a run made elsewhere (by hand, by a CI job): its engine
log, and when given its perf dump, output files, exit code and the arm's intent (eager or BCG, quality level), judged
by the runner's own request path (request_path.judge_request) and log gates. Exit 0 when the run counts, 1 when not."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import contract, engine_probe, inputs, log_gates, log_markers, media, presets, request_path, selftest
from ..cpu_adapter import sgl_cpu_adapter
from . import _runner

TOOL = "judge_run"
EPILOG = """examples:
  python3 scripts/judge_run.py --log engine.log --perf-dump perf.json --output out.png --json
  python3 scripts/judge_run.py --log bcg.log --perf-dump bcg.json --output bcg.mp4 --bcg --quality lossless \\
      --task t2v --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("--log", required=False, help="the engine log of the run (the whole log, from start-up)")
    parser.add_argument("--perf-dump", help="the run's --perf-dump-path file")
    parser.add_argument("--output", action="append", default=[], help="an output file of the run (repeatable)")
    parser.add_argument("--exit-code", type=int, help="the engine's exit status, when known")
    parser.add_argument("--bcg", action="store_true", help="the arm claims breakable CUDA graphs")
    parser.add_argument("--quality", help="the request's --quality level")
    task = parser.add_mutually_exclusive_group()
    task.add_argument("--task", choices=sorted(media.TASK_KINDS), help="what the run produces (image, video ...)")
    task.add_argument("--preset", help="take the task from this preset")
    parser.add_argument("--engine-version", help="whose log markers apply (default: the installed engine's)")
    parser.add_argument("--no-require-native", action="store_true",
                        help="the log does not cover model loading (a warm engine's request segment)")
    return parser


def _read_log(path: str) -> str:
    """The log's text (undecodable bytes replaced); a FIFO or device is refused before it is read."""
    return inputs.read_bytes(path, "input.unreadable", gunzip=False).decode("utf-8", errors="replace")


def judge(args: argparse.Namespace) -> dict[str, Any]:
    if not args.log:
        raise contract.UsageError("usage.missing_log", "--log is required", f"{TOOL} --log engine.log --json")
    text = _read_log(args.log)
    version = args.engine_version or engine_probe.probe_engine().capabilities.version
    markers = log_markers.markers_for_version(version)
    verdict = log_gates.scan_log(text, markers, bcg_expected=args.bcg, quality=args.quality,
                                 require_native=not args.no_require_native)
    adapter = sgl_cpu_adapter.summarize(line for line in text.splitlines() if sgl_cpu_adapter.TAG in line)
    memory_kind = "process_rss" if adapter and adapter["memory_source"] == "process_rss" else "device"
    task = args.task or (presets.get_preset(args.preset).task if args.preset else None)
    wanted = media.output_suffixes(task)
    outputs = [Path(p) for p in args.output if Path(p).suffix.lower() in wanted]
    missing = [p for p in outputs if not p.is_file()]
    if missing:
        raise contract.InputError("input.unreadable", f"output {missing[0]} does not exist", "pass the run's files")
    judged = request_path.judge_request(
        verdict=verdict, returncode=args.exit_code, stop_reason=None,
        perf_dump_path=Path(args.perf_dump) if args.perf_dump else Path("/nonexistent/no-perf-dump-given"),
        output_paths=outputs, memory_kind=memory_kind)
    return {"intent": {"bcg": args.bcg, "quality": args.quality, "task": task, "engine_version": version,
                       "require_native": not args.no_require_native, "memory_kind": memory_kind},
            "status": judged.status, "reasons": list(judged.reasons), "log": verdict.to_json(),
            "perf": judged.perf, "perf_dump_path": args.perf_dump, "outputs": list(judged.outputs),
            "other_files": [p for p in args.output if Path(p).suffix.lower() not in wanted]}


def handle(args: argparse.Namespace) -> _runner.Result:
    payload = judge(args)
    doc = contract.envelope("judge-run.v1", TOOL, ok=payload["status"] == "valid", **payload)
    perf = payload["perf"] or {}
    text = [f"{payload['status'].upper()}" + (f": e2e {perf['e2e_ms']:.1f} ms" if perf.get("e2e_ms") else "")]
    text += [f"  - {r}" for r in payload["reasons"]]
    return _runner.Result(doc, "\n".join(text))


def self_tests() -> list[selftest.Check]:
    return selftest.schema_checks(["judge-run.v1"])


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
