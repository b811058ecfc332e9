"""The command builder: every preset builds (or is refused clearly) against a current-main engine and the
installed 0.5.10.post1; argument order, warmup/BCG/compile rules, env, naming; rejected combinations."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_release import DEFAULT_RELEASE, OLDER_RELEASE, expects
from conftest import HF_TOKEN_CANARY, run_main, run_script
from sgl_diffusion_bench import argv_tokens, assets, contract, presets
from sgl_diffusion_bench.engine import capabilities, engine_probe, engine_process, tiny_model
from sgl_diffusion_bench.engine import command_builder as cb

RECENT = capabilities.recent_engine_capabilities()
CLI = ("sglang", "generate")
OUT = Path("/bench/out")
ASSETS = Path("/bench/assets")
FILENAMES = {a.id: a.filename for a in assets.load_manifest()}


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """The installed engine, probed once per session (the cache is shared with test_engine_probe.py)."""
    return engine_probe.probe_engine(tmp_path_factory.getbasetemp() / "engine-capabilities.json").capabilities


def build(name, engine=RECENT, env=None, **options):
    preset = presets.get_preset(name)
    return cb.build_invocation(preset, cb.RunOptions(**options), engine, sglang_cli=CLI, output_root=OUT,
                               assets_dir=ASSETS, caller_env=env or {},
                               model_path="/m/tiny-FLUX.1-dev" if preset.local_model else None,
                               asset_filenames=FILENAMES)


def _build_or_refusal(preset, engine):
    try:
        return build(preset.name, engine), None
    except contract.ToolError as exc:
        return None, exc


def test_every_preset_is_complete_and_builds_against_a_recent_engine():
    catalog = presets.load_presets()
    assert [p.name for p in catalog if not p.complete] == []  # --list-models shows every preset complete
    for preset in catalog:
        invocation, refusal = _build_or_refusal(preset, RECENT)
        assert refusal is None, (preset.name, refusal and refusal.message)
        assert invocation.argv[:3] == (*CLI, "--backend=sglang")
        if preset.prompt_source == "bundle":  # our own text: recorded so nobody compares it with upstream runs
            assert preset.prompt and f"--prompt={preset.prompt}" in invocation.argv or "--prompt" in invocation.argv


def test_an_incomplete_preset_is_refused_naming_what_is_unknown():
    flux = presets.get_preset("flux")
    unknown = dataclasses.replace(flux, prompt=None, unknown_fields=("prompt",))
    with pytest.raises(contract.PreconditionError) as info:
        cb.build_invocation(unknown, cb.RunOptions(), RECENT, sglang_cli=CLI, output_root=OUT, assets_dir=ASSETS,
                            caller_env={}, asset_filenames=FILENAMES)
    assert info.value.code == "preset.incomplete" and "prompt" in info.value.message


@pytest.mark.engine
@expects(OLDER_RELEASE)
def test_every_preset_builds_against_the_installed_engine_or_is_refused_naming_flag_and_version(installed):
    outcomes = {}
    for preset in presets.load_presets():
        invocation, refusal = _build_or_refusal(preset, installed)
        outcomes[preset.name] = refusal.code if refusal else "built"
        if refusal and refusal.code == "engine.flag_missing":
            assert "0.5.10.post1" in refusal.message and refusal.hint
            assert all(f in refusal.message for f in refusal.details["missing_flags"])
        else:
            assert refusal is None, (preset.name, refusal.code, refusal.message)  # built or names the flag it lacks
            assert "--warmup" in invocation.argv and not any(t.startswith("--quality") for t in invocation.argv)
    assert outcomes["flux"] == outcomes["flux2"] == "engine.flag_missing"  # --component-residency
    assert outcomes["wan-t2v"] == outcomes["qwen"] == outcomes["tiny-flux-cpu"] == "built"
    assert set(outcomes.values()) <= {"built", "engine.flag_missing"}


@pytest.mark.engine
@expects(OLDER_RELEASE)
def test_refusals_on_the_installed_engine_are_specific(installed):
    with pytest.raises(contract.PreconditionError) as info:
        build("flux", installed)
    assert info.value.details["missing_flags"] == ["--component-residency"]
    assert "--dit-cpu-offload false" in info.value.hint
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", installed, quality="high")
    assert "--quality" in info.value.message and "no quality levels" in info.value.hint
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", installed, breakable_cuda_graph=True)
    assert info.value.details["missing_flags"] == ["--enable-breakable-cuda-graph"]
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", installed, extra_args=("--performance-mode=manual",))
    assert "--performance-mode" in info.value.message
    ok = build("qwen", installed, extra_args=("--transformer-path", "/q"))  # dynamic component path: accepted
    assert ok.argv[-2:] == ("--transformer-path", "/q")
    assert any(code == "engine.offload_autofill" for code, _ in ok.warnings)


def test_argument_order_follows_the_reference():
    inv = build("qwen-edit", env={"HF_TOKEN": HF_TOKEN_CANARY})
    rid = "qwen-edit__baseline"
    assert inv.argv == (*CLI, "--backend=sglang", "--model-path=Qwen/Qwen-Image-Edit-2511",
                        "--prompt=Make the cat wear a red hat", "--seed=42", f"--image-path={ASSETS}/cat.png",
                        "--width=1024", "--height=1024", "--num-gpus=2", "--tp-size=2", "--quality=lossless",
                        "--save-output", "--warmup-mode", "request", "--perf-dump-path", f"{OUT}/{rid}/{rid}.perf.json",
                        "--output-path", f"{OUT}/{rid}", "--output-file-name", rid.replace("__", "_"))
    assert inv.required_assets == (ASSETS / "cat.png",) and inv.num_gpus == 2


def test_installed_style_engine_uses_warmup_and_no_quality():
    old = capabilities.EngineCapabilities(
        version="0.5.10.post1", package_dir="/x", method="static_source",
        flags=RECENT.flags - {"--warmup-mode", "--quality", "--enable-breakable-cuda-graph", "--performance-mode"}
        | {"--warmup"}, choices={}, profiler_dir_env=("SGLANG_TORCH_PROFILER_DIR",), profiler_dir_env_source="source")
    inv = build("qwen", old)
    assert "--warmup" in inv.argv and "--warmup-mode" not in inv.argv
    assert not any(t.startswith("--quality") for t in inv.argv)
    assert ("engine.no_quality_levels" in dict(inv.warnings))
    assert "--warmup" not in build("qwen", old, warmup=False).argv


def test_a_cpu_preset_asks_the_engine_to_sleep_when_idle_where_it_can():
    assert cb.SLEEP_ON_IDLE in build("tiny-flux-cpu").argv  # an idle scheduler spins a core the engine's compute needs
    assert cb.SLEEP_ON_IDLE not in build("tiny-flux-gpu").argv  # a GPU run keeps the engine's default
    assert build("tiny-flux-cpu", extra_args=("--sleep-on-idle",)).argv.count(cb.SLEEP_ON_IDLE) == 1
    older = dataclasses.replace(RECENT, flags=RECENT.flags - {cb.SLEEP_ON_IDLE})
    assert cb.SLEEP_ON_IDLE not in build("tiny-flux-cpu", older).argv  # an engine without it is not asked


def test_a_cpu_server_warms_up_at_the_presets_own_shape_where_the_engine_can():
    wan, flux = presets.get_preset("tiny-wan-t2v-cpu"), presets.get_preset("tiny-flux-cpu")
    assert cb.cpu_server_warmup_args(wan, RECENT, []) == ["--warmup-resolutions", "64x64", "--warmup-num-frames", "5"]
    assert cb.cpu_server_warmup_args(flux, RECENT, []) == ["--warmup-resolutions", "64x64"]  # an image: no frames
    assert cb.cpu_server_warmup_args(presets.get_preset("tiny-wan-t2v-gpu"), RECENT, []) == []  # a GPU: the default
    assert cb.cpu_server_warmup_args(wan, RECENT, ["--warmup-num-frames=9"]) == []  # the caller's own wins
    older = dataclasses.replace(RECENT, flags=RECENT.flags - {cb.WARMUP_RESOLUTIONS})
    assert cb.cpu_server_warmup_args(wan, older, []) == []


def test_a_presets_own_warmup_setting_wins():
    preset = presets.get_preset("lingbot-world")
    filled = presets.Preset(**{**preset.__dict__, "prompt": "a walk", "unknown_fields": ()})
    inv = cb.build_invocation(filled, cb.RunOptions(), RECENT, sglang_cli=CLI, output_root=OUT, assets_dir=ASSETS,
                              caller_env={}, asset_filenames=FILENAMES)
    assert "--warmup-mode=off" in inv.argv
    assert "request" not in inv.argv and inv.argv.count("--warmup-mode") == 0


def test_bcg_adds_warmup_resolutions_frames_and_buckets():
    inv = build("longcat-image-edit", breakable_cuda_graph=True, bcg_text_buckets=(64, 256))
    tail = inv.argv[inv.argv.index("--enable-breakable-cuda-graph"):]
    assert tail[:6] == ("--enable-breakable-cuda-graph", "--warmup-resolutions", "1264x848", "--bcg-text-buckets",
                        "64", "256")
    video = build("wan-t2v", breakable_cuda_graph=True)
    tail = video.argv[video.argv.index("--enable-breakable-cuda-graph"):]
    assert tail[:5] == ("--enable-breakable-cuda-graph", "--warmup-resolutions", "1280x720", "--warmup-num-frames",
                        "81")
    hunyuan3d = build("hunyuan3d-shape", breakable_cuda_graph=True)
    assert "bcg.no_warmup_resolution" in dict(hunyuan3d.warnings)


def test_compile_comparator_never_on_force_eager_presets():
    assert "--enable-torch-compile" in build("qwen", torch_compile=True).argv
    minimax = presets.get_preset("minimax-h3-t2va")
    filled = presets.Preset(**{**minimax.__dict__, "prompt": "cats", "unknown_fields": ()})
    inv = cb.build_invocation(filled, cb.RunOptions(torch_compile=True), RECENT, sglang_cli=CLI, output_root=OUT,
                              assets_dir=ASSETS, caller_env={}, asset_filenames=FILENAMES)
    assert "--enable-torch-compile" not in inv.argv and "--enable-torch-compile=false" in inv.argv
    assert "compile.force_eager" in dict(inv.warnings)
    assert json.loads(inv.config_content)["num_inference_steps"] == 50


def test_config_file_is_per_run():
    a = build("hunyuan3d-shape", label="base", arm="A", round=1, position=0)
    b = build("hunyuan3d-shape", label="base", arm="B", round=1, position=1)
    assert a.config_path != b.config_path
    assert a.config_path == OUT / a.run_id / f"{a.run_id}.config.json"
    assert f"--config={a.config_path}" in a.argv
    assert json.loads(a.config_content) == {"paint_enable": False}
    assert build("qwen").config_path is None


def test_env_changes_setdefault_mirror_token_by_name_and_unset_step_override():
    caller = {"HF_TOKEN": HF_TOKEN_CANARY, "SGLANG_DIFFUSION_SYNC_STAGE_PROFILING": "0",
              "SGLANG_TEST_NUM_INFERENCE_STEPS": "1", "SGLANG_DISABLE_COSMOS3_GUARDRAILS": "0"}
    inv = build("cosmos3-edge-t2i", env=caller)
    assert inv.env_set == {"FLASHINFER_DISABLE_VERSION_CHECK": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert inv.env_copy == {"HUGGINGFACE_HUB_TOKEN": "HF_TOKEN"}
    assert inv.env_unset == ("SGLANG_TEST_NUM_INFERENCE_STEPS",)
    assert HF_TOKEN_CANARY not in json.dumps(inv.to_json())
    child = inv.child_env(caller)
    assert child["HUGGINGFACE_HUB_TOKEN"] == HF_TOKEN_CANARY and child["SGLANG_DIFFUSION_SYNC_STAGE_PROFILING"] == "0"
    assert "SGLANG_TEST_NUM_INFERENCE_STEPS" not in child and child["SGLANG_DISABLE_COSMOS3_GUARDRAILS"] == "0"
    fresh = build("cosmos3-edge-t2i")
    assert fresh.env_set["SGLANG_DISABLE_COSMOS3_GUARDRAILS"] == "1" and fresh.env_copy == {}
    assert "hf.token_missing" in dict(build("flux").warnings)
    assert build("flux", env={"HUGGINGFACE_HUB_TOKEN": "x"}).env_copy == {}


def test_run_ids_never_collide_across_labels_arms_and_slots():
    ids = {build("qwen", label=label, arm=arm, round=r, position=p).run_id
           for label in ("base", "baseline", "base-1") for arm in (None, "A", "B")
           for r, p in ((None, None), (0, 0), (0, 1), (1, 0))}
    assert len(ids) == 3 * 3 * 4
    base = build("qwen", label="base", arm="A", round=0, position=0)
    assert base.run_id == "qwen__base__A__r00p00"
    files = [f"{i}.perf.json" for i in ids] + [f"{i}.png" for i in ids]
    for label in ("base", "baseline", "base-1"):
        mine = [f for f in files if fnmatch.fnmatch(f, f"qwen__{label}__*") or fnmatch.fnmatch(f, f"qwen__{label}.*")]
        assert len(mine) == 2 * 3 * 4 and all(f.split(".")[0].split("__")[1] == label for f in mine)
    for run_id in ids:  # "<run id>.*" matches that run's files only
        assert [f for f in files if fnmatch.fnmatch(f, f"{run_id}.*")] == [f"{run_id}.perf.json", f"{run_id}.png"]


@pytest.mark.parametrize("options, code", [
    (dict(torch_compile=True, breakable_cuda_graph=True), "usage.conflicting_comparators"),
    (dict(bcg_text_buckets=(64,)), "usage.buckets_without_bcg"),
    (dict(breakable_cuda_graph=True, bcg_text_buckets=(0,)), "usage.bad_buckets"),
    (dict(warmup_steps=0), "usage.bad_warmup_steps"),
    (dict(component_residency=("dit",)), "usage.bad_component_residency"),
    (dict(component_residency=("dit=elsewhere",)), "usage.bad_component_residency"),
    (dict(warmup=False, warmup_mode="server"), "usage.rejected_combination"),
    (dict(label="my_label"), "usage.bad_label"),
    (dict(label="a/b"), "usage.bad_label"),
    (dict(label="base.1"), "usage.bad_label"),
    (dict(label="a" * 101), "usage.bad_label"),  # the dry run once took 5000; the real run failed on the folder name
    (dict(arm="A_1"), "usage.bad_label"),
])
def test_run_options_reject_bad_combinations(options, code):
    with pytest.raises(contract.UsageError) as info:
        build("qwen", **options)
    assert info.value.code == code and info.value.exit_code == 2


def test_local_model_must_be_resolved_by_the_caller():
    with pytest.raises(contract.PreconditionError) as info:
        cb.build_invocation(presets.get_preset("tiny-flux-cpu"), cb.RunOptions(), RECENT, sglang_cli=CLI,
                            output_root=OUT, assets_dir=ASSETS, caller_env={})
    assert info.value.code == "preset.local_model_unresolved"


def test_parse_cli_tokens_follows_the_reference_rules():
    assert argv_tokens.parse_cli_tokens(["--a=1", "--b", "2", "--c", "--d", "--e", "False", "loose", "--f=x=y"]) == {
        "a": "1", "b": "2", "c": "true", "d": "true", "e": "false", "f": "x=y"}


@pytest.mark.parametrize("args, fragment", [
    (["--torch-compile", "--breakable-cuda-graph"], "separate comparators"),
    (["--torch-compile", "--quality-bcg-matrix"], "--quality-bcg-matrix"),
    (["--bcg-text-buckets", "64"], "--bcg-text-buckets needs"),
    (["--cleanup-model-cache"], "--cleanup-model-cache needs --model-cache-root"),
    (["--seed-model-cache-root", "/hf"], "--seed-model-cache-root needs --model-cache-root"),
    (["--torch-compile", "--no-torch-compile"], "not allowed with"),
])
def test_cli_rejects_combinations_before_anything_runs(args, fragment, tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--dry-run", *args, "--json",
                     env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path)})
    assert run.returncode == 2 and run.document["error"]["code"].startswith("usage.")
    assert fragment in run.document["error"]["message"]
    assert not any(tmp_path.iterdir())  # nothing was created


def test_dry_run_plan_for_tiny_flux_cpu(tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "base", "--dry-run",
                     "--engine-capabilities", "recent", "--json", env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path)})
    assert run.returncode == 0
    doc = run.document
    assert doc["schema"] == "bench-plan.v1" and doc["refusals"] == [] and len(doc["runs"]) == 1
    plan = doc["runs"][0]
    assert plan["run_id"] == "tiny-flux-cpu__base" and plan["num_gpus"] == 0
    assert f"--model-path={tmp_path}/.cache/tiny-models/{tiny_model.transformers_tag()}/tiny-FLUX.1-dev" in plan["argv"]
    assert plan["artifacts"]["perf_dump_path"] == \
        f"{tmp_path}/outputs/diffusion_benchmarks/tiny-flux-cpu__base/tiny-flux-cpu__base.perf.json"
    assert plan["env_copy"] == {"HUGGINGFACE_HUB_TOKEN": "HF_TOKEN"}  # run_script sets HF_TOKEN
    assert [w["code"] for w in doc["warnings"]] == ["model.not_built"]
    assert not any(tmp_path.iterdir())  # a dry run creates nothing


def test_dry_run_matrix_has_twelve_abba_rows_with_buckets_only_on_bcg(tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "qwen", "--quality-bcg-matrix", "--rounds", "1",
                     "--bcg-text-buckets", "128", "--engine-capabilities", "recent", "--dry-run", "--json",
                     env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path)})
    runs = run.document["runs"]
    assert [tuple(r["run_id"].split("__")[2:]) for r in runs] == [
        (f"{m}-{q}", f"r01p{p:02d}") for q in ("exact", "lossless", "high")
        for p, m in enumerate(("eager", "bcg", "bcg", "eager"), start=1)]
    for r in runs:
        bcg = "--enable-breakable-cuda-graph" in r["argv"]
        assert bcg == r["run_id"].split("__")[2].startswith("bcg")
        assert ("--bcg-text-buckets" in r["argv"]) == bcg
        quality = r["run_id"].split("__")[2].split("-", 1)[1]
        assert f"--quality={quality}" in r["argv"]


@pytest.mark.engine
@expects(OLDER_RELEASE)
def test_dry_run_refusal_on_the_installed_engine_exits_3(installed, tmp_path):
    saved = tmp_path / "engine.json"
    saved.write_text(json.dumps(contract.envelope("engine.v1", "t", engine=installed.to_json(), cache=None)))
    run = run_script("bench_diffusion_denoise", "--model", "flux", "--dry-run", "--engine-capabilities", str(saved),
                     "--json")
    assert run.returncode == 3 and run.document["schema"] == "bench-plan.v1" and not run.document["ok"]
    assert run.document["refusals"][0]["code"] == "engine.flag_missing"
    assert "--component-residency" in run.document["refusals"][0]["message"]


def test_quality_levels_come_from_the_engine_and_the_report_records_the_level_run():
    assert RECENT.distinct_quality_levels == ("exact", "lossless", "high")  # extra-high is an alias, not a level
    exact = build("qwen", quality="exact")
    assert "--quality=exact" in exact.argv and exact.quality_level == "exact"
    alias = build("qwen", quality="extra-high")
    assert alias.quality == {"requested": "extra-high", "ran": "lossless", "source": alias.quality["source"]}
    assert "extra-high -> lossless" in alias.quality["source"]
    assert build("qwen").quality_level == "lossless"  # the default is pinned, so runs stay comparable
    with pytest.raises(contract.UsageError) as info:  # a second --quality would silently win: refused
        build("qwen", extra_args=("--quality", "exact"))
    assert info.value.code == "usage.duplicate_flag"
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", quality="ultra")
    assert info.value.code == "engine.quality_unsupported" and "exact|lossless|high|extra-high" in info.value.message


def test_per_component_and_pipeline_flags_are_accepted_with_a_warning():
    inv = build("qwen", extra_args=("--transformer-quantization", "fp8", "--component-attention-backends.transformer",
                                    "torch_sdpa", "--vae-config.some-new-field", "1"))
    warned = [m for c, m in inv.warnings if c == "engine.flag_model_dependent"]
    assert len(warned) == 3 and all("only known once the model loads" in m for m in warned)
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", extra_args=("--no-such-flag",))
    assert info.value.details["missing_flags"] == ["--no-such-flag"]


def test_first_class_engine_options_are_validated_against_the_probe():
    inv = build("qwen", warmup_mode="server", warmup_steps=2, performance_mode="manual",
                component_residency=("dit=resident", "vae=component-offload"))
    argv = list(inv.argv)
    assert argv[argv.index("--warmup-mode") + 1] == "server" and argv.count("--warmup-mode") == 1
    assert argv[argv.index("--warmup-steps") + 1] == "2" and argv[argv.index("--performance-mode") + 1] == "manual"
    assert argv[argv.index("--component-residency") + 1:][:2] == ["dit=resident", "vae=component-offload"]
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", performance_mode="turbo")
    assert info.value.code == "engine.choice_unsupported" and "manual|auto|speed|memory" in info.value.message
    older = dataclasses.replace(RECENT, flags=RECENT.flags - {"--performance-mode"})
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", older, performance_mode="manual")
    assert info.value.details["missing_flags"] == ["--performance-mode"]


def test_a_degraded_probe_refuses_with_its_reason_not_with_upgrade_advice():
    degraded = dataclasses.replace(RECENT, choices={}, degraded={
        "reason": "No module named 'tvm_ffi'", "missing_module": "tvm_ffi", "hint": "install apache-tvm-ffi"})
    with pytest.raises(contract.PreconditionError) as info:
        build("qwen", degraded)
    assert info.value.code == "engine.probe_degraded" and "install apache-tvm-ffi" in info.value.hint
    assert "newer" not in info.value.hint


@pytest.mark.engine
@expects(DEFAULT_RELEASE)
def test_every_matrix_argv_parses_with_the_installed_engines_own_parser(installed, tmp_path):
    """0.5.23's real generate parser (plus its unknown-argument handler for per-component flags) accepts every argv
    the builder emits for the quality x BCG matrix, flux A/B/B/A, video, image edit and BCG with buckets."""
    runs = []
    for model, extra in (("qwen", ["--quality-bcg-matrix", "--rounds", "1", "--bcg-text-buckets", "64", "128"]),
                         ("flux", ["--campaign", "abba", "--rounds", "1"]), ("wan-t2v", []), ("qwen-edit", []),
                         ("tiny-flux-cpu", ["--breakable-cuda-graph", "--warmup-mode", "server", "--warmup-steps",
                                            "1", "--performance-mode", "manual", "--component-residency",
                                            "all=resident"])):
        saved = tmp_path / "engine.json"
        saved.write_text(json.dumps(contract.envelope("engine.v1", "t", engine=installed.to_json(), cache=None)))
        run = run_script("bench_diffusion_denoise", "--model", model, *extra, "--dry-run", "--engine-capabilities",
                         str(saved), "--json", env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path)})
        assert run.returncode == 0, run.stdout[-2000:]
        runs += run.document["runs"]
    matrix = [r for r in runs if "-exact" in r["run_id"] or "-lossless" in r["run_id"] or "-high" in r["run_id"]]
    assert sorted({r["run_id"].split("__")[2] for r in matrix}) == sorted(
        f"{m}-{q}" for q in ("exact", "lossless", "high") for m in ("eager", "bcg"))
    check = tmp_path / "parse.py"
    check.write_text(PARSE_WITH_ENGINE)
    argvs = tmp_path / "argvs.json"
    argvs.write_text(json.dumps([r["argv"][r["argv"].index("generate") + 1:] if "generate" in r["argv"]
                                 else r["argv"][2:] for r in runs]))
    proc = subprocess.run([sys.executable, str(check), str(argvs)], capture_output=True, text=True, timeout=600,
                          env=engine_process.cpu_adapter_env(dict(os.environ)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == f"parsed={len(runs)}"


# Parses each argv with sglang's own generate parser, then hands the leftovers to ServerArgs' unknown-argument
# handler, exactly as `sglang generate` does; anything left over is an error.
PARSE_WITH_ENGINE = """
import argparse, json, sys
from sglang.multimodal_gen.runtime.entrypoints.cli.generate import add_multimodal_gen_generate_args
from sglang.multimodal_gen.runtime.server_args import ServerArgs
parser = argparse.ArgumentParser(allow_abbrev=False)
add_multimodal_gen_generate_args(parser)
argvs = json.load(open(sys.argv[1]))
for argv in argvs:
    argv = [a for a in argv if a != "--backend=sglang"] + ["--backend", "sglang"]
    _, unknown = parser.parse_known_args(argv)
    for extract in ("_extract_component_paths", "_extract_component_weights_paths",
                    "_extract_component_quantizations", "_extract_component_precisions",
                    "_extract_component_attention_backends"):
        if unknown and hasattr(ServerArgs, extract):
            _, unknown = getattr(ServerArgs, extract)(unknown)
    if unknown:
        sys.exit(f"unrecognized by the engine: {unknown} in {argv}")
print(f"parsed={len(argvs)}")
"""
