"""bench_diffusion_denoise: preset catalog, nightly drift check, engine probe, input assets, and run plans.

Every run is built from a preset (data/presets.yaml) against a probe of the installed engine, so a flag the
engine lacks is refused before anything starts. --dry-run prints the whole plan (argv, env changes, GPUs,
artifacts) without running it.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, Sequence

from .. import advice, assets, contract, model_cache, nightly, presets, selftest, work_dirs
from ..engine import capabilities, command_builder, engine_overlap, tiny_model
from ..campaign import (bench_request, bench_runner, campaign_context, campaign_session, design,
                        engine_mode, sequential, warm_campaign)
from ..results import report, terminal
from . import _engine_args, _runner

TOOL = bench_runner.TOOL  # one name for the CLI and the reports it writes
DEFAULT_PRESET = "flux"  # the reference's default when neither --model nor --all is given
EPILOG = """examples:
  python3 scripts/bench_diffusion_denoise.py --list-models --tag nightly --max-gpus 2 --json
  python3 scripts/bench_diffusion_denoise.py --validate-nightly-alignment --nightly-config <sglang>/scripts/ci/utils/diffusion/comparison_configs.json
  python3 scripts/bench_diffusion_denoise.py --probe-engine --json
  python3 scripts/bench_diffusion_denoise.py --fetch-assets --json
  python3 scripts/bench_diffusion_denoise.py --model tiny-flux-cpu --label base --dry-run --json
  python3 scripts/bench_diffusion_denoise.py --model flux --quality-bcg-matrix --engine-capabilities recent --dry-run

""" + _runner.EXIT_CODES_EPILOG


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Every option that shapes a run, in one place (single runs, campaigns and the quality/BCG matrix share it)."""
    group = parser.add_argument_group("run options")
    group.add_argument("--model", help=f"preset to run (default {DEFAULT_PRESET}; see --list-models)")
    group.add_argument("--all", action="store_true", help="every preset (after --tag/--task/--max-gpus), in catalog "
                       "order, one bench-suite.v1 listing each report; not with --model")
    group.add_argument("--model-path", help="run the preset's request against this local model directory (name it "
                       "as the hub repo, e.g. .../FLUX.1-dev: sglang picks the pipeline config by that name)")
    group.add_argument("--override", action="append", default=[], metavar="FIELD=VALUE",
                       help="replace a preset request field (repeatable): " + ", ".join(presets.OVERRIDABLE_FIELDS))
    group.add_argument("--label", default="baseline", help="names this run's files: letters, digits, '-'")
    group.add_argument("--output-dir", help="where run directories go (default: <work root>/outputs/diffusion_benchmarks)")
    group.add_argument("--no-warmup", action="store_true", help="do not ask the engine for a warmup request")
    group.add_argument("--quality", help="request quality: a level the engine's --quality accepts (0.5.23: exact, "
                       "lossless, high; extra-high is lossless); default lossless where the engine has --quality")
    _engine_args.add_engine_run_options(group)
    group.add_argument("--breakable-cuda-graph", action="store_true", help="a single BCG run (abba and matrix choose BCG per arm)")
    group.add_argument("--bcg-text-buckets", type=_runner.bounded_int(1, 1 << 20), nargs="+", help="positive BCG text buckets (needs BCG or matrix)")
    group.add_argument("--quality-bcg-matrix", action="store_true",
                       help="eager vs BCG in ABBA rounds for each distinct quality level the engine has "
                            "(0.5.23: exact, lossless, high)")
    compile_group = group.add_mutually_exclusive_group()
    compile_group.add_argument("--torch-compile", action="store_true", help="torch.compile comparator (default "
                               "eager); not with BCG or the matrix; ignored with a warning on always-eager presets")
    compile_group.add_argument("--no-torch-compile", action="store_true", help="legacy spelling of the default")
    group.add_argument("--model-cache-root", help="create a fresh isolated HF cache below this directory per run")
    group.add_argument("--cleanup-model-cache", action="store_true", help="delete that cache afterwards (ledgered)")
    group.add_argument("--seed-model-cache-root", action="append", default=[],
                       help="read-only HF home or hub dir overlaid copy-on-write (repeatable)")
    group.add_argument("--cleanup-ledger", help="ledger path (default <output-dir>/cleanup.jsonl)")
    group.add_argument("--extra-args", default="", help="more sglang generate arguments, one shell-"
                       "quoted string, checked like preset flags; a flag the preset or tool already sets is refused")
    group.add_argument("--engine-capabilities", default="installed",
                       help="'installed' (probe, cached), 'recent' (a current-main engine), or an engine.v1 JSON file")
    group.add_argument("--dry-run", action="store_true", help="print the plan (bench-plan.v1); run and build nothing (a local model is only named)")
    camp = parser.add_argument_group("campaigns (bench-report.v1)")
    camp.add_argument("--campaign", choices=design.MODES, default=None,
                      help="single (default); abba: eager vs BCG as A1 B1 B2 A2 rounds; aa: the same config twice "
                           "(noise floor); ab: --arm-a-args vs --arm-b-args; matrix: same as --quality-bcg-matrix")
    camp.add_argument("--rounds", type=_runner.bounded_int(1, advice.MAX_ROUNDS), default=design.DEFAULT_ROUNDS, help="A/B/B/A rounds (default 2)")
    camp.add_argument("--arm-a-args", default="", help="extra engine flags of arm A (--campaign ab), one string")
    camp.add_argument("--arm-b-args", default="", help="extra engine flags of arm B (--campaign ab), one string")
    for arm in "AB":  # e.g. dit-cpu-offload=true: the flag without its leading --
        camp.add_argument(f"--arm-{arm.lower()}-override-flag", action="append", default=[], metavar="FLAG=VALUE",
                          help=f"give a preset's engine flag another value in arm {arm} (--campaign ab; repeatable)")
    camp.add_argument("--threshold-pct", type=_runner.bounded_float(0, 100, low_open=True), default=1.5, help="smallest change that counts (default 1.5)")
    camp.add_argument("--primary-metric", choices=("e2e_ms", "denoise_ms"), default="e2e_ms", help="the metric the verdict is stated on")
    camp.add_argument("--discard-outliers", action="store_true", help="drop flagged outlier cells from "
                      "the statistics; they stay in the report, listed as discarded")
    camp.add_argument("--report", action="store_true", help="also write the Markdown evidence and the PNG plot")
    camp.add_argument("--cell-timeout-s", type=_runner.bounded_float(0, 7 * 86400, low_open=True), default=campaign_context.DEFAULT_CELL_TIMEOUT_S,
                      help="stop a cell's engine after this many seconds (the cell becomes failed)")
    camp.add_argument("--echo-engine", action="store_true", help="stream the engine's log lines to stderr")
    camp.add_argument("--engine", choices=engine_mode.MODES, default=None,
                      help="warm (default; cold where it cannot run, saying why): one resident engine per engine "
                           "configuration serves every cell, same flags and gates; cold: a `sglang generate` per cell")
    camp.add_argument("--warmup-requests", type=_runner.bounded_int(0, 100), default=1,
                      help="warm engine: uncounted requests each engine serves before the measured ones (default 1)")
    camp.add_argument("--requests-file", metavar="FILE.jsonl",
                      help="a request manifest in the engine's own JSONL format (prompt, seed, width, height, "
                           "num_inference_steps, negative_prompt, ...; read by the engine's parser): every slot sends "
                           "each request in file order and each gets its own verdict (summary.requests)")
    camp.add_argument("--samples", type=_runner.bounded_int(1, 1000), default=1,
                      help="measured requests per slot (A1, B1, ...), taken back to back (default 1)")
    camp.add_argument("--until-verdict", action="store_true",
                      help="run rounds until the change's interval excludes +/-threshold or --budget-rounds is "
                           "spent (a sequential rule with Bonferroni-corrected looks; the report records it)")
    camp.add_argument("--budget-rounds", type=_runner.bounded_int(2, advice.MAX_ROUNDS), default=sequential.DEFAULT_BUDGET_ROUNDS,
                      help=f"--until-verdict: most rounds to run (default {sequential.DEFAULT_BUDGET_ROUNDS})")
    camp.add_argument("--budget-minutes", type=_runner.bounded_float(0, 10080, low_open=True),
                      help="--until-verdict: start no further round after this many minutes")
    camp.add_argument("--warm-schedule", choices=warm_campaign.SCHEDULES, default="auto",
                      help="warm engines of several configurations (eager vs BCG): auto (default) keeps them all "
                           "resident and interleaves requests A/B/B/A when memory allows, else alternates blocks")
    camp.add_argument("--engine-overlap", choices=engine_overlap.MODES, default="auto",
                      help="warm engines of several configurations: load them side by side when they fit: auto "
                           "(default; GPU only: all at launch when the weights on disk fit, else the next beside the "
                           "first's warm-up), early (all at launch, CPU too), on (the next beside the first's warm-up, "
                           "CPU too), off (one after the other)")


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--list-models", action="store_true", help="the preset catalog (preset-list.v1)")
    modes.add_argument("--validate-nightly-alignment", action="store_true",
                       help="compare nightly presets with the CI comparison config (nightly-check.v1)")
    modes.add_argument("--probe-engine", action="store_true", help="what the installed engine accepts (engine.v1)")
    modes.add_argument("--bcg-replay", action="store_true",
                       help="BCG replay correctness: warm eager and BCG engines serve one scripted sequence; captures, "
                            "recaptures, fallbacks and eager/BCG byte identity per request (bcg-replay.v1)")
    modes.add_argument("--fetch-assets", action="store_true",
                       help="download and verify input images into the assets dir (assets-fetch.v1)")
    filters = parser.add_argument_group("catalog filters (--list-models, --all)")
    filters.add_argument("--tag", action="append", default=[], help="keep presets with this tag (repeatable: all)")
    filters.add_argument("--task", action="append", default=[], help="keep presets of this task (repeatable: any)")
    filters.add_argument("--max-gpus", type=_runner.bounded_int(0, 1024), help="keep presets needing at most this many GPUs")
    parser.add_argument("--nightly-config", help="comparison_configs.json (default: in the sglang checkout)")
    parser.add_argument("--refresh-probe", action="store_true", help="ignore the cached engine probe")
    _engine_args.add_engine_options(parser)
    parser.add_argument("--assets-base-url", help="fetch every asset by file name from this mirror URL instead")
    parser.add_argument("--replay-without-bcg", action="store_true",
                        help="--bcg-replay with both engines eager: the sequence itself, on an engine without CUDA "
                             "graphs (CPU)")
    add_run_options(parser)
    return parser


def validate_run_args(args: argparse.Namespace) -> None:
    """The combinations the reference rejects, refused before anything runs."""
    rejected = [
        (args.torch_compile and args.breakable_cuda_graph, "--torch-compile and --breakable-cuda-graph are "
         "separate comparators"),
        (args.torch_compile and args.quality_bcg_matrix, "--torch-compile cannot be used with --quality-bcg-matrix"),
        (bool(args.bcg_text_buckets) and not (args.breakable_cuda_graph or args.quality_bcg_matrix),
         "--bcg-text-buckets needs --breakable-cuda-graph or --quality-bcg-matrix"),
        (args.cleanup_model_cache and not args.model_cache_root, "--cleanup-model-cache needs --model-cache-root"),
        (bool(args.seed_model_cache_root) and not args.model_cache_root,
         "--seed-model-cache-root needs --model-cache-root"),
    ]
    for bad, message in rejected:
        if bad:
            raise contract.UsageError("usage.rejected_combination", message, f"run '{TOOL} --help'")
    if args.warmup_requests < 0 or (args.engine == "warm" and args.warmup_requests < 1 and not args.no_warmup):
        raise contract.UsageError("usage.bad_warmup_requests", "--warmup-requests must be at least 1 with --engine "
                                  "warm (a warm engine's first request pays for warmup)",
                                  "use --warmup-requests 1, or --no-warmup to measure a cold first request")
    if args.bcg_text_buckets and any(b <= 0 for b in args.bcg_text_buckets):
        raise contract.UsageError("usage.bad_buckets", f"--bcg-text-buckets must be positive: {args.bcg_text_buckets}",
                                  "pass positive integers")
    if args.quality_bcg_matrix and args.campaign not in (None, "matrix"):
        raise contract.UsageError("usage.rejected_combination", "--quality-bcg-matrix is --campaign matrix",
                                  "drop one of them")
    if args.breakable_cuda_graph and args.campaign in ("abba", "matrix"):
        raise contract.UsageError("usage.rejected_combination", f"--campaign {args.campaign} chooses BCG per arm",
                                  "drop --breakable-cuda-graph")
    try:
        for value in (args.extra_args, args.arm_a_args, args.arm_b_args):
            shlex.split(value)
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"--extra-args does not parse: {exc}",
                                  "quote it as one shell string, e.g. --extra-args='--dit-cpu-offload false'") from exc


def selected_presets(args: argparse.Namespace) -> list[presets.Preset]:
    """The presets to run, each with the request fields --override replaced (and no hub token needed with
    --model-path)."""
    if args.model and args.all:
        raise contract.UsageError("usage.model_and_all", "--model and --all cannot be combined", "pick one")
    catalog = presets.load_presets()
    if args.all:
        chosen = presets.filter_presets(catalog, tags=args.tag, max_gpus=args.max_gpus, tasks=args.task)
    else:
        chosen = [presets.get_preset(args.model or DEFAULT_PRESET, catalog)]
    return presets.customised(chosen, args.override, args.model_path)


def engine_capabilities(args: argparse.Namespace, keep_interpreter: bool = False) -> capabilities.EngineCapabilities:
    spec = args.engine_capabilities
    if spec == "recent":
        return capabilities.recent_engine_capabilities()
    if spec == "installed":
        return _engine_args.probe(args, refresh=args.refresh_probe, keep_interpreter=keep_interpreter).capabilities
    return capabilities.load_capabilities_file(Path(spec))


def settings_from(args: argparse.Namespace) -> campaign_context.CampaignSettings:
    output_root = Path(args.output_dir).resolve() if args.output_dir else work_dirs.output_dir("benchmarks")
    return campaign_context.CampaignSettings(
        label=args.label, output_root=output_root, threshold_pct=args.threshold_pct,
        primary_metric=args.primary_metric, discard_outliers=args.discard_outliers, warmup=not args.no_warmup,
        warmup_mode=args.warmup_mode, warmup_steps=args.warmup_steps, warm_schedule=args.warm_schedule,
        engine_overlap=args.engine_overlap,
        component_residency=tuple(args.component_residency or ()), performance_mode=args.performance_mode,
        torch_compile=args.torch_compile, bcg_text_buckets=tuple(args.bcg_text_buckets or ()),
        extra_args=tuple(shlex.split(args.extra_args)), cell_timeout_s=args.cell_timeout_s,
        model_cache_root=Path(args.model_cache_root) if args.model_cache_root else None,
        seed_caches=tuple(Path(p) for p in args.seed_model_cache_root), cleanup_model_cache=args.cleanup_model_cache,
        cleanup_ledger=Path(args.cleanup_ledger) if args.cleanup_ledger else None, write_report=args.report,
        echo_engine=args.echo_engine, engine_mode=args.engine, warmup_requests=args.warmup_requests,
        stopping=sequential.StoppingRule(args.threshold_pct, args.budget_rounds, metric=args.primary_metric)
        if args.until_verdict else None, time_budget_s=(args.budget_minutes or 0) * 60 or None,
        request={"model_path": str(Path(args.model_path).expanduser().resolve()) if args.model_path else None,
                 "overrides": presets.parse_overrides(args.override), "extra_args": shlex.split(args.extra_args)})


def request_from(args: argparse.Namespace) -> bench_request.BenchRequest:
    """The run as the package takes it, frozen: nothing after this reads ``args``."""
    shape = bench_request.CampaignShape(
        mode="matrix" if args.quality_bcg_matrix else (args.campaign or "single"),
        rounds=args.budget_rounds if args.until_verdict else args.rounds, samples=args.samples,
        quality=args.quality, bcg=args.breakable_cuda_graph,
        arm_a_args=tuple(shlex.split(args.arm_a_args)), arm_b_args=tuple(shlex.split(args.arm_b_args)),
        arm_a_overrides=tuple(args.arm_a_override_flag), arm_b_overrides=tuple(args.arm_b_override_flag))
    return bench_request.BenchRequest(
        presets=tuple(selected_presets(args)), shape=shape, settings=settings_from(args), model_path=args.model_path,
        requests_file=args.requests_file, engine_python=args.engine_python,
        # a gated model's local copy: in the seed caches of an isolated run, else in the caller's hub
        access_hubs=tuple(model_cache.resolve_seed_hub(s) for s in args.seed_model_cache_root)
        if args.model_cache_root else None,
        check_this_machine=args.engine_capabilities == "installed")


def refusal_of(argv: Sequence[str]) -> dict[str, str] | None:
    """What the bench would refuse in these arguments before running anything (its parser, its checks, its plan
    against a recent engine), or None. A sweep asks it of every shard at plan time, so a spec whose shards the bench
    refuses is not a plan that says ok."""
    try:
        args = build_parser().parse_args([*argv, "--dry-run", "--engine-capabilities", "recent"])
        validate_run_args(args)
        refusals = bench_request.plan(request_from(args), capabilities.recent_engine_capabilities())["refusals"]
    except contract.ToolError as exc:
        return {"code": exc.code, "message": exc.message, "hint": exc.hint}
    return {key: refusals[0][key] for key in ("code", "message", "hint")} if refusals else None


def render_plan(payload: dict[str, Any]) -> str:
    lines = [f"engine: sglang {payload['engine']['version']} ({payload['engine']['method']}); "
             f"{len(payload['runs'])} run(s), {len(payload['refusals'])} refused"]
    for run in payload["runs"]:
        lines.append(f"[{run['run_id']}] GPUs={run['num_gpus']} env+={sorted(run['env_set'])}")
        lines.append("  " + " \\\n    ".join(shlex.quote(t) for t in run["argv"]))
        lines += [f"  warning [{w['code']}]: {w['message']}" for w in run["warnings"]]
    lines += [f"warning [{w['code']}]: {w['message']}" for w in payload["warnings"]]
    lines += [f"{m['preset']}: engine {m['mode']} ({m['reason']})" for m in payload["engine_modes"]]
    for r in payload["refusals"]:
        lines.append(f"REFUSED {r['preset']} [{r['code']}]: {r['message']}\n  hint: {r['hint']}")
    return "\n".join(lines)


def _list_models(args: argparse.Namespace) -> _runner.Result:
    rows = presets.filter_presets(presets.load_presets(), tags=args.tag, max_gpus=args.max_gpus, tasks=args.task)
    doc = contract.envelope("preset-list.v1", TOOL, filters={"tags": args.tag, "tasks": args.task,
                                                             "max_gpus": args.max_gpus},
                            total=len(presets.load_presets()), presets=[p.to_json() for p in rows])
    return _runner.Result(doc, presets.render_preset_table(rows))


def _validate_nightly(args: argparse.Namespace) -> _runner.Result:
    path = Path(args.nightly_config) if args.nightly_config else nightly.default_config_path()
    if path is None:
        raise contract.PreconditionError("nightly.config_missing", "no sglang checkout here, so no "
                                         f"{nightly.CONFIG_RELATIVE_PATH}", "pass --nightly-config PATH")
    payload = nightly.check_alignment(presets.load_presets(), nightly.load_config(path))
    doc = contract.envelope("nightly-check.v1", TOOL, config_path=str(path), **payload)
    return _runner.Result(doc, nightly.render_text(payload, path))


def _probe(args: argparse.Namespace) -> _runner.Result:
    caps = None if args.engine_capabilities == "installed" else engine_capabilities(args)
    return _engine_args.probe_result(args, TOOL, caps)


def _fetch(args: argparse.Namespace) -> _runner.Result:
    assets_dir = work_dirs.assets_dir(mkdir=True)
    outcomes, lock_path = assets.fetch_assets(assets_dir, download=assets.make_downloader(args.assets_base_url))
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    failed = [o for o in outcomes if o.failed]
    doc = contract.envelope("assets-fetch.v1", TOOL, ok=not failed, assets_dir=str(assets_dir),
                            lock_path=str(lock_path), counts=counts, assets=[o.to_json() for o in outcomes])
    text = "\n".join(f"[{o.status}] {o.asset.filename} <- {o.asset.source_text()}"
                     + (f": {o.detail}" if o.detail else "") for o in outcomes)
    return _runner.Result(doc, text, exit_code=1 if failed else 0)


def _run(args: argparse.Namespace) -> _runner.Result:
    request = request_from(args)
    for preset in request.presets:
        tiny_model.build_beside_probe(preset, request.model_path)
    runners = bench_request.assemble(  # a warm engine imports sglang once, so the probe keeps its interpreter
        request, lambda: engine_capabilities(args, keep_interpreter=args.engine != "cold"))
    outcome = campaign_session.run(runners, request.settings.label,
                                   lambda preset: tiny_model.model_location(preset, request.model_path, build=True))
    docs = outcome.documents
    if outcome.interrupted:
        return _runner.Result(docs[-1], terminal.render_campaign_text(docs[-1]) + "\ninterrupted: the partial report "
                              "above is valid", exit_code=int(contract.ExitCode.INTERRUPTED),
                              summary="interrupted: " + terminal.campaign_summary(docs[-1]))
    if len(docs) == 1:
        return _runner.Result(docs[0], terminal.render_campaign_text(docs[0]),
                              summary=terminal.campaign_summary(docs[0]))
    suite = contract.envelope("bench-suite.v1", TOOL, ok=all(d["ok"] for d in docs), reports=[
        {"preset": d["campaign"]["preset"], "ok": d["ok"], "path": d["plan"]["report_path"],
         "statuses": [c.status for c in report.cells_of(d)]} for d in docs])
    summary = f"{len(docs)} campaigns, {sum(d['ok'] for d in docs)} OK: " + ", ".join(
        f"{d['campaign']['preset']} {'OK' if d['ok'] else 'NOT OK'}" for d in docs)
    return _runner.Result(suite, "\n\n".join(terminal.render_campaign_text(d) for d in docs), summary=summary)


def _bcg_replay(args: argparse.Namespace) -> _runner.Result:
    from ..campaign import bcg_replay

    preset = presets.customised([presets.get_preset(args.model or DEFAULT_PRESET)], args.override, args.model_path)[0]
    model_path, _ = tiny_model.model_location(preset, args.model_path, build=False)
    doc = bcg_replay.run_command(
        preset, engine_capabilities(args), label=args.label, bcg=not args.replay_without_bcg,
        extra_args=shlex.split(args.extra_args),
        output_root=Path(args.output_dir).resolve() if args.output_dir else work_dirs.output_dir("benchmarks"),
        model_path=model_path, timeout_s=args.cell_timeout_s,
        build_local_model=lambda: tiny_model.model_location(preset, args.model_path, build=True), echo=args.echo_engine)
    return _runner.Result(doc, bcg_replay.render_text(doc))


def _dry_run(args: argparse.Namespace) -> _runner.Result:
    payload = bench_request.plan(request_from(args), engine_capabilities(args))
    doc = contract.envelope("bench-plan.v1", TOOL, ok=not payload["refusals"], **payload)
    return _runner.Result(doc, render_plan(payload),
                          exit_code=0 if not payload["refusals"] else int(contract.ExitCode.PRECONDITION))


MODES = (("list_models", _list_models), ("validate_nightly_alignment", _validate_nightly), ("probe_engine", _probe),
         ("fetch_assets", _fetch), ("bcg_replay", _bcg_replay), ("dry_run", _dry_run))  # first set flag wins


def handle(args: argparse.Namespace) -> _runner.Result:
    validate_run_args(args)
    return next((command for flag, command in MODES if getattr(args, flag)), _run)(args)


def self_tests() -> list[selftest.Check]:
    def catalog() -> str:
        catalog = presets.load_presets()
        incomplete = [p.name for p in catalog if not p.complete]
        if incomplete:
            raise AssertionError(f"every preset must be complete; not: {incomplete}")
        table = presets.render_preset_table(catalog)
        missing = [p.name for p in catalog if f"`{p.name}`" not in table]
        if missing:
            raise AssertionError(f"preset table lacks {missing}")
        return f"{len(catalog)} presets parse; {sum(p.complete for p in catalog)} complete; table renders"

    def asset_manifest() -> str:
        return f"{len(assets.load_manifest())} assets parse"

    def dry_run_tiny() -> str:
        preset = presets.get_preset("tiny-flux-cpu")
        inv = command_builder.build_invocation(
            preset, command_builder.RunOptions(label="selftest"), capabilities.recent_engine_capabilities(),
            sglang_cli=["sglang", "generate"], output_root=Path("/nonexistent/out"), assets_dir=Path("/nonexistent"),
            caller_env={}, model_path="/nonexistent/tiny-FLUX.1-dev")
        doc = contract.envelope("bench-plan.v1", TOOL, engine=capabilities.recent_engine_capabilities().to_json(),
                                output_dir="/nonexistent/out", assets_dir="/nonexistent", runs=[inv.to_json()],
                                refusals=[], warnings=[])
        contract.check_document(doc)
        if "--warmup-mode" not in inv.argv or "--quality=lossless" not in inv.argv:
            raise AssertionError(f"unexpected argv {inv.argv}")
        return f"tiny-flux-cpu builds against the bundled recent-engine capabilities ({len(inv.argv)} tokens)"

    def nightly_self_check() -> str:
        flux = presets.get_preset("flux")
        case = {"id": flux.nightly_case_id, "model": flux.model, "prompt": flux.prompt, "seed": flux.seed,
                "width": flux.width, "height": flux.height, "num_gpus": flux.num_gpus,
                "frameworks": {"sglang": {"serve_args": " ".join(flux.extra_args), "extra_env": {}}}}
        problems, _ = nightly.check_preset(flux, case)
        bad, _ = nightly.check_preset(flux, {**case, "seed": 7})
        if problems or not bad:
            raise AssertionError(f"drift check wrong: {problems or 'seed change not caught'}")
        return "nightly drift check matches a case built from 'flux' and catches a changed seed"

    return [*selftest.schema_checks(["engine.v1", "bench-plan.v1", "preset-list.v1", "nightly-check.v1",
                                     "assets-fetch.v1", "presets.v1", "assets.v1", "assets-lock.v1"]),
            selftest.Check("catalog", catalog), selftest.Check("assets", asset_manifest),
            selftest.Check("dry-run", dry_run_tiny), selftest.Check("nightly", nightly_self_check)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)


if __name__ == "__main__":  # sweep shards run `python -m sgl_diffusion_bench.cli.bench` (issue 27)
    raise SystemExit(main())
