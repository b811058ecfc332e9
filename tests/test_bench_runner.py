"""The runner's pure parts: campaign plans, per-request judging on recorded real evidence, artifact discovery,
reproduce commands. The real engine runs in test_bench_engine.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from conftest import HF_TOKEN_CANARY, TEST_FIXTURES, run_main
from sgl_diffusion_bench import contract, fileio, presets
from sgl_diffusion_bench.engine import capabilities
from sgl_diffusion_bench.campaign import campaign_context, design, run_record
from sgl_diffusion_bench.judging import log_gates, log_markers, media, request_path

CPU = TEST_FIXTURES / "engine-cpu-0.5.10"
MARKERS = log_markers.markers_for_version("0.5.10.post1")


def test_abba_rounds_follow_the_seed_pr_order():
    plan = design.plan("abba", rounds=2)
    assert [(s.round, s.position, s.arm) for s in plan.slots] == [
        (1, "A1", "eager"), (1, "B1", "bcg"), (1, "B2", "bcg"), (1, "A2", "eager"),
        (2, "A1", "eager"), (2, "B1", "bcg"), (2, "B2", "bcg"), (2, "A2", "eager")]
    assert plan.arms["bcg"].bcg and not plan.arms["eager"].bcg
    assert (plan.baseline_arm, plan.candidate_arm) == ("eager", "bcg")


def test_aa_and_ab_and_matrix_plans():
    aa = design.plan("aa", rounds=2, quality="lossless")
    same = lambda arm: {k: v for k, v in arm.to_json().items() if k not in ("letter", "description")}  # noqa: E731
    assert len(aa.slots) == 8 and same(aa.arms["a"]) == same(aa.arms["a-again"])
    ab = design.plan("ab", rounds=1, arm_b_args=["--attention-backend", "fa"])
    assert ab.arms["b"].extra_args == ("--attention-backend", "fa") and ab.arms["a"].extra_args == ()
    matrix = design.plan("matrix", rounds=1, engine_qualities=("lossless", "extra-high", "high"))
    assert len(matrix.slots) == 12 and [s.arm for s in matrix.slots[:4]] == [
        "eager-lossless", "bcg-lossless", "bcg-lossless", "eager-lossless"]
    with pytest.raises(contract.PreconditionError):
        design.plan("matrix", engine_qualities=None)  # 0.5.10.post1: no quality levels
    with pytest.raises(contract.UsageError):
        design.plan("ab")
    with pytest.raises(contract.UsageError):
        design.plan("aa", arm_b_args=["--x"])


def _verdict(scenario: str, **kw) -> log_gates.GateVerdict:
    return log_gates.scan_log((CPU / scenario / "log.txt").read_text(), MARKERS, require_native=True, **kw)


def _outputs(tmp_path: Path, stem: str) -> list[Path]:
    png = tmp_path / f"{stem}.png"
    Image.new("RGB", (64, 64), (1, 2, 3)).save(png)  # outputs are opened, so it must be a real image
    return [png]


def test_a_native_run_with_artifacts_is_valid(tmp_path):
    judged = request_path.judge_request(verdict=_verdict("native-ok"), returncode=0, stop_reason=None,
                                        perf_dump_path=CPU / "native-ok" / "perf.json",
                                        output_paths=_outputs(tmp_path, "x"), memory_kind="process_rss")
    assert judged.status == "valid", judged.reasons
    assert judged.perf["memory_kind"] == "process_rss" and len(judged.perf["denoise_steps_ms"]) == 2
    assert judged.outputs[0]["sha256"] == fileio.sha256_file(tmp_path / "x.png")


@pytest.mark.parametrize("scenario", ["gen-failed-rc0-b5-off", "gen-failed-rc0-b6-off"])
def test_exit_code_zero_without_output_is_invalid(scenario, tmp_path):
    judged = request_path.judge_request(verdict=_verdict(scenario), returncode=0, stop_reason=None,
                                        perf_dump_path=tmp_path / "missing.json", output_paths=[],
                                        memory_kind="process_rss")
    assert judged.status == "invalid"
    codes = {r.split(":")[0] for r in judged.reasons}
    assert {"artifacts.no_perf_dump", "artifacts.no_output"} <= codes
    assert any(c.startswith("engine.") for c in codes), judged.reasons  # the log's own failure lines count too


def test_a_diffusers_fallback_is_invalid_even_with_every_artifact(tmp_path):
    judged = request_path.judge_request(verdict=_verdict("fallback-auto"), returncode=0, stop_reason=None,
                                        perf_dump_path=CPU / "fallback-auto" / "perf.json",
                                        output_paths=_outputs(tmp_path, "y"), memory_kind="process_rss")
    assert judged.status == "invalid"
    assert any(r.startswith("backend.diffusers_fallback") for r in judged.reasons)


def test_a_malformed_perf_dump_invalidates_with_its_reason(tmp_path):
    bad = tmp_path / "perf.json"
    bad.write_text('{"total_duration_ms": "fast", "steps": []}')
    judged = request_path.judge_request(verdict=_verdict("native-ok"), returncode=0, stop_reason=None,
                                        perf_dump_path=bad, output_paths=_outputs(tmp_path, "z"), memory_kind="device")
    assert judged.status == "invalid" and any(r.startswith("perf_dump.invalid") for r in judged.reasons)


def test_timeouts_and_nonzero_exits_are_failures(tmp_path):
    judged = request_path.judge_request(verdict=_verdict("native-ok"), returncode=-15, stop_reason="timeout",
                                        perf_dump_path=tmp_path / "none", output_paths=[], memory_kind="device")
    assert judged.status == "failed" and judged.reasons[0].startswith("engine.timeout")
    judged = request_path.judge_request(verdict=_verdict("unresolved-backend-sglang"), returncode=1, stop_reason=None,
                                        perf_dump_path=tmp_path / "none", output_paths=[], memory_kind="device")
    assert judged.status == "failed" and any(r.startswith("engine.exit_code") for r in judged.reasons)


def test_outputs_of_one_label_never_match_another(tmp_path):
    for name in ("flux_base_a_r01p01.png", "flux_base_a_r01p01_1.png", "flux_baseline_a_r01p01.png",
                 "flux_base_a_r01p01.json", "flux_base_a_r01p010.png"):
        (tmp_path / name).write_bytes(b"x")
    found = [p.name for p in request_path.find_outputs(tmp_path, "flux_base_a_r01p01")]
    assert found == ["flux_base_a_r01p01.png", "flux_base_a_r01p01_1.png"]


def test_reproduce_command_names_the_token_variable_never_its_value():
    command = run_record.reproduce_command(["sglang", "generate", "--prompt=a cat"],
                                             {"FLASHINFER_DISABLE_VERSION_CHECK": "1"},
                                             {"HUGGINGFACE_HUB_TOKEN": "HF_TOKEN"})
    assert 'HUGGINGFACE_HUB_TOKEN="$HF_TOKEN"' in command and "'--prompt=a cat'" in command
    assert HF_TOKEN_CANARY not in command


def test_port_flags_only_where_the_engine_takes_them():
    recent = capabilities.recent_engine_capabilities()
    assert campaign_context.port_args_for(recent) == [] or all(recent.accepts_flag(f) for f in
                                                          campaign_context.port_args_for(recent)[::2])


def test_campaign_dry_run_lists_every_cell_with_distinct_files():
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--rounds", "2",
                   "--label", "plan", "--engine-capabilities", "recent", "--dry-run", "--json")
    runs = run.document["runs"]
    assert run.returncode == 0 and len(runs) == 8
    assert len({r["artifacts"]["run_dir"] for r in runs}) == 8
    assert len({r["artifacts"]["output_file_stem"] for r in runs}) == 8
    assert all("__" not in r["artifacts"]["output_file_stem"] for r in runs)  # sglang collapses '__' when saving


@pytest.mark.parametrize("args, code", [
    (["--campaign", "abba", "--breakable-cuda-graph"], "usage.rejected_combination"),
    (["--quality-bcg-matrix", "--campaign", "aa"], "usage.rejected_combination"),
    (["--campaign", "ab"], "usage.ab_needs_arms"),
    (["--campaign", "aa", "--rounds", "0"], "usage.invalid_arguments"),  # refused by argparse, before planning
    (["--campaign", "aa", "--rounds", "51"], "usage.invalid_arguments"),
    (["--campaign", "aa", "--threshold-pct", "nan"], "usage.invalid_arguments"),
])
def test_bad_campaigns_are_usage_errors(args, code):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", *args, "--engine-capabilities",
                   "recent", "--dry-run", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == code


def test_bcg_campaign_on_the_installed_engine_is_refused_before_anything_runs(tmp_path):
    caps = tmp_path / "caps.json"
    old = capabilities.recent_engine_capabilities()
    import dataclasses
    no_bcg = dataclasses.replace(old, version="0.5.10.post1", flags=old.flags - {"--enable-breakable-cuda-graph"})
    caps.write_text(contract.dumps(contract.envelope("engine.v1", "test", engine=no_bcg.to_json(), cache=None)))
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "abba", "--label", "r",
                   "--engine-capabilities", str(caps), "--output-dir", str(tmp_path / "out"), "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "engine.flag_missing"
    assert "--enable-breakable-cuda-graph" in run.document["error"]["message"]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_a_foreign_gpu_process_at_a_cell_boundary_makes_the_cell_contended():
    foreign = [{"gpu_uuid": "GPU-a", "pid": 4242, "used_memory_bytes": 1 << 30}]
    assert request_path.with_contention("valid", [], [], foreign) == (
        "contended", ["gpu.contended: foreign GPU process(es) [4242] at the cell boundaries"])
    status, reasons = request_path.with_contention("invalid", ["artifacts.no_output: x"], foreign, [])
    assert status == "invalid" and len(reasons) == 2  # the worse status stays, the sighting is still recorded
    assert request_path.with_contention("valid", [], [], []) == ("valid", [])


def test_the_report_schema_types_gates_and_gpus():
    import copy
    import json

    doc = json.loads((TEST_FIXTURES / "gpu-h200-0.5.10" / "bench-report.json").read_text())
    assert contract.validation_errors(doc) == []
    broken = copy.deepcopy(doc)
    del broken["cells"][0]["gates"]["log"]["valid"]
    assert contract.validation_errors(broken)
    broken = copy.deepcopy(doc)
    broken["plan"]["gpus"]["leased_uuids"] = None
    assert contract.validation_errors(broken)


def test_outputs_are_the_media_kinds_the_task_produces(tmp_path):
    for name in ("cat_base.png", "cat_base.gif", "cat_base.mp4", "cat_base.wav", "cat_base.json"):
        (tmp_path / name).write_bytes(b"x")
    image, others = media.split_outputs(tmp_path, "cat_base", "t2i")
    assert [p.name for p in image] == ["cat_base.png"]  # a .gif is never an image preset's output ...
    assert [p.name for p in others] == ["cat_base.gif", "cat_base.mp4", "cat_base.wav"]  # ... only listed
    video, _ = media.split_outputs(tmp_path, "cat_base", "t2v")
    assert [p.name for p in video] == ["cat_base.gif", "cat_base.mp4"]
    sound, _ = media.split_outputs(tmp_path, "cat_base", "t2va")
    assert [p.name for p in sound] == ["cat_base.gif", "cat_base.mp4", "cat_base.wav"]
    every_task = {p.task for p in presets.load_presets()}
    assert every_task <= set(media.TASK_KINDS)  # every preset's task names its media


def test_every_schema_that_names_campaign_modes_names_the_planner_s():
    """A new campaign kind is design.py (MODES and its plan) plus the mode enums of the report and sweep-spec schemas;
    this fails on a schema left behind, so the new kind cannot be planned and then refused by its own report."""
    schemas = Path(__file__).resolve().parents[1] / "schemas"
    found = {}
    for name in ("bench-report.v1", "sweep-spec.v1", "bench-plan.v1"):
        stack = [json.loads((schemas / f"{name}.schema.json").read_text(encoding="utf-8"))]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                enum = node.get("enum")
                if isinstance(enum, list) and "abba" in enum:
                    found.setdefault(name, []).append(tuple(enum))
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    assert {"bench-report.v1", "sweep-spec.v1"} <= set(found)
    for name, enums in found.items():
        assert all(set(e) == set(design.MODES) for e in enums), (name, enums)
