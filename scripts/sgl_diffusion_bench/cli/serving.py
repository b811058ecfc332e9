"""bench_diffusion_serving: a serving-mode A/B. Per arm one real `sglang serve` on 127.0.0.1 (started, health-checked,
warmed, stopped on every way out), then per load point (--request-rate: open loop, seeded Poisson arrivals;
--concurrency: closed loop) the same trace in A1 B1 B2 A2 blocks per round; per request the latency, success, output
hash and the server's inference time; per load point bench_serving's figures (latency_p50 ... p99, throughput_qps,
goodput under --slo-ms) and a verdict on p50, p99 and throughput by bootstrap over blocks. A server log that fails the
campaign's gates (a diffusers fallback, a failed BCG capture) or a failed request makes the run invalid (exit 1)."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from .. import contract, presets, selftest, work_dirs
from ..engine import command_builder, engine_probe, engine_python, gpu, request_manifest, tiny_model
from ..campaign import request_setup
from ..results import sample_size, stats
from ..serving import device_room, load, render, requests, run, server
from . import _runner

TOOL = "bench_diffusion_serving"
SCHEMA = "serving-report.v1"
EPILOG = """examples:
  python3 scripts/bench_diffusion_serving.py --model tiny-flux-cpu --arm-b-args='--batching-max-size 2' \\
      --request-rate 2,4 --concurrency 2 --requests 6 --output-dir runs/serving-ab --json
  python3 scripts/bench_diffusion_serving.py --model tiny-flux-cpu \\
      --requests-file scripts/sgl_diffusion_bench/data/sample_requests.jsonl --request-rate 1 --requests 6 --json

""" + _runner.EXIT_CODES_EPILOG


def _rates(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number") from None
        if not (value > 0 and value < float("inf")):
            raise argparse.ArgumentTypeError(f"a request rate must be a finite number above 0, got {part.strip()!r}")
        values.append(value)
    return values


_rates.__name__ = "rate list"


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("--model", required=False, help="the preset whose model and shared server flags to use "
                        "(e.g. tiny-flux-cpu); its prompt, size, steps and seed are the default request")
    parser.add_argument("--model-path", help="serve this local pipeline directory instead of the preset's model")
    parser.add_argument("--arm-a-args", default="", help="extra `sglang serve` flags of arm A (the baseline), one "
                                                         "string")
    parser.add_argument("--arm-b-args", default="", help="extra `sglang serve` flags of arm B (the candidate), one "
                                                         "string")
    parser.add_argument("--request-rate", type=_rates, help="open-loop request rates, requests/s, comma-separated "
                                                            "(Poisson arrivals, seeded: both arms get the same trace)")
    parser.add_argument("--concurrency", type=_runner.bounded_int(1, 1024), action="append", default=[],
                        help="closed loop: this many requests in flight (repeatable)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--requests", type=_runner.bounded_int(1, 100_000), help="requests per block (default 8)")
    size.add_argument("--duration-s", type=_runner.bounded_float(0, 86_400, low_open=True),
                      help="send for this many seconds per block instead of a count")
    parser.add_argument("--requests-file", help="a JSONL request manifest in the engine's own format (sglang's "
                                                "benchmarks/request_manifest.py), read by the engine's parser")
    parser.add_argument("--prompt", help="the prompt of the one request (default: the preset's)")
    parser.add_argument("--size", help="WIDTHxHEIGHT of the one request (default: the preset's)")
    parser.add_argument("--steps", type=_runner.bounded_int(1, 1000), help="denoise steps of the one request")
    parser.add_argument("--rounds", type=_runner.bounded_int(1, 50), default=1,
                        help="A1 B1 B2 A2 rounds per load point (default 1; 2 or more for a verdict)")
    parser.add_argument("--warmup-requests", type=_runner.bounded_int(0, 100), default=1,
                        help="requests per server before the measured blocks, one per shape at least (default 1)")
    parser.add_argument("--slo-ms", type=_runner.bounded_float(0, 86_400_000, low_open=True),
                        help="latency objective: goodput_qps and slo_attainment_rate count requests within it")
    parser.add_argument("--seed", type=_runner.bounded_int(0, 2**32 - 1), default=20260101,
                        help="seed of the arrival times (and of the bootstrap)")
    parser.add_argument("--port-a", type=_runner.bounded_int(1, 65535), help="port of arm A's server (default: a "
                                                                            "free one)")
    parser.add_argument("--port-b", type=_runner.bounded_int(1, 65535), help="port of arm B's server (default: a "
                                                                            "free one)")
    parser.add_argument("--startup-timeout-s", type=_runner.bounded_float(0, 7200, low_open=True), default=600,
                        help="how long a server may take to answer /health (default 600)")
    parser.add_argument("--output-dir", help="where server logs, report.json, report.md and the plot go "
                                             "(default: serving-runs/<model>)")
    parser.add_argument("--threshold-pct", type=_runner.bounded_float(0, 100, low_open=True),
                        default=stats.DEFAULT_THRESHOLD_PCT, help="smallest change that counts (default 1.5)")
    parser.add_argument("--engine-python", metavar="PATH",
                        help="the Python whose sglang to serve with (default: $" + engine_python.ENV_VAR +
                             ", else this interpreter)")
    return parser


def _arm_args(text: str, option: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"{option} does not parse: {exc}",
                                  f"quote it as one shell string, e.g. {option}='--batching-max-size 2'") from exc


def request_of(args: argparse.Namespace) -> run.ServingRequest:
    if not args.model:
        raise contract.UsageError("usage.missing_model", "--model is required",
                                  f"{TOOL} --model tiny-flux-cpu --request-rate 2 --json")
    if not args.request_rate and not args.concurrency:
        raise contract.UsageError("usage.missing_load", "no load: give --request-rate and/or --concurrency",
                                  "e.g. --request-rate 2,4 --concurrency 2")
    arm_a, arm_b = _arm_args(args.arm_a_args, "--arm-a-args"), _arm_args(args.arm_b_args, "--arm-b-args")
    request_setup.adapter_switches_off(os.environ)  # a typo in the CPU adapter's switch, refused before any server
    preset = presets.get_preset(args.model)
    endpoint = requests.endpoint(preset)
    python = engine_python.resolve(args.engine_python)
    server.check_given_ports({arm: port for arm, port in (("a", args.port_a), ("b", args.port_b))
                              if port is not None})  # before anything is built or started
    location = work_dirs.sglang_location() if engine_python.is_own(python) else engine_python.sglang_location(python)
    if not location["installed"]:
        raise contract.PreconditionError("engine.not_installed", f"sglang is not installed: {location['reason']}",
                                         "install the engine (README 'Engine install') or pass --engine-python")
    tiny_model.build_beside_probe(preset, args.model_path)
    engine = engine_probe.probe_engine(python=python).capabilities
    for letter, flags in (("a", arm_a), ("b", arm_b)):
        server.check_flags(engine, [*preset.extra_args, *flags, "--host", "--port"], f"--arm-{letter}-args")
    size = requests.parse_size(args.size) if args.size else (preset.width or 1024, preset.height or 1024)
    video = endpoint == load.VIDEOS
    if args.requests_file:
        specs, sha = request_manifest.load_manifest(
            Path(args.requests_file), Path(location["package_dir"]), size,
            *((request_manifest.VIDEO_PAYLOAD_FIELDS, "a video serving request (its JSON body)") if video else ()))
        manifest = {"kind": "manifest", "path": str(Path(args.requests_file).resolve()), "sha256": sha,
                    "requests": len(specs), "shapes": requests.shapes(specs),
                    "parser": request_manifest.MANIFEST_SOURCE}
    else:
        frames = {"num_frames": preset.num_frames, "fps": preset.fps} if video else {}
        specs = requests.single_request(args.prompt or preset.prompt or "a photo of a cat", size,
                                        args.steps or preset.num_inference_steps, preset.seed or 42, frames)
        manifest = None
    model_path, _ = tiny_model.model_location(preset, args.model_path, build=True)
    if model_path is None:
        raise contract.UsageError("usage.missing_model", f"preset {preset.name!r} has no local model",
                                  "give --model-path with a local pipeline directory")
    points = [load.LoadPoint("request_rate", r) for r in args.request_rate or []]
    points += [load.LoadPoint("concurrency", float(n)) for n in args.concurrency]
    inventory = gpu.read_inventory()
    device_room.check(model_path, [*preset.extra_args, *arm_a, *arm_b], inventory, os.environ)  # before any server
    output_dir = Path(args.output_dir or Path("serving-runs") / preset.name).resolve()
    given = [*preset.extra_args, *arm_a, *arm_b]
    return run.ServingRequest(
        model_path=model_path, sglang_cli=tuple(engine_python.sglang_cli(python)), engine_version=location["version"],
        shared_args=(*preset.extra_args, *command_builder.cpu_idle_args(preset, engine, given),
                     *command_builder.cpu_server_warmup_args(preset, engine, given)),
        arm_args={"A": arm_a, "B": arm_b}, specs=tuple(specs),
        manifest=manifest, points=tuple(points), requests=None if args.duration_s else (args.requests or 8),
        duration_s=args.duration_s, rounds=args.rounds, warmup_requests=args.warmup_requests, slo_ms=args.slo_ms,
        seed=args.seed, ports={"A": args.port_a, "B": args.port_b}, startup_timeout_s=args.startup_timeout_s,
        output_dir=output_dir, use_cpu_adapter=not inventory.gpus, threshold_pct=args.threshold_pct,
        resamples=stats.DEFAULT_RESAMPLES, confidence=stats.DEFAULT_CONFIDENCE,
        min_rounds=sample_size.DEFAULT_MIN_ROUNDS, endpoint=endpoint, input_image=requests.input_image(preset))


def handle(args: argparse.Namespace) -> _runner.Result:
    request = request_of(args)
    payload = run.run(request)
    doc = contract.envelope(SCHEMA, TOOL, ok=payload["status"] == "valid", **payload)
    render.write_files(doc, request.output_dir)
    lines = [f"{doc['status'].upper()}: verdict {doc['verdict']}"]
    lines += [f"  - {r}" for r in doc["reasons"]]
    for point in doc["load_points"]:
        for arm, m in point["arms"].items():
            p50 = "—" if m["latency_p50"] is None else f"{m['latency_p50'] * 1000:.1f} ms"
            p99 = "—" if m["latency_p99"] is None else f"{m['latency_p99'] * 1000:.1f} ms"
            lines.append(f"  {point['label']} {arm}: p50 {p50}, p99 {p99}, {m['throughput_qps']:.2f} req/s")
    lines.append(f"  report: {doc['markdown']}")
    summary = (f"{doc['status']}: verdict {doc['verdict']}; {len(doc['load_points'])} load point(s)"
               + (f"; {len(doc['reasons'])} reason(s) above" if doc["reasons"] else "")
               + f"; Markdown {doc['markdown']}")
    return _runner.Result(doc, "\n".join(lines), summary=summary)


def self_tests() -> list[selftest.Check]:
    return selftest.schema_checks([SCHEMA])


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
