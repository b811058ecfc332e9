"""bench_diffusion_denoise: preset catalog, nightly drift check, engine probe, input assets, and run plans.

Every run is built from a preset (data/presets.yaml) against a probe of the installed engine, so a flag the
engine lacks is refused before anything starts. --dry-run prints the whole plan (argv, env changes, GPUs,
artifacts) without running it.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from .. import assets, command_builder, contract, engine_probe, env, nightly, presets, selftest
from . import _runner

TOOL = "bench_diffusion_denoise"
DEFAULT_PRESET = "flux"  # the reference's default when neither --model nor --all is given
MATRIX_QUALITIES = command_builder.BENCHMARK_QUALITY_LEVELS
MATRIX_MODES = ("eager-{q}-a", "bcg-{q}-a", "bcg-{q}-b", "eager-{q}-b")  # ABBA within each quality
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
    group.add_argument("--all", action="store_true", help="every preset (after --tag/--task/--max-gpus), in order")
    group.add_argument("--label", default="baseline", help="names this run's files: letters, digits, '-'")
    group.add_argument("--output-dir", help="where run directories go (default: <work root>/outputs/diffusion_benchmarks)")
    group.add_argument("--no-warmup", action="store_true", help="do not ask the engine for a warmup request")
    group.add_argument("--quality", choices=command_builder.BENCHMARK_QUALITY_LEVELS,
                       help="request quality (default: lossless where the engine has --quality)")
    group.add_argument("--breakable-cuda-graph", action="store_true", help="BCG comparator run")
    group.add_argument("--bcg-text-buckets", type=int, nargs="+", help="positive BCG text buckets (needs BCG or matrix)")
    group.add_argument("--quality-bcg-matrix", action="store_true",
                       help="the 12-row eager/BCG ABBA matrix across lossless, extra-high, high")
    compile_group = group.add_mutually_exclusive_group()
    compile_group.add_argument("--torch-compile", action="store_true", help="torch.compile comparator (opt-in)")
    compile_group.add_argument("--no-torch-compile", action="store_true", help="legacy spelling of the default")
    group.add_argument("--model-cache-root", help="create a fresh isolated HF cache below this directory per run")
    group.add_argument("--cleanup-model-cache", action="store_true", help="delete that cache afterwards (ledgered)")
    group.add_argument("--seed-model-cache-root", action="append", default=[],
                       help="read-only HF home or hub dir overlaid copy-on-write (repeatable)")
    group.add_argument("--cleanup-ledger", help="ledger path (default <output-dir>/cleanup.jsonl)")
    group.add_argument("--extra-args", default="", help="more sglang generate arguments, one shell-quoted string")
    group.add_argument("--engine-capabilities", default="installed",
                       help="'installed' (probe, cached), 'recent' (a current-main engine), or an engine.v1 JSON file")
    group.add_argument("--dry-run", action="store_true", help="print the plan (bench-plan.v1); run and build nothing (a local model is only named)")


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--list-models", action="store_true", help="the preset catalog (preset-list.v1)")
    modes.add_argument("--validate-nightly-alignment", action="store_true",
                       help="compare nightly presets with the CI comparison config (nightly-check.v1)")
    modes.add_argument("--probe-engine", action="store_true", help="what the installed engine accepts (engine.v1)")
    modes.add_argument("--fetch-assets", action="store_true",
                       help="download and verify input images into the assets dir (assets-fetch.v1)")
    filters = parser.add_argument_group("catalog filters (--list-models, --all)")
    filters.add_argument("--tag", action="append", default=[], help="keep presets with this tag (repeatable: all)")
    filters.add_argument("--task", action="append", default=[], help="keep presets of this task (repeatable: any)")
    filters.add_argument("--max-gpus", type=int, help="keep presets needing at most this many GPUs")
    parser.add_argument("--nightly-config", help="comparison_configs.json (default: in the sglang checkout)")
    parser.add_argument("--refresh-probe", action="store_true", help="ignore the cached engine probe")
    parser.add_argument("--assets-base-url", help="fetch every asset by file name from this mirror URL instead")
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
    if args.bcg_text_buckets and any(b <= 0 for b in args.bcg_text_buckets):
        raise contract.UsageError("usage.bad_buckets", f"--bcg-text-buckets must be positive: {args.bcg_text_buckets}",
                                  "pass positive integers")
    try:
        shlex.split(args.extra_args)
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"--extra-args does not parse: {exc}",
                                  "quote it as one shell string, e.g. --extra-args='--dit-cpu-offload false'")


def selected_presets(args: argparse.Namespace) -> list[presets.Preset]:
    catalog = presets.load_presets()
    if args.all:
        return presets.filter_presets(catalog, tags=args.tag, max_gpus=args.max_gpus, tasks=args.task)
    return [presets.get_preset(args.model or DEFAULT_PRESET, catalog)]


def planned_runs(preset: presets.Preset, args: argparse.Namespace) -> list[command_builder.RunOptions]:
    """The runs one preset gets: a single run, or the 12-row quality/BCG matrix."""
    common = dict(label=args.label, warmup=not args.no_warmup, extra_args=tuple(shlex.split(args.extra_args)))
    if args.quality_bcg_matrix:
        runs = []
        for quality in MATRIX_QUALITIES:
            for mode in MATRIX_MODES:
                bcg = mode.startswith("bcg")
                runs.append(command_builder.RunOptions(
                    arm=mode.format(q=quality), quality=quality, breakable_cuda_graph=bcg,
                    bcg_text_buckets=tuple(args.bcg_text_buckets or ()) if bcg else (), **common))
        return runs
    return [command_builder.RunOptions(quality=args.quality, breakable_cuda_graph=args.breakable_cuda_graph,
                                       bcg_text_buckets=tuple(args.bcg_text_buckets or ()),
                                       torch_compile=args.torch_compile, **common)]


def engine_capabilities(args: argparse.Namespace) -> engine_probe.EngineCapabilities:
    spec = args.engine_capabilities
    if spec == "recent":
        return engine_probe.recent_engine_capabilities()
    if spec == "installed":
        return engine_probe.probe_engine(refresh=args.refresh_probe).capabilities
    return engine_probe.load_capabilities_file(Path(spec))


def local_model_path(name: str, build: bool) -> Path:
    """Where a local preset model lives; built only when ``build`` (a dry run only names the path)."""
    from .. import tiny_model

    if name != "tiny-flux":
        raise contract.InputError("input.unknown_local_model", f"no builder for local model {name!r}",
                                  "use local_model: tiny-flux")
    if build:
        return tiny_model.ensure_tiny_flux()
    return tiny_model.default_cache_dir() / tiny_model.NATIVE_NAME


def build_plan(args: argparse.Namespace, caps: engine_probe.EngineCapabilities) -> dict[str, Any]:
    from .. import engine_process

    output_root = Path(args.output_dir).resolve() if args.output_dir else env.output_dir("benchmarks")
    assets_dir = env.assets_dir()
    filenames = {a.id: a.filename for a in assets.load_manifest()}
    runs, refusals, warnings = [], [], []
    for preset in selected_presets(args):
        model_path = None
        if preset.local_model:
            model_path = local_model_path(preset.local_model, build=False)
            if not (model_path / "model_index.json").is_file():
                warnings.append({"code": "model.not_built", "message": f"{model_path} does not exist yet; a real "
                                 "run builds it first (tiny_model.ensure_tiny_flux)"})
        for options in planned_runs(preset, args):
            try:
                invocation = command_builder.build_invocation(
                    preset, options, caps, sglang_cli=[*engine_process.sglang_cli(), "generate"],
                    output_root=output_root, assets_dir=assets_dir, caller_env=dict(os.environ),
                    model_path=str(model_path) if model_path else None, asset_filenames=filenames)
            except contract.UsageError:
                raise
            except contract.ToolError as exc:
                refusals.append({"preset": preset.name, "code": exc.code, "message": exc.message, "hint": exc.hint})
                break  # the other rows of this preset would be refused for the same reason
            runs.append(invocation.to_json())
    return {"engine": caps.to_json(), "output_dir": str(output_root), "assets_dir": str(assets_dir), "runs": runs,
            "refusals": refusals, "warnings": warnings}


def render_plan(payload: dict[str, Any]) -> str:
    lines = [f"engine: sglang {payload['engine']['version']} ({payload['engine']['method']}); "
             f"{len(payload['runs'])} run(s), {len(payload['refusals'])} refused"]
    for run in payload["runs"]:
        lines.append(f"[{run['run_id']}] GPUs={run['num_gpus']} env+={sorted(run['env_set'])}")
        lines.append("  " + " \\\n    ".join(shlex.quote(t) for t in run["argv"]))
        lines += [f"  warning [{w['code']}]: {w['message']}" for w in run["warnings"]]
    lines += [f"warning [{w['code']}]: {w['message']}" for w in payload["warnings"]]
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
    if args.engine_capabilities == "installed":
        result = engine_probe.probe_engine(refresh=args.refresh_probe)
        caps, cache = result.capabilities, {"path": str(result.cache_path), "hit": result.cache_hit}
    else:
        caps, cache = engine_capabilities(args), None
    doc = contract.envelope("engine.v1", TOOL, engine=caps.to_json(), cache=cache)
    text = (f"{caps.label} (probe: {caps.method}); warmup flag {caps.warmup_flag}; BCG {caps.has_bcg}; quality "
            f"{caps.quality_values}; profiler dir env {list(caps.profiler_dir_env)}; {len(caps.flags)} flags")
    return _runner.Result(doc, text)


def _fetch(args: argparse.Namespace) -> _runner.Result:
    assets_dir = env.assets_dir(mkdir=True)
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


def handle(args: argparse.Namespace) -> _runner.Result:
    validate_run_args(args)
    if args.list_models:
        return _list_models(args)
    if args.validate_nightly_alignment:
        return _validate_nightly(args)
    if args.probe_engine:
        return _probe(args)
    if args.fetch_assets:
        return _fetch(args)
    if args.model and args.all:
        raise contract.UsageError("usage.model_and_all", "--model and --all cannot be combined", "pick one")
    if not args.dry_run:
        raise contract.PreconditionError("run.not_wired", "real runs are not wired into this build yet",
                                         "use --dry-run --json to see the plan")
    caps = engine_capabilities(args)
    payload = build_plan(args, caps)
    doc = contract.envelope("bench-plan.v1", TOOL, ok=not payload["refusals"], **payload)
    return _runner.Result(doc, render_plan(payload),
                          exit_code=0 if not payload["refusals"] else int(contract.ExitCode.PRECONDITION))


def self_tests() -> list[selftest.Check]:
    def catalog() -> str:
        catalog = presets.load_presets()
        if len([p for p in catalog if p.local_model is None]) != 78:
            raise AssertionError("the catalog must hold the reference's 78 presets")
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
            preset, command_builder.RunOptions(label="selftest"), engine_probe.recent_engine_capabilities(),
            sglang_cli=["sglang", "generate"], output_root=Path("/nonexistent/out"), assets_dir=Path("/nonexistent"),
            caller_env={}, model_path="/nonexistent/tiny-FLUX.1-dev")
        doc = contract.envelope("bench-plan.v1", TOOL, engine=engine_probe.recent_engine_capabilities().to_json(),
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
