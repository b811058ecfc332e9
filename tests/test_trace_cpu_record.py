"""Traces recorded here and now with torch.profiler on CPU: stages and steps from record_function, CPU time, ops.

CPU traces have no GPU kernels, so the GPU figures must be zero, not invented.
"""

from __future__ import annotations

import pytest

from conftest import run_script

torch = pytest.importorskip("torch")


def _record(path, stages=("TextEncodingStage", "DenoisingStage", "DecodingStage"), steps=2):
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(96, 96)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for stage in stages:
            with record_function(stage):
                if stage == "DenoisingStage":
                    for i in range(steps):
                        with record_function(f"denoising_step_{i}"):
                            x = torch.tanh(x @ x / 96)
                else:
                    x = torch.relu(x + 1) - 1
    prof.export_chrome_trace(str(path))
    return path


def test_cpu_trace_stages_steps_and_ops(tmp_path):
    trace = _record(tmp_path / "cpu.trace.json")
    run = run_script("analyze_trace", "hotspots", str(trace), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["trace"]["stage_source"] == "annotations" and doc["trace"]["step_source"] == "step_annotations"
    assert set(doc["stages"]) == {"TextEncodingStage", "DenoisingStage", "DecodingStage"}  # JSON keys are sorted
    for stage in doc["stages"].values():
        assert stage["cpu_us"] > 0 and stage["cpu_ops"] > 0
        assert stage["gpu_us"] == 0 and stage["kernels"] == 0 and stage["host_launches"] == 0
    assert [s["label"] for s in doc["steps"]] == ["denoising_step_0", "denoising_step_1"]
    assert doc["denoise"]["steps"] == 2 and doc["denoise"]["per_step"]["kernels"] == 0
    assert doc["kernels"] == [] and doc["launches"] == {}
    op_names = {row["name"] for row in doc["cpu_ops"]}
    assert {"aten::matmul", "aten::tanh", "aten::relu"} <= op_names
    steps_cpu = sum(s["cpu_us"] for s in doc["steps"])
    assert steps_cpu <= doc["stages"]["DenoisingStage"]["cpu_us"]


def test_cpu_traces_compare_whole_trace_without_gpu(tmp_path):
    a = _record(tmp_path / "a.json", steps=2)
    b = _record(tmp_path / "b.json", steps=4)
    run = run_script("analyze_trace", "compare", str(a), str(b), "--json")
    assert run.returncode == 0, run.stderr
    metrics = {m["key"]: m for m in run.document["metrics"]}
    assert run.document["steps"] == {"a": 2, "b": 4}
    assert metrics["gpu_kernels"]["a"] == metrics["gpu_kernels"]["b"] == 0
    assert metrics["cpu_stage_ms"]["a"] > 0 and metrics["cpu_stage_ms"]["b"] > 0


def test_trace_without_stage_annotations_has_no_stages(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.randn(32, 32).sum()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    doc = run_script("analyze_trace", "hotspots", str(path), "--json").document
    assert doc["trace"]["stage_source"] == "none" and doc["stages"] == {} and doc["denoise"] is None
    assert doc["cpu_ops_total"]["count"] > 0


def _record_convolutions(path):
    """Three Conv2d forwards: torch.profiler nests each as conv2d > convolution > _convolution > the backend op."""
    from torch.profiler import ProfilerActivity, profile

    conv = torch.nn.Conv2d(4, 8, 3)
    x = torch.randn(1, 4, 48, 48)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            conv(x).relu().sum()
    prof.export_chrome_trace(str(path))
    return path, {e.key: e for e in prof.key_averages()}


def test_cpu_ops_by_self_time_count_a_convolution_once_as_torch_profiler_does(tmp_path):
    trace, averages = _record_convolutions(tmp_path / "conv.json")
    run = run_script("analyze_trace", "hotspots", str(trace), "--top", "100", "--json")
    assert run.returncode == 0, run.stderr
    rows = {r["name"]: r for r in run.document["cpu_ops"]}
    for name in ("aten::conv2d", "aten::convolution", "aten::_convolution"):
        assert name in rows
    for name, row in rows.items():  # torch.profiler's own self/total CPU figures, from the same recording
        assert row["self_us"] == pytest.approx(averages[name].self_cpu_time_total, abs=0.01), name
        assert row["inclusive_us"] == pytest.approx(averages[name].cpu_time_total, abs=0.01), name
    assert rows["aten::conv2d"]["inclusive_us"] > 10 * rows["aten::conv2d"]["self_us"]  # the wrapper itself is cheap
    total = run.document["cpu_ops_total"]["self_us"]
    assert total == pytest.approx(sum(e.self_cpu_time_total for e in averages.values()), abs=0.1)
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0, abs=1e-4)
    human = run_script("analyze_trace", "hotspots", str(trace))
    text = human.stdout + human.stderr
    assert "no device kernels (a CPU-only trace)" in text and "CPU ops by self time" in text
    assert "0 kernels" not in text


def test_classify_says_a_cpu_trace_has_no_device_kernels(tmp_path):
    trace, _ = _record_convolutions(tmp_path / "conv.json")
    run = run_script("analyze_trace", "classify", str(trace), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["no_device_kernels"] is True and doc["hot"] == [] and doc["families"] == {}
    assert "no device kernels" in doc["note"]
    human = run_script("analyze_trace", "classify", str(trace))
    assert "nothing to classify" in human.stdout + human.stderr
