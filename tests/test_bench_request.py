"""The one assembly path for campaigns: the CLI and the evidence folder's campaign step build the same frozen
BenchRequest and go through bench_request, so what a folder's reproduce command runs is what the step ran."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import capabilities, model_access
from sgl_diffusion_bench.campaign import bench_request
from sgl_diffusion_bench.cli import bench
from sgl_diffusion_bench.evidence import request, steps


def _cli_request(*argv: str) -> bench_request.BenchRequest:
    return bench.request_from(bench.build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("changes", [{}, {"bcg": True, "candidate_args": "",
                                          "common_args": "--attention-backend torch_sdpa"}])
def test_the_evidence_step_runs_what_its_reproduce_command_runs(tmp_path, monkeypatch, changes):
    evidence = request.build(**{**dict(model="tiny-flux-cpu", model_path=None, overrides=["num_inference_steps=2"],
                                       bcg=False, baseline_args="", candidate_args="--log-level info",
                                       threshold_pct=2.0, samples=2, budget_requests=16, model_cache_root=None),
                                **changes})
    caps = capabilities.recent_engine_capabilities()
    root = tmp_path.resolve()
    ctx = steps.Context(root=root, request=evidence, preset=presets.customised(
        [presets.get_preset("tiny-flux-cpu")], ["num_inference_steps=2"], None)[0], caps=caps)
    step = steps.campaign_runner(ctx)
    monkeypatch.chdir(root)  # the command names its output dir relative to the folder
    command = shlex.split(steps.campaign_command(ctx))[2:]
    [(_, cli)] = [(p, bench_request.new_runner(_cli_request(*command), p, caps, build_model=False))
                  for p in _cli_request(*command).presets]
    assert cli.plan == step.plan and cli.settings == step.settings
    assert [inv.argv for inv in cli.invocations] == [inv.argv for inv in step.invocations]
    assert len(step.invocations) == 4 * evidence.budget_rounds * 2  # A1 B1 B2 A2 slots x samples


def test_the_request_is_frozen_and_an_until_verdict_campaign_plans_its_budget():
    req = _cli_request("--model", "tiny-flux-cpu", "--campaign", "ab", "--arm-b-args", "--log-level 'info'",
                       "--until-verdict", "--budget-rounds", "6", "--rounds", "3", "--arm-a-override-flag", "x=1")
    assert req.shape == bench_request.CampaignShape(mode="ab", rounds=6, arm_b_args=("--log-level", "info"),
                                                    arm_a_overrides=("x=1",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.model_path = "/elsewhere"  # type: ignore[misc]
    assert _cli_request("--quality-bcg-matrix").shape.mode == "matrix"


def test_a_degraded_probe_refuses_the_matrix_and_a_gated_model_is_checked_once_per_preset(monkeypatch):
    degraded = dataclasses.replace(capabilities.recent_engine_capabilities(), quality_levels=(),
                                   degraded={"reason": "no sglang", "missing_module": "sglang", "hint": "install it"})
    with pytest.raises(contract.PreconditionError) as refused:
        bench_request.plan_campaign(_cli_request("--model", "tiny-flux-cpu", "--quality-bcg-matrix"), degraded)
    assert refused.value.code == "engine.probe_degraded"

    calls = []
    real = model_access.require
    monkeypatch.setattr(model_access, "require", lambda *a, **k: calls.append(a[0].name) or real(*a, **k))
    req = _cli_request("--model", "flux", "--engine-capabilities", "recent", "--label", "x",
                       "--output-dir", "/nonexistent/o")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", "/nonexistent/hf")
    with pytest.raises(contract.PreconditionError) as gated:
        bench_request.assemble(req, capabilities.recent_engine_capabilities)
    assert gated.value.code == "hf.gated_no_token" and calls == ["flux"]
