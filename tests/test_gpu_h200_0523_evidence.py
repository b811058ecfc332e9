"""Evidence from sglang 0.5.23 on a real H200: eager vs breakable CUDA graphs on a FLUX.1-dev-shaped model (fixtures
in tests/fixtures/gpu-h200-0.5.23/, see its README). These tests re-run our own trace analysis and log gate on the
engine's real traces and logs and assert what the tools conclude from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.judging import log_gates, log_markers, perf_dump
from sgl_diffusion_bench.trace.analyses.stages import analyze_stages
from sgl_diffusion_bench.trace.load import load_trace

H200 = TEST_FIXTURES / "gpu-h200-0.5.23"
PROFILE = H200 / "profile-pair"


def trace_of(arm: str) -> Path:
    (path,) = (PROFILE / arm).glob("*.trace.json.gz")
    return path


@pytest.fixture(scope="module")
def traces():
    return {arm: load_trace(trace_of(arm)) for arm in ("eager", "bcg")}


def test_0523_traces_have_no_step_ranges_so_steps_come_from_the_loop_method_frames(traces):
    for trace in traces.values():
        names = set(trace.names)
        assert not any(n.startswith("ProfilerStep#") or n.startswith("denoising_step_") for n in names
                       if n in {trace.names[i] for i in trace.annotations.name})
        assert "STAGE denoising_stage" in names  # the only ranges 0.5.23 writes
        assert trace.step_source == "step_frames"
        assert [s.label for s in trace.steps] == ["denoising_step_0", "denoising_step_1"]  # a 2-step request


def test_per_step_launch_counts_eager_vs_bcg(traces):
    eager = analyze_stages(traces["eager"])
    bcg = analyze_stages(traces["bcg"])
    assert [(s["host_launches"], s["graph_launches"], s["kernels"]) for s in eager["steps"]] == [(1136, 0, 1136)] * 2
    # BCG: 58 captured segments replayed per step, 62 eager kernels launched between them.
    assert [(s["host_launches"], s["graph_launches"], s["kernels"]) for s in bcg["steps"]] == [(62, 58, 1212)] * 2
    for doc in (eager, bcg):
        assert doc["denoise"]["stage"] == "DenoisingStage" and doc["denoise"]["steps"] == 2
        assert all(s["in_denoise"] for s in doc["steps"]) and doc["denoise"]["partial_steps"] == []
    assert eager["denoise"]["per_step"]["host_launches"] == 1136
    assert bcg["denoise"]["per_step"]["graph_launches"] == 58


def test_compare_cli_gives_the_seed_pr_profile_table_with_per_step_rows(tmp_path):
    run = run_main("analyze_trace", "compare", str(trace_of("eager")), str(trace_of("bcg")), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    metrics = {m["key"]: m for m in doc["metrics"]}
    assert doc["scope"] == "DenoisingStage" and doc["steps"] == {"a": 2, "b": 2}
    assert (metrics["gpu_kernels"]["a"], metrics["gpu_kernels"]["b"]) == (2378, 2530)
    assert (metrics["host_kernel_launches"]["a"], metrics["host_kernel_launches"]["b"]) == (2378, 230)
    assert (metrics["graph_launches"]["a"], metrics["graph_launches"]["b"]) == (0, 116)
    assert (metrics["captured_segments_per_step"]["a"], metrics["captured_segments_per_step"]["b"]) == (0, 58)
    assert (metrics["host_kernel_launches_per_step"]["a"], metrics["host_kernel_launches_per_step"]["b"]) == (1136, 62)
    assert metrics["cpu_stage_ms"]["b"] < metrics["cpu_stage_ms"]["a"]  # the host saving BCG buys
    assert "| Captured segments per step | 0 | 58 |" in doc["markdown"]
    # What the bundle concluded on the machine before per-step figures existed: 0 steps, per-step rows n/a.
    recorded = json.loads((PROFILE / "trace_compare.json").read_text(encoding="utf-8"))
    assert recorded["steps"] == {"a": 0, "b": 0}
    assert {m["key"]: m["b"] for m in recorded["metrics"]}["captured_segments_per_step"] is None


def test_hotspots_names_the_step_source(tmp_path):
    run = run_main("analyze_trace", "hotspots", str(trace_of("bcg")), "--json")
    assert run.returncode == 0
    assert run.document["trace"]["step_source"] == "step_frames"
    assert run.document["graph_launches"] == 116


@pytest.mark.parametrize("folder, bcg, valid, segments", [
    ("direct-pair/eager", False, True, None), ("direct-pair/bcg", True, True, 58),
    ("profile-pair/eager", False, True, None), ("profile-pair/bcg", True, True, 58),
    ("bcg-capture-failed", True, False, None)])
def test_log_gate_on_the_real_0523_logs(folder, bcg, valid, segments):
    text = (H200 / folder / "log.txt").read_text(encoding="utf-8")
    verdict = log_gates.scan_log(text, log_markers.markers_for_version("0.5.23"), bcg_expected=bcg,
                                 require_native=True).to_json()
    assert verdict["valid"] is valid and verdict["bcg"]["captured_segments"] == segments
    if not valid:  # the stand-in lacked weak_ref_tensor: every capture failed and the engine ran eager
        assert {"bcg.no_capture", "bcg.capture_failed", "bcg.warmup_captured_nothing"} <= {
            r["code"] for r in verdict["reasons"]}


@pytest.mark.parametrize("folder", ["direct-pair/eager", "direct-pair/bcg"])
def test_direct_pair_perf_dumps_parse(folder):
    perf = perf_dump.load_perf_dump(H200 / folder / "perf.json", "device").to_json()
    assert 1200 < perf["e2e_ms"] < 1300 and len(perf["denoise_steps_ms"]) == 8
    assert perf["memory_kind"] == "device" and perf["peak_memory_mb"] > 20000
