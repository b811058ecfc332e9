"""The command builder: every preset builds (or is refused clearly) against a current-main engine and the
installed 0.5.10.post1; argument order, warmup/BCG/compile rules, env, naming; rejected combinations."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from pathlib import Path

import pytest

from conftest import HF_TOKEN_CANARY, run_script
from sgl_diffusion_bench import assets, command_builder as cb, contract, engine_probe, presets

RECENT = engine_probe.recent_engine_capabilities()
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
    old = engine_probe.EngineCapabilities(
        version="0.5.10.post1", package_dir="/x", method="static_source",
        flags=RECENT.flags - {"--warmup-mode", "--quality", "--enable-breakable-cuda-graph", "--performance-mode"}
        | {"--warmup"}, choices={}, profiler_dir_env=("SGLANG_TORCH_PROFILER_DIR",), profiler_dir_env_source="source")
    inv = build("qwen", old)
    assert "--warmup" in inv.argv and "--warmup-mode" not in inv.argv
    assert not any(t.startswith("--quality") for t in inv.argv)
    assert ("engine.no_quality_levels" in dict(inv.warnings))
    assert "--warmup" not in build("qwen", old, warmup=False).argv


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
    (dict(quality="ultra"), "usage.bad_quality"),
    (dict(label="my_label"), "usage.bad_label"),
    (dict(label="a/b"), "usage.bad_label"),
    (dict(label="base.1"), "usage.bad_label"),
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
    assert cb.parse_cli_tokens(["--a=1", "--b", "2", "--c", "--d", "--e", "False", "loose", "--f=x=y"]) == {
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
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--dry-run", *args, "--json",
                     env={"SGLANG_DIFFUSION_SKILL_WORKDIR": str(tmp_path)})
    assert run.returncode == 2 and run.document["error"]["code"].startswith("usage.")
    assert fragment in run.document["error"]["message"]
    assert not any(tmp_path.iterdir())  # nothing was created


def test_dry_run_plan_for_tiny_flux_cpu(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "base", "--dry-run",
                     "--engine-capabilities", "recent", "--json", env={"SGLANG_DIFFUSION_SKILL_WORKDIR": str(tmp_path)})
    assert run.returncode == 0
    doc = run.document
    assert doc["schema"] == "bench-plan.v1" and doc["refusals"] == [] and len(doc["runs"]) == 1
    plan = doc["runs"][0]
    assert plan["run_id"] == "tiny-flux-cpu__base" and plan["num_gpus"] == 0
    assert f"--model-path={tmp_path}/.cache/tiny-models/tiny-FLUX.1-dev" in plan["argv"]
    assert plan["artifacts"]["perf_dump_path"] == \
        f"{tmp_path}/outputs/diffusion_benchmarks/tiny-flux-cpu__base/tiny-flux-cpu__base.perf.json"
    assert plan["env_copy"] == {"HUGGINGFACE_HUB_TOKEN": "HF_TOKEN"}  # run_script sets HF_TOKEN
    assert [w["code"] for w in doc["warnings"]] == ["model.not_built"]
    assert not any(tmp_path.iterdir())  # a dry run creates nothing


def test_dry_run_matrix_has_twelve_abba_rows_with_buckets_only_on_bcg(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "qwen", "--quality-bcg-matrix", "--rounds", "1",
                     "--bcg-text-buckets", "128", "--engine-capabilities", "recent", "--dry-run", "--json",
                     env={"SGLANG_DIFFUSION_SKILL_WORKDIR": str(tmp_path)})
    runs = run.document["runs"]
    assert [tuple(r["run_id"].split("__")[2:]) for r in runs] == [
        (f"{m}-{q}", f"r01p{p:02d}") for q in ("lossless", "extra-high", "high")
        for p, m in enumerate(("eager", "bcg", "bcg", "eager"), start=1)]
    for r in runs:
        bcg = "--enable-breakable-cuda-graph" in r["argv"]
        assert bcg == r["run_id"].split("__")[2].startswith("bcg")
        assert ("--bcg-text-buckets" in r["argv"]) == bcg
        quality = r["run_id"].split("__")[2].split("-", 1)[1]
        assert f"--quality={quality}" in r["argv"]


@pytest.mark.engine
def test_dry_run_refusal_on_the_installed_engine_exits_3(installed, tmp_path):
    saved = tmp_path / "engine.json"
    saved.write_text(json.dumps(contract.envelope("engine.v1", "t", engine=installed.to_json(), cache=None)))
    run = run_script("bench_diffusion_denoise", "--model", "flux", "--dry-run", "--engine-capabilities", str(saved),
                     "--json")
    assert run.returncode == 3 and run.document["schema"] == "bench-plan.v1" and not run.document["ok"]
    assert run.document["refusals"][0]["code"] == "engine.flag_missing"
    assert "--component-residency" in run.document["refusals"][0]["message"]
