"""The engine's own CI perf baselines, read from the installed engine, judged with its own tolerances; a run on a
GPU class or scenario without a baseline says so plainly. Run against the recorded H200 campaign."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import TEST_FIXTURES, run_script
from sgl_diffusion_bench import engine_baselines, engine_probe

H200_REPORT = TEST_FIXTURES / "gpu-h200-0.5.10" / "bench-report.json"


@pytest.fixture(scope="module")
def package_dir():
    caps = engine_probe.probe_engine().capabilities
    if not (engine_probe.Path(caps.package_dir) / engine_baselines.BASELINE_DIR / "h100.json").is_file():
        pytest.skip(f"{caps.label} ships no perf baselines (0.5.23 and newer do)")
    return caps.package_dir


@pytest.mark.torch
def test_an_h200_run_has_no_engine_baseline_and_says_so():
    run = run_script("compare_engine_baseline", "--report", str(H200_REPORT), "--scenario", "flux_image_t2i",
                     "--json")
    doc = run.document
    assert run.returncode == 3 and doc["gpu_name"] == "NVIDIA H200" and doc["gpu_class"] is None
    assert doc["result"] == {"matched": False, "verdict": "no_match", "available_scenarios": [],
                             "reason": doc["result"]["reason"]}
    assert "h100, b200, 5090, xpu_b60" in doc["result"]["reason"] and "NVIDIA H200" in doc["result"]["reason"]


@pytest.mark.torch
def test_an_unknown_scenario_lists_the_ones_the_engine_has(package_dir):
    run = run_script("compare_engine_baseline", "--report", str(H200_REPORT), "--gpu-class", "h100",
                     "--scenario", "no_such_case", "--json")
    result = run.document["result"]
    assert run.returncode == 3 and not result["matched"] and "qwen_image_t2i" in result["available_scenarios"]
    assert run.document["baselines_path"].startswith(package_dir)  # read from the installed engine


@pytest.mark.torch
def test_the_engine_bound_and_tolerances_decide(package_dir):
    baselines = engine_baselines.load_baselines(package_dir, "h100")
    perf = json.loads(H200_REPORT.read_text())["cells"][0]["perf"]
    within = engine_baselines.compare([perf], baselines, "qwen_image_t2i",
                                      constants=engine_baselines.checker_constants(package_dir))
    assert within["verdict"] == "within_baseline" and within["tolerances"] == baselines["tolerances"]["pr_test"]
    decoding = next(r for r in within["rows"] if r["metric"] == "stage:DecodingStage")
    assert decoding["tolerance"] == 0.9 and decoding["min_abs"] == 450.0  # the checker's decoding allowance
    slow = copy.deepcopy(perf)
    expected = baselines["scenarios"]["qwen_image_t2i"]["expected_e2e_ms"]
    slow["e2e_ms"] = expected * (1 + baselines["tolerances"]["pr_test"]["e2e"]) + 1
    over = engine_baselines.compare([slow], baselines, "qwen_image_t2i")
    assert over["verdict"] == "over_baseline" and over["over"] == ["e2e_ms"]
    long_term = engine_baselines.compare([perf], baselines, "qwen_image_t2i", profile="long_term")
    assert long_term["rows"][0]["tolerance"] == baselines["tolerances"]["long_term"]["e2e"]
    assert engine_baselines.upper_bound(10.0, 0.25, 20.0) == 30.0  # the absolute pad wins on small figures
