"""judge_run: the verdict the benchmark runner would give a run made elsewhere (by hand, by a CI job): its engine
log, and when given its perf dump, output files, exit code and the arm's intent (eager or BCG, quality level), judged
by the runner's own request path (request_path.judge_request) and log gates. For a warm campaign's cell the warm
engine's own log is read too (--engine-log, or found beside the cell). Outputs are opened and checked against the
requested --size/--num-frames. Exit 0 when the run counts, 1 when not."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import contract, presets, selftest
from ..engine import engine_probe
from ..judging import media, output_check, run_judge
from . import _runner

TOOL = "judge_run"
EPILOG = """examples:
  python3 scripts/judge_run.py --log engine.log --perf-dump perf.json --output out.png --size 1024x1024 --json
  python3 scripts/judge_run.py --log <run>/engine.log --engine-log <label>__warm-e1/engine.log \\
      --perf-dump <run>/<run>.perf.json --output <run>/<stem>.png --bcg --json
  python3 scripts/judge_run.py --log bcg.log --perf-dump bcg.json --output bcg.mp4 --bcg --quality lossless \\
      --task t2v --num-frames 33 --json
  python3 scripts/judge_run.py --log prof.log --perf-dump prof.json --output prof.png --intent profile --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("--log", required=False, help="the engine log of the run (the whole log, from start-up), "
                                                      "or a warm cell's request segment")
    parser.add_argument("--engine-log", help="the warm engine's own log (<label>__warm-eN/engine.log) for a warm "
                                             "cell's segment; found beside the cell when not given")
    parser.add_argument("--perf-dump", help="the run's --perf-dump-path file")
    parser.add_argument("--output", action="append", default=[], help="an output file of the run (repeatable)")
    parser.add_argument("--size", help="the requested WIDTHxHEIGHT: outputs of another size do not count")
    parser.add_argument("--num-frames", type=int, help="the requested frame count of a video")
    parser.add_argument("--exit-code", type=int, help="the engine's exit status, when known")
    parser.add_argument("--bcg", action="store_true", help="the arm claims breakable CUDA graphs")
    parser.add_argument("--quality", help="the request's --quality level")
    parser.add_argument("--intent", choices=run_judge.INTENTS, default="measure",
                        help="measure (default) or profile: a run made with --profile is judged as a profile, "
                             "its timings marked as distorted")
    task = parser.add_mutually_exclusive_group()
    task.add_argument("--task", choices=sorted(media.TASK_KINDS), help="what the run produces (image, video ...)")
    task.add_argument("--preset", help="take the task, the requested size and the frame count from this preset "
                                       "(--size and --num-frames win)")
    parser.add_argument("--engine-version", help="whose log markers apply (default: the installed engine's)")
    parser.add_argument("--no-require-native", action="store_true",
                        help="the log does not cover model loading (a warm engine's request segment)")
    return parser


def _size(text: str | None) -> tuple[int | None, int | None]:
    if text is None:
        return None, None
    width, sep, height = text.lower().partition("x")
    if not (sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise contract.UsageError("usage.bad_size", f"--size {text!r} is not WIDTHxHEIGHT", "e.g. --size 1024x1024")
    return int(width), int(height)


def request_of(args: argparse.Namespace) -> run_judge.JudgeRequest:
    if not args.log:
        raise contract.UsageError("usage.missing_log", "--log is required", f"{TOOL} --log engine.log --json")
    if args.num_frames is not None and args.num_frames < 1:
        raise contract.UsageError("usage.bad_num_frames", "--num-frames must be at least 1", "e.g. --num-frames 33")
    width, height = _size(args.size)
    num_frames = args.num_frames
    preset = presets.get_preset(args.preset) if args.preset else None
    if preset is not None:
        if args.size is None:
            width, height = preset.width, preset.height
        num_frames = preset.num_frames if num_frames is None else num_frames
    return run_judge.JudgeRequest(
        log=Path(args.log), engine_version=args.engine_version or engine_probe.probe_engine().capabilities.version,
        perf_dump=Path(args.perf_dump) if args.perf_dump else None, outputs=tuple(map(Path, args.output)),
        exit_code=args.exit_code, bcg=args.bcg, quality=args.quality,
        task=args.task or (preset.task if preset else None),
        require_native=not args.no_require_native, engine_log=Path(args.engine_log) if args.engine_log else None,
        intent=args.intent, requested=output_check.RequestedShape(width, height, num_frames))


def handle(args: argparse.Namespace) -> _runner.Result:
    payload = run_judge.judge(request_of(args))
    doc = contract.envelope("judge-run.v1", TOOL, ok=payload["status"] == "valid", **payload)
    perf = payload["perf"] or {}
    text = [f"{payload['status'].upper()}" + (f": e2e {perf['e2e_ms']:.1f} ms" if perf.get("e2e_ms") else "")]
    text += [f"  - {r}" for r in payload["reasons"]]
    if payload["timing_note"]:
        text.append(f"  note: {payload['timing_note']}")
    if payload["standin_modules"]:
        text.append(f"  stand-in modules ran, not the real packages: {', '.join(payload['standin_modules'])} "
                    "(engine.standin_kernels): no figure of this run stands for a real install")
    return _runner.Result(doc, "\n".join(text))


def self_tests() -> list[selftest.Check]:
    return selftest.schema_checks(["judge-run.v1"])


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
