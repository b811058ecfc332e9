"""What a run was asked to do and what it did: BCG gates keyed on each run's engine flags, duplicate flags refused,
a local model directory and request overrides, and the engine's effective settings and warm-up cost read from its
real logs (H200 runs of sglang 0.5.23 and 0.5.10.post1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import capabilities
from sgl_diffusion_bench.campaign import bench_runner, campaign_context, design, request_setup, run_record
from sgl_diffusion_bench.judging import engine_args, log_gates, log_markers
from sgl_diffusion_bench.results import report

H23 = TEST_FIXTURES / "gpu-h200-0.5.23"
H10 = TEST_FIXTURES / "gpu-h200-0.5.10"
RECENT = ("--engine-capabilities", "recent")


def facts_of(log: Path, version: str) -> dict:
    facts = engine_args.EngineRunFacts(log_markers.markers_for_version(version))
    for line in log.read_text(encoding="utf-8").splitlines(keepends=True):
        facts.feed(line)
    return facts.to_json()


def test_effective_settings_and_warmups_from_real_0523_logs():
    bcg = facts_of(H23 / "direct-pair" / "bcg" / "log.txt", "0.5.23")
    assert bcg["server_args"]["warmup_mode"] == "server" and bcg["server_args"]["enable_breakable_cuda_graph"]
    assert bcg["server_args"]["attention_backend"] == "torch_sdpa"
    assert bcg["server_args"]["component_residency"] == {"all": "resident"}
    # BCG makes the engine run a 50-step server warm-up at the captured resolution: one request, 56 s.
    assert bcg["warmups"] == [{"kind": "server warmup req", "resolution": "1024x1024", "steps": 50, "of_steps": 50,
                               "seconds": 56.12}]
    eager = facts_of(H23 / "direct-pair" / "eager" / "log.txt", "0.5.23")
    assert eager["server_args"]["warmup_mode"] == "request" and not eager["server_args"]["enable_breakable_cuda_graph"]
    assert eager["warmups"] == [{"kind": "warmup req", "resolution": "1024x1024", "steps": 1, "of_steps": 8,
                                 "seconds": 1.38}]


def test_effective_settings_and_warmups_from_a_real_0510_log():
    facts = facts_of(H10 / "cell-a-r01p01.engine.log", "0.5.10.post1")
    assert facts["server_args"]["warmup"] is True and "warmup_mode" not in facts["server_args"]
    assert facts["server_args"]["dit_cpu_offload"] is False and facts["server_args"]["num_gpus"] == 1
    assert facts["warmups"] == [{"kind": "warmup req", "resolution": None, "steps": None, "of_steps": None,
                                 "seconds": 1.71}]
    assert engine_args.EngineRunFacts().parse_server_args("server_args: {not json") is None


def test_the_warm_up_lines_a_release_prints_are_its_fact_markers():
    """The patterns are data with release ranges: 0.5.10.post1 has no tqdm warm-up summary, so its facts do not read
    one; without a version (a log of unknown origin) every release's patterns apply."""
    line = ("Warmup requests: 100%|#| 1/1 [00:56<00:00, 56.69s/req, server warmup req (1024x1024, 50 steps), "
            "last=56.12s]")
    assert engine_args.EngineRunFacts(log_markers.markers_for_version("0.5.10.post1")).parse_warmup(line) is None
    for facts in (engine_args.EngineRunFacts(log_markers.markers_for_version("0.5.23")), engine_args.EngineRunFacts()):
        assert facts.parse_warmup(line)["seconds"] == 56.12
    gate = log_gates.RequestLogGate(log_markers.markers_for_version("0.5.23"), bcg_expected=False)
    gate.feed(line)
    gate.feed('server_args: {"num_gpus": 1}')
    blank = log_gates.RequestLogGate(log_markers.markers_for_version("0.5.23"), bcg_expected=False)
    blank.feed("an unremarkable line")
    blank.feed("another one")
    assert gate.verdict().to_json() == blank.verdict().to_json()  # facts are not gated


@pytest.mark.parametrize("argv, expected", [
    (["--enable-breakable-cuda-graph"], True), (["--enable-breakable-cuda-graph", "--x"], True),
    (["--enable-breakable-cuda-graph=false"], False), (["--enable-breakable-cuda-graph", "false"], False),
    (["--enable-breakable-cuda-graph", "--enable-breakable-cuda-graph=0"], False),
    (["--warmup-mode", "server"], False)])
def test_requests_bcg_reads_the_flag_as_the_engine_would(argv, expected):
    assert engine_args.requests_bcg(argv) is expected


def test_ab_arm_with_bcg_flags_is_gated_as_bcg(tmp_path):
    """--campaign ab with BCG in arm B's args: the arm reports BCG on, and its gate wants a capture."""
    preset = presets.get_preset("tiny-flux-gpu")
    plan = design.plan("ab", rounds=1, arm_b_args=["--enable-breakable-cuda-graph"])
    ctx = campaign_context.CampaignContext.build(
        preset, plan, campaign_context.CampaignSettings(label="ab", output_root=tmp_path),
        capabilities.recent_engine_capabilities(), model_path=str(tmp_path / "m"), caller_env={})
    runner = bench_runner.CampaignRunner(ctx, asset_filenames={})
    arms = run_record.arms_as_run(plan, runner.invocations)
    assert arms["b"]["bcg"] is True and arms["a"]["bcg"] is False
    by_arm = {slot.arm: inv for slot, inv in zip(plan.slots, runner.invocations, strict=True)}
    failed_log = (H23 / "bcg-capture-failed" / "log.txt").read_text(encoding="utf-8")
    captured_log = (H23 / "direct-pair" / "bcg" / "log.txt").read_text(encoding="utf-8")
    for log, valid in ((failed_log, False), (captured_log, True)):
        gate = engine_args.log_gate(ctx.markers, by_arm["b"].argv, quality=by_arm["b"].quality_level)
        for line in log.splitlines():
            gate.feed(line)
        verdict = gate.verdict()
        assert verdict.valid is valid and verdict.bcg.expected
        if not valid:
            assert "bcg.no_capture" in verdict.reason_codes()
    eager_gate = engine_args.log_gate(ctx.markers, by_arm["a"].argv, quality=by_arm["a"].quality_level)
    for line in captured_log.splitlines():
        eager_gate.feed(line)
    assert "bcg.unexpected_capture" in eager_gate.verdict().reason_codes()  # arm A asked for no BCG


@pytest.mark.parametrize("extra, flag", [
    ("--num-inference-steps=8", "--num-inference-steps"), ("--model-path /x", "--model-path"),
    ("--warmup-resolutions 1024x1024", "--warmup-resolutions"), ("--dit-cpu-offload true", "--dit-cpu-offload"),
    ("--attention-backend a --attention-backend b", "--attention-backend")])
def test_a_flag_given_twice_is_refused_before_anything_runs(extra, flag, tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-gpu", "--campaign", "abba", "--rounds", "1",
                   f"--extra-args={extra}", *RECENT, "--dry-run", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.duplicate_flag"
    assert flag in run.document["error"]["details"]["duplicates"]
    assert flag in run.document["error"]["hint"]


def test_a_collision_names_the_arm_option_it_came_from_and_offers_the_override():
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-gpu", "--campaign", "ab", "--rounds", "1",
                     "--arm-b-args=--dit-cpu-offload true", *RECENT, "--dry-run", "--json")
    error = run.document["error"]
    assert run.returncode == 2 and error["code"] == "usage.duplicate_flag"
    assert error["details"]["duplicates"] == {"--dit-cpu-offload": ["preset tiny-flux-gpu", "--arm-b-args"]}
    assert "--arm-b-args" in error["message"] and "--extra-args" not in error["message"]
    assert "--arm-b-override-flag dit-cpu-offload=VALUE" in error["hint"]
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-gpu", "--extra-args=--vae-cpu-offload true",
                     *RECENT, "--dry-run", "--json")
    assert run.returncode == 2 and "(by preset tiny-flux-gpu and --extra-args)" in run.document["error"]["message"]
    assert "--arm-b-override-flag vae-cpu-offload=VALUE" in run.document["error"]["hint"]


def test_an_arm_override_changes_the_presets_flag_in_that_arm_only():
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-gpu", "--campaign", "ab", "--rounds", "1",
                     "--arm-b-override-flag", "dit-cpu-offload=true", "--arm-a-override-flag=--pin-cpu-memory=true",
                     *RECENT, "--dry-run", "--json")
    assert run.returncode == 0, run.stderr
    for r in run.document["runs"]:
        argv = r["argv"]
        assert argv.count("--dit-cpu-offload") == 1 and argv.count("--pin-cpu-memory") == 1  # replaced, not added
        arm_b = "__b__" in r["run_id"]
        assert argv[argv.index("--dit-cpu-offload") + 1] == ("true" if arm_b else "false")
        assert argv[argv.index("--pin-cpu-memory") + 1] == ("false" if arm_b else "true")
    arms = design.plan("ab", arm_b_overrides=["dit-cpu-offload=true"]).to_json()["arms"]  # as the report has them
    assert arms["b"]["flag_overrides"] == ["--dit-cpu-offload=true"] and "replacing" in arms["b"]["description"]
    assert "flag_overrides" not in arms["a"]


@pytest.mark.parametrize("args, says", [
    (["--campaign", "ab", "--arm-b-override-flag", "attention-backend=fa"], "does not set --attention-backend"),
    (["--campaign", "ab", "--arm-b-override-flag", "dit-cpu-offload"], "is not FLAG=VALUE"),
    (["--campaign", "ab", "--arm-b-override-flag", "a=1", "--arm-b-override-flag=--a=2"], "names --a twice"),
    (["--campaign", "aa", "--arm-b-override-flag", "dit-cpu-offload=true"], "only apply to --campaign ab")])
def test_a_bad_arm_override_is_refused_naming_its_option(args, says):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-gpu", "--rounds", "1", *args, *RECENT,
                     "--dry-run", "--json")
    assert run.returncode == 2 and says in run.document["error"]["message"], run.document
    assert run.document["error"]["code"] in ("usage.bad_flag_override", "usage.arm_args_need_ab")


def test_local_model_path_and_overrides_reach_the_command(tmp_path):
    model = tmp_path / "FLUX.1-dev"
    model.mkdir()
    (model / "model_index.json").write_text("{}")
    run = run_main("bench_diffusion_denoise", "--model", "flux-1gpu", "--model-path", str(model), "--override",
                   "num_inference_steps=28", "--campaign", "abba", "--rounds", "1",
                   "--extra-args=--attention-backend torch_sdpa", *RECENT, "--dry-run", "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["warnings"] == [] and len(doc["runs"]) == 4
    for r in doc["runs"]:
        argv = r["argv"]
        assert f"--model-path={model}" in argv and "--num-inference-steps=28" in argv and r["num_gpus"] == 1
        assert "--num-gpus=2" not in argv and "--tp-size=2" not in argv
        assert not any(w["code"] == "hf.token_missing" for w in r["warnings"])  # a local directory needs no token
    bcg = [r["argv"] for r in doc["runs"] if "--enable-breakable-cuda-graph" in r["argv"]]
    assert len(bcg) == 2 and all(a[a.index("--warmup-resolutions") + 1] == "1024x1024" for a in bcg)


def test_a_model_directory_not_named_as_the_architecture_is_flagged(tmp_path):
    model = tmp_path / "my-flux"
    model.mkdir()
    run = run_main("bench_diffusion_denoise", "--model", "flux-1gpu", "--model-path", str(model), *RECENT,
                   "--dry-run", "--json")
    codes = [w["code"] for w in run.document["warnings"]]
    assert run.returncode == 0 and codes == ["model.path_name", "model.path_missing"]


@pytest.mark.parametrize("override", ["steps=28", "num_inference_steps=0", "width=big", "seed=-1", "prompt="])
def test_bad_overrides_are_usage_errors(override):
    run = run_main("bench_diffusion_denoise", "--model", "flux-1gpu", "--override", override, *RECENT, "--dry-run",
                   "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.bad_override"


def test_a_real_run_refuses_a_model_path_without_a_pipeline(tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--model-path", str(tmp_path), *RECENT,
                   "--output-dir", str(tmp_path / "out"), "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "input.model_path_not_a_pipeline"


def test_report_header_says_what_ran():
    """The Markdown names the model, the overrides, the extra args, each arm's effective engine settings and the
    warm-up each cell paid, from the document alone."""
    bcg = facts_of(H23 / "direct-pair" / "bcg" / "log.txt", "0.5.23")
    eager = facts_of(H23 / "direct-pair" / "eager" / "log.txt", "0.5.23")
    doc = {"campaign": {"mode": "abba", "rounds": 1, "label": "x", "preset": "flux-1gpu", "baseline_arm": "eager",
                        "candidate_arm": "bcg", "order": [],
                        "arms": {"eager": {"letter": "A", "description": "eager", "extra_args": [], "quality": None,
                                           "bcg": False},
                                 "bcg": {"letter": "B", "description": "BCG", "extra_args": [], "quality": None,
                                         "bcg": True}}},
           "engine": {"request": {"model": "/srv/m/FLUX.1-dev", "num_gpus": 1, "overrides": {"num_inference_steps": 28},
                                  "extra_args": ["--attention-backend", "torch_sdpa"]},
                      "effective": {"eager": eager["server_args"], "bcg": bcg["server_args"]},
                      "warmups": {"bcg": {"requests": 2, "seconds": 112.24, "per_cell": [
                          {"cell": 1, "warmups": bcg["warmups"]}, {"cell": 2, "warmups": bcg["warmups"]}]}}},
           "cells": [], "summary": {"arms": {}, "comparison": None, "output_quality": None}, "plan": {}}
    text = report.render_markdown(doc, plot_name=None)
    assert ("- Model `/srv/m/FLUX.1-dev` on 1 GPU(s); overrides: num_inference_steps=28; extra engine args: "
            "`--attention-backend torch_sdpa`.") in text
    assert "- eager: attention torch_sdpa; warm-up mode request;" in text
    assert ("Warm-up by the engine itself: 2 request(s) over 2 cell(s), 112.2 s in all (56.1 s each, not in E2E): "
            "server warmup req (1024x1024, 50 step(s))") in text
    assert "residency all=resident" in text and "BCG on" in text


def test_bench_report_schema_accepts_the_engine_run_block():
    import json

    doc = json.loads((H10 / "bench-report.json").read_text())
    doc["cells"][0]["engine_run"] = facts_of(H10 / "cell-a-r01p01.engine.log", "0.5.10.post1")
    assert contract.validation_errors(doc) == []
    doc["cells"][0]["engine_run"]["warmups"][0]["seconds"] = -1
    assert contract.validation_errors(doc)


def test_bcg_replay_engines_carry_the_overrides_and_extra_args(tmp_path):
    """The replay's engines get what the caller asked for (on the H200 they lost --attention-backend torch_sdpa,
    picked FlashAttention 3 that is not installed, and every request failed)."""
    from sgl_diffusion_bench.campaign import bcg_replay

    model = str(tmp_path / "FLUX.1-dev")
    preset = presets.customised([presets.get_preset("flux-1gpu")], ["num_inference_steps=8"], model)[0]
    replay = bcg_replay.Replay(preset, capabilities.recent_engine_capabilities(), label="r", output_root=tmp_path,
                               cli_prefix=["sglang", "generate"], python="python3",
                               engine_env=request_setup.EngineEnv.of({}, use_cpu_adapter=False), model_path=model,
                               bcg=True, timeout_s=10, extra_args=("--attention-backend", "torch_sdpa"))
    for name, (invocation, with_bcg) in replay.configs.items():
        argv = invocation.argv
        assert argv[argv.index("--attention-backend") + 1] == "torch_sdpa" and "--num-inference-steps=8" in argv
        assert engine_args.requests_bcg(argv) is with_bcg is (name == "bcg")
