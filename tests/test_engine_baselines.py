"""The engine's own CI perf baselines, read from the installed engine, judged with its own tolerances, and only
against a scenario that measured what the run measured: the real CPU tiny-flux run and the real H200 campaign are
refused against the H100 FLUX nightly (each mismatch named), a malformed baseline file is refused with exit 2, and a
comparison made across a mismatch is marked as such, never a pass."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.engine import engine_scenarios
from sgl_diffusion_bench.judging import engine_baselines

CPU_TINY_REPORT = TEST_FIXTURES / "bench-report" / "cpu-tiny-0.5.23.json"  # a real tiny-flux CPU run, 64x64, 2 steps
H200_CAMPAIGN = TEST_FIXTURES / "gpu-h200-0.5.23" / "campaign" / "bench-report.json"  # FLUX.1-dev, 1024, 28 steps
EXAMPLE_REPORT = TEST_FIXTURES / "bench-report" / "example.json"  # gpus given as names, 2 GPUs, 50 steps
H200_0510_REPORT = TEST_FIXTURES / "gpu-h200-0.5.10" / "bench-report.json"
CPU_DUMP = TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "perf.json"


def _installed_engine() -> Path | None:
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    return root if (root / engine_baselines.BASELINE_DIR / "h100.json").is_file() else None


@pytest.fixture(scope="module")
def engine_dir() -> Path:
    root = _installed_engine()
    if root is None:
        pytest.skip("no installed engine with perf baselines (sglang 0.5.23 and newer ship them)")
    return root


def _baseline(*args: str) -> tuple[int, dict]:
    run = run_main("compare_engine_baseline", *args, "--json")
    return run.returncode, run.document


def _fields(doc: dict) -> dict[str, tuple]:
    return {m["field"]: (m["run"], m["scenario"]) for m in doc["mismatches"]}


def test_the_cpu_tiny_run_is_refused_against_the_h100_flux_nightly(engine_dir):
    code, doc = _baseline("--report", str(CPU_TINY_REPORT), "--gpu-class", "h100", "--scenario", "flux_image_t2i",
                          "--engine-dir", str(engine_dir))
    assert code == 3 and doc["ok"] is False and doc["mismatched"] is True
    assert doc["result"]["verdict"] == "mismatch_refused" and "rows" not in doc["result"]
    assert _fields(doc) == {"model": ("tiny-FLUX.1-dev", "FLUX.1-dev"), "size": ("64x64", "1024x1024"),
                            "steps": (2, 50), "gpu_class": ("no GPU in the report (a CPU run)", "h100")}
    assert "flux_image_t2i" in doc["result"]["available_scenarios"]
    text = run_main("compare_engine_baseline", "--report", str(CPU_TINY_REPORT), "--gpu-class", "h100",
                      "--scenario", "flux_image_t2i", "--engine-dir", str(engine_dir))
    assert text.returncode == 3 and text.stderr.startswith("REFUSED (mismatch)") and "steps: run 2, scenario 50" in \
        text.stderr


def test_without_a_scenario_no_match_lists_the_scenarios_the_file_has(engine_dir):
    code, doc = _baseline("--report", str(CPU_TINY_REPORT), "--gpu-class", "h100", "--engine-dir", str(engine_dir))
    result = doc["result"]
    assert code == 3 and result["verdict"] == "no_match" and "64x64" in result["reason"]
    assert len(result["available_scenarios"]) > 50 and "qwen_image_t2i" in result["available_scenarios"]
    code, doc = _baseline("--report", str(CPU_TINY_REPORT), "--gpu-class", "h100", "--scenario", "no_such_case",
                          "--engine-dir", str(engine_dir))
    assert code == 3 and "flux_image_t2i" in doc["result"]["available_scenarios"]


def test_the_h200_campaign_is_refused_against_a_scenario_of_other_steps(engine_dir):
    for allow in ([], ["--allow-mismatch", "gpu_class"]):
        code, doc = _baseline("--report", str(H200_CAMPAIGN), "--gpu-class", "h100", "--scenario", "flux_image_t2i",
                              "--engine-dir", str(engine_dir), *allow)
        assert code == 3 and doc["result"]["verdict"] == "mismatch_refused" and doc["gpu_name"] == "NVIDIA H200"
        assert _fields(doc) == {"steps": (28, 50), "gpu_class": ("NVIDIA H200 (no engine baseline class)", "h100")}
    code, doc = _baseline("--report", str(H200_CAMPAIGN), "--gpu-class", "h100", "--engine-dir", str(engine_dir))
    assert code == 3 and doc["result"]["verdict"] == "no_match" and "28 steps" in doc["result"]["reason"]
    code, doc = _baseline("--report", str(H200_CAMPAIGN), "--engine-dir", str(engine_dir))  # an H200 has no class
    assert code == 3 and doc["gpu_class"] is None and "NVIDIA H200" in doc["result"]["reason"]


def _engine_with_a_28_step_flux_scenario(tmp_path: Path, engine_dir: Path) -> Path:
    """A copy of the engine's h100.json and case sources plus one case that asks for what the H200 campaign ran
    (FLUX.1-dev, 1024x1024, 28 steps, one GPU); its figures are the real flux_image_t2i ones cut to 28 steps."""
    root = tmp_path / "sglang"
    for rel in (engine_scenarios.CASES_SOURCE, engine_scenarios.CONFIGS_SOURCE, engine_scenarios.MODEL_NAMES_SOURCE,
                engine_baselines.CHECKER_SOURCE):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(engine_dir / rel, root / rel)
    with (root / engine_scenarios.CASES_SOURCE).open("a", encoding="utf-8") as fh:
        fh.write('\nH200_LIKE_CASES = [DiffusionTestCase("flux_image_t2i_28_steps", '
                 'DiffusionServerArgs(model_path=DEFAULT_FLUX_1_DEV_MODEL_NAME_FOR_TEST), '
                 'replace(T2I_sampling_params, extras={"num_inference_steps": 28}))]\n')
    baselines = json.loads((engine_dir / engine_baselines.BASELINE_DIR / "h100.json").read_text())
    scenario = copy.deepcopy(baselines["scenarios"]["flux_image_t2i"])
    scenario["denoise_step_ms"] = {k: v for k, v in scenario["denoise_step_ms"].items() if int(k) < 28}
    baselines["scenarios"]["flux_image_t2i_28_steps"] = scenario
    _write_baselines(root, baselines)
    return root


def _write_baselines(root: Path, document) -> Path:
    path = root / engine_baselines.BASELINE_DIR / "h100.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    return path


def test_the_h200_campaign_is_compared_only_with_the_scenario_that_matches_it_and_never_passes(tmp_path, engine_dir):
    root = _engine_with_a_28_step_flux_scenario(tmp_path, engine_dir)
    code, doc = _baseline("--report", str(H200_CAMPAIGN), "--gpu-class", "h100", "--engine-dir", str(root))
    assert code == 3 and doc["result"]["verdict"] == "mismatch_refused"  # picked from the request, GPU differs
    assert doc["result"]["scenario"] == "flux_image_t2i_28_steps" and list(_fields(doc)) == ["gpu_class"]
    code, doc = _baseline("--report", str(H200_CAMPAIGN), "--gpu-class", "h100", "--engine-dir", str(root),
                          "--allow-mismatch", "gpu_class")
    result = doc["result"]
    assert code == 3 and doc["ok"] is False and doc["mismatched"] is True and result["verdict"] == "mismatched"
    assert result["scenario"] == "flux_image_t2i_28_steps" and result["figures_verdict"] in {"within_baseline",
                                                                                           "over_baseline"}
    assert doc["scenario_facts"] == {"model": "black-forest-labs/FLUX.1-dev", "width": 1024, "height": 1024,
                                     "num_frames": None, "steps": 28, "num_gpus": 1}
    text = run_main("compare_engine_baseline", "--report", str(H200_CAMPAIGN), "--gpu-class", "h100",
                      "--engine-dir", str(root), "--allow-mismatch")
    assert text.returncode == 3 and text.stderr.startswith("MISMATCHED: not evidence, not a pass")


def test_a_run_that_matches_every_field_is_judged(tmp_path, engine_dir):
    """The same request on a GPU of the file's class: nothing mismatched, so the engine's bound decides."""
    root = _engine_with_a_28_step_flux_scenario(tmp_path, engine_dir)
    report = json.loads(H200_CAMPAIGN.read_text())
    for gpu in report["environment"]["gpus"]:
        gpu["name"] = "NVIDIA H100 80GB HBM3"
    path = tmp_path / "h100-named.json"
    path.write_text(json.dumps(report))
    code, doc = _baseline("--report", str(path), "--engine-dir", str(root))
    assert doc["gpu_class"] == "h100" and doc["mismatched"] is False and doc["mismatches"] == []
    assert doc["result"]["verdict"] in {"within_baseline", "over_baseline"} and code == (0 if doc["ok"] else 1)


def test_example_report_with_gpu_names_as_strings_picks_its_two_gpu_scenario(engine_dir):
    code, doc = _baseline("--report", str(EXAMPLE_REPORT), "--gpu-class", "h100", "--engine-dir", str(engine_dir))
    assert code == 3 and doc["gpu_name"] == "NVIDIA H200" and doc["result"]["scenario"] == "flux_image_t2i_2_gpus"
    assert list(_fields(doc)) == ["gpu_class"]


def test_a_perf_dump_alone_cannot_confirm_size_or_gpus(engine_dir):
    code, doc = _baseline("--perf-dump", str(CPU_DUMP), "--gpu-class", "h100", "--scenario", "flux_image_t2i",
                          "--engine-dir", str(engine_dir))
    fields = _fields(doc)
    assert code == 3 and fields["size"] == (None, "1024x1024") and fields["num_gpus"] == (None, 1)
    assert fields["steps"] == (2, 50) and fields["model"] == ("tiny-FLUX.1-dev", "FLUX.1-dev")
    assert "gpu_class" not in fields  # a dump names no GPU: its class is the one --gpu-class states


def test_the_engine_case_definitions_say_what_each_scenario_measured(engine_dir):
    cases = engine_scenarios.read_scenarios(engine_dir)
    assert cases["flux_image_t2i"] == {"model": "black-forest-labs/FLUX.1-dev", "width": 1024, "height": 1024,
                                       "num_frames": None, "steps": None, "num_gpus": 1}
    assert cases["flux_image_t2i_2_gpus"]["num_gpus"] == 2
    assert cases["sana_video_2b_t2v"]["num_frames"] == 17 and cases["sana_video_2b_t2v"]["steps"] == 8
    assert engine_scenarios.read_scenarios(Path("/nonexistent")) == {}


def _good() -> dict:
    return {"tolerances": {"pr_test": {"e2e": 0.25, "denoise_stage": 0.25, "non_denoise_stage": 0.8,
                                       "denoise_step": 0.3, "denoise_agg": 0.2}},
            "scenarios": {"flux_image_t2i": {"stages_ms": {"DenoisingStage": 6000.0}, "denoise_step_ms": {"0": 1.0},
                                             "expected_e2e_ms": 6693.0, "expected_avg_denoise_ms": 128.0,
                                             "expected_median_denoise_ms": 130.0}}}


def _broken(change) -> str:
    doc = _good()
    change(doc)
    return json.dumps(doc)


MALFORMED = {
    "nan_figure": json.dumps(_good()).replace("6693.0", "NaN"),
    "infinite_figure": json.dumps(_good()).replace("6693.0", "Infinity"),
    "overflowing_figure": json.dumps(_good()).replace("6693.0", "1e999"),
    "huge_figure": json.dumps(_good()).replace("6693.0", "1.7e308"),
    "negative_figure": json.dumps(_good()).replace("6693.0", "-5"),
    "no_tolerances": _broken(lambda d: d.pop("tolerances")),
    "tolerances_a_list": _broken(lambda d: d.update(tolerances=[0.25])),
    "no_pr_test_profile": _broken(lambda d: d["tolerances"].update(long_term=d["tolerances"].pop("pr_test"))),
    "tolerance_a_string": _broken(lambda d: d["tolerances"]["pr_test"].update(e2e="0.25")),
    "tolerance_missing": _broken(lambda d: d["tolerances"]["pr_test"].pop("e2e")),
    "no_scenarios": _broken(lambda d: d.pop("scenarios")),
    "scenarios_a_list": _broken(lambda d: d.update(scenarios=[])),
    "scenario_a_number": _broken(lambda d: d["scenarios"].update(flux_image_t2i=1)),
    "scenario_without_stages": _broken(lambda d: d["scenarios"]["flux_image_t2i"].pop("stages_ms")),
    "stage_a_string": _broken(lambda d: d["scenarios"]["flux_image_t2i"]["stages_ms"].update(DenoisingStage="6")),
    "e2e_a_bool": _broken(lambda d: d["scenarios"]["flux_image_t2i"].update(expected_e2e_ms=True)),
    "step_key_not_a_number": _broken(lambda d: d["scenarios"]["flux_image_t2i"].update(denoise_step_ms={"a": 1})),
    "top_level_array": "[]",
    "top_level_string": '"h100"',
    "truncated": json.dumps(_good())[:40],
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_baseline_file_is_refused_with_exit_2(tmp_path, case):
    _write_baselines(tmp_path / "sglang", MALFORMED[case])
    code, doc = _baseline("--report", str(EXAMPLE_REPORT), "--gpu-class", "h100", "--scenario", "flux_image_t2i",
                          "--engine-dir", str(tmp_path / "sglang"))
    assert (code, doc["schema"], doc["error"]["code"]) == (2, "error.v1", "baseline.malformed"), doc


def test_a_baseline_path_that_is_no_regular_file_is_unreadable(tmp_path):
    path = _write_baselines(tmp_path / "sglang", "{}")
    path.unlink()
    os.mkfifo(path)
    code, doc = _baseline("--report", str(EXAMPLE_REPORT), "--gpu-class", "h100", "--engine-dir",
                          str(tmp_path / "sglang"))
    assert (code, doc["error"]["code"]) == (2, "baseline.unreadable")


def test_the_smallest_well_formed_file_is_read(tmp_path):
    _write_baselines(tmp_path / "sglang", json.dumps(_good()))
    code, doc = _baseline("--report", str(EXAMPLE_REPORT), "--gpu-class", "h100", "--scenario", "flux_image_t2i",
                          "--engine-dir", str(tmp_path / "sglang"), "--allow-mismatch")
    assert code == 3 and doc["result"]["verdict"] == "mismatched"  # no case sources: model and size unconfirmed
    assert {"model", "size", "gpu_class"} <= set(_fields(doc))


def test_the_engine_bound_and_tolerances_decide(engine_dir):
    baselines = engine_baselines.load_baselines(engine_dir, "h100")
    perf = json.loads(H200_0510_REPORT.read_text())["cells"][0]["perf"]
    within = engine_baselines.compare([perf], baselines, "qwen_image_t2i",
                                      constants=engine_baselines.checker_constants(engine_dir))
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
