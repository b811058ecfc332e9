"""The trace model and analyses on real H200 traces, checked against torch.profiler's own counts."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import fast_paths
from sgl_diffusion_bench.trace.analyses.classify import classify_trace
from sgl_diffusion_bench.trace.analyses.compare import compare_traces
from sgl_diffusion_bench.trace.analyses.hotspots import analyze_kernels
from sgl_diffusion_bench.trace.analyses.launches import analyze_launches
from sgl_diffusion_bench.trace.analyses.ranks import analyze_ranks, rank_figures
from sgl_diffusion_bench.trace.analyses.stages import analyze_stages
from sgl_diffusion_bench.trace.load import load_trace
from sgl_diffusion_bench.trace.model import union_us
from sgl_diffusion_bench.trace.summary import hotspots_body

H200 = TEST_FIXTURES / "traces-h200"
TP2 = TEST_FIXTURES / "traces-h200-tp2"
ENGINE = TEST_FIXTURES / "sglang-0.5.10-h200"
GROUND_TRUTHS = [(H200, "ground_truth.json"), (TP2, "ground_truth-rank0.json"), (TP2, "ground_truth-rank1.json")]



@pytest.fixture(scope="module")
def traces():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = load_trace(path)
        return cache[path]

    return get


def _engine_trace(name: str):
    return next((ENGINE / name).glob("*.trace.json.gz"))


@pytest.mark.parametrize("folder,truth_file", GROUND_TRUTHS, ids=["h200", "tp2-rank0", "tp2-rank1"])
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_runtime_calls_and_kernel_counts_equal_profiler_ground_truth(traces, folder, truth_file, mode):
    truth = json.loads((folder / truth_file).read_text())[mode]
    trace = traces(folder / truth["trace_file"])
    launches = analyze_launches(trace)
    assert launches["runtime_calls"] == truth["runtime_calls"]
    for api in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"):
        assert launches["launches"][api] == truth["runtime_calls"][api]
    assert launches["graph_launches"] == truth["runtime_calls"].get("cudaGraphLaunch", 0)
    kernels = {row["name"]: row for row in analyze_kernels(trace)}
    checked = 0
    for op in truth["top_device_ops"]:
        if op["name"] in kernels:  # the rest are stage annotation ranges, which are not kernels
            assert kernels[op["name"]]["count"] == op["count"], op["name"]
            assert kernels[op["name"]]["total_us"] == pytest.approx(op["self_device_us"], abs=0.01)
            checked += 1
    assert checked >= 10


def test_eager_launches_one_host_call_per_kernel(traces):
    body = hotspots_body(traces(H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz"), top=5)
    assert body["host_launches"] == body["kernels_total"]["count"] == 7234
    assert len(body["kernels"]) == 5 and body["kernels_shown"] == 5
    assert body["memory_ops"] and all("Mem" in row["name"] for row in body["memory_ops"])


def test_stage_gpu_time_is_a_union_and_steps_add_up_inside_the_denoise_stage(traces):
    trace = traces(H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz")
    result = analyze_stages(trace)
    stages = result["stages"]
    assert list(stages) == ["TextEncodingStage", "DenoisingStage", "DecodingStage"]
    assert sum(s["kernels"] for s in stages.values()) == 7234 and result["unattributed"] is None
    steps = result["steps"]
    assert [s["label"] for s in steps] == ["denoising_step_0", "denoising_step_1"]
    assert all(s["in_denoise"] for s in steps)
    assert sum(s["kernels"] for s in steps) == stages["DenoisingStage"]["kernels"]
    assert sum(s["gpu_us"] for s in steps) == pytest.approx(stages["DenoisingStage"]["gpu_us"], rel=1e-6)
    denoise = result["denoise"]
    assert denoise["steps"] == 2 and denoise["per_step"]["kernels"] == 2834
    # busy time can only shrink by unioning overlapping kernels; the idle gap is span minus busy time
    stage_index = 1
    intervals = [(trace.device.ts[i], trace.device.ts[i] + trace.device.dur[i]) for i in range(len(trace.device))
                 if trace.device.kind[i] == 0 and trace.device_stage(i) == stage_index]
    assert stages["DenoisingStage"]["gpu_us"] == pytest.approx(union_us(intervals), abs=0.01)
    assert denoise["idle_us"] == pytest.approx(denoise["span_us"] - stages["DenoisingStage"]["gpu_us"], abs=0.01)
    assert 0 < denoise["idle_share"] < 0.2


def test_compare_eager_vs_graph_shows_the_host_launch_drop_with_unchanged_kernels(traces):
    eager = traces(H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz")
    graph = traces(H200 / "flux-graph-2_steps-full_stages-global-rank0.trace.json.gz")
    result = compare_traces(eager, graph, ("eager", "graph"))
    metrics = {m["key"]: m for m in result["metrics"]}
    assert result["scope"] == "DenoisingStage" and result["steps"] == {"a": 2, "b": 2}
    assert metrics["gpu_kernels"]["a"] == metrics["gpu_kernels"]["b"] == 5668
    assert metrics["host_kernel_launches"]["a"] == 5668 and metrics["host_kernel_launches"]["b"] == 6
    assert metrics["graph_launches"]["a"] == 0 and metrics["graph_launches"]["b"] == 2
    assert metrics["captured_segments_per_step"]["b"] == 1
    assert metrics["cpu_stage_ms"]["b"] < metrics["cpu_stage_ms"]["a"]
    assert result["count_changes"] == []  # the same kernels run on the device
    assert result["kernel_names"]["only_a"] == result["kernel_names"]["only_b"] == 0


def test_engine_trace_stages_and_steps_come_from_python_frames(traces):
    trace = traces(_engine_trace("full_profile"))
    assert trace.stage_source == "python_frames" and trace.step_source == "profiler_steps"
    result = analyze_stages(trace)
    # the profiler keeps only its last cycle: denoise steps 1-3 and decoding; text encoding ran before it started
    assert list(result["stages"]) == ["DenoisingStage", "DecodingStage"]
    assert "TextEncodingStage" not in result["stages"]
    assert result["unattributed"] is None
    assert sum(s["kernels"] for s in result["stages"].values()) == 5745
    assert [s["label"] for s in result["steps"]] == [f"ProfilerStep#{n}" for n in (1, 2, 3, 4)]
    assert [s["in_denoise"] for s in result["steps"]] == [True, True, True, False]
    denoise = result["denoise"]
    assert denoise["steps"] == 3 and denoise["partial_steps"] == ["ProfilerStep#4"]
    assert denoise["per_step"]["kernels"] == 1799
    assert result["stages"]["DecodingStage"]["kernels"] == 347


def test_tiny_engine_trace_decoding_stage_from_frames(traces):
    result = analyze_stages(traces(_engine_trace("tiny_profile")))
    assert "DecodingStage" in result["stages"] and result["stages"]["DecodingStage"]["kernels"] > 0


def test_engine_jit_kernels_are_classified(traces):
    result = classify_trace(traces(_engine_trace("full_profile")), fast_paths.load_registry(), top=60)
    by_name = {row["name"]: row for row in result["hot"]}
    qknorm = next(n for n in by_name if "fused_qknorm_rope_warp" in n)
    timestep = [n for n in by_name if "timestep_embedding_kernel" in n]
    assert by_name[qknorm]["family"] == "Q2" and "SGLANG_ENABLE_FUSED_QKNORM_ROPE" in by_name[qknorm]["enablement"]
    assert timestep and all(by_name[n]["family"] == "T1" for n in timestep)
    assert result["families"]["Q2"]["kernels"] == 228
    assert not any(c["family"] == "Q2" for c in result["chains"])  # fused path engaged: no unfused chain


def test_unfused_qknorm_rope_chain_is_recognised_in_the_diffusers_trace(traces):
    result = classify_trace(traces(H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz"),
                            fast_paths.load_registry(), top=20)
    chain = next(c for c in result["chains"] if c["family"] == "Q2")
    assert chain["occurrences"] == 114 and not chain["fused_kernel_seen"]  # 57 blocks x 2 steps
    assert chain["first_check"]
    hot_rms = next(r for r in result["hot"] if "vectorized_layer_norm_kernel<c10::BFloat16, float, true>" in r["name"])
    assert hot_rms["family"] == "unclassified" and "Q2" in hot_rms["in_unfused_chains"]


def test_two_ranks_separate_nccl_and_show_skew(traces):
    paths = [TP2 / f"flux-tp2-graph-2_steps-full_stages-global-rank{r}.trace.json.gz" for r in (0, 1)]
    loaded = [traces(p) for p in paths]
    result = analyze_ranks([rank_figures(t) for t in loaded], [analyze_stages(t) for t in loaded])
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert rank["communication"]["kernels"] == 304
        assert all("nccl" in row["name"] for row in rank["communication"]["top"])
        assert rank["compute"]["kernels"] == 7234
    skew = result["skew"]["communication_total_us"]
    assert skew["max_rank"] == 1 and skew["spread_us"] > 100_000  # rank 1 waits for rank 0 in its first graph step
    first, second = result["per_step"]
    assert first["skew"]["spread_us"] > 100 * second["skew"]["spread_us"]
