"""perf_dump: strict parsing of real engine perf dumps, the reference denoise/memory rules, and clear errors."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.judging import perf_dump

H200 = "sglang-0.5.10-h200"
SEED = TEST_FIXTURES / "seed-pr-38591"
# The CPU-adapter run's dump, verbatim from reference/sglang-cpu-engine.md (memory is process RSS).
CPU_DUMP = {
    "timestamp": "2026-11-30T18:54:14.811849+00:00", "request_id": "70647541-d72e-435b-b1ca-fdc312fb1ad1",
    "commit_hash": "N/A", "tag": "cli_generate", "total_duration_ms": 118.37519499999871,
    "steps": [{"name": "InputValidationStage", "duration_ms": 0.04272299997865048},
              {"name": "TextEncodingStage", "duration_ms": 80.60570599991479},
              {"name": "TimestepPreparationStage", "duration_ms": 0.3766280001400446},
              {"name": "LatentPreparationStage", "duration_ms": 0.12970200009476684},
              {"name": "DenoisingStage", "duration_ms": 24.69578999989608},
              {"name": "DecodingStage", "duration_ms": 10.630470999785757}],
    "denoise_steps_ms": [{"step": 0, "duration_ms": 13.737944000013158}, {"step": 1, "duration_ms": 6.166315999962535}],
    "memory_checkpoints": {
        "before_forward": {"allocated_mb": 654.42, "reserved_mb": 654.42, "peak_allocated_mb": 654.42,
                           "peak_reserved_mb": 654.42},
        "after_forward": {"allocated_mb": 691.55, "reserved_mb": 691.55, "peak_allocated_mb": 691.55,
                          "peak_reserved_mb": 691.55}},
    "meta": {"prompt": ["a cat"], "model": "models/tiny-FLUX.1-dev"},
}


def dump(**changes):
    doc = json.loads(json.dumps(CPU_DUMP))
    doc.update(changes)
    return doc


def test_real_h200_dump_full_plain():
    m = perf_dump.load_perf_dump(TEST_FIXTURES / H200 / "full_plain" / "perf.json", "device")
    assert m.e2e_ms == pytest.approx(15921.826763000012)
    assert m.denoise_ms == pytest.approx(14867.413213999953) and m.denoise_source == "stages"
    assert m.denoise_stage_names == ("DenoisingStage",)
    assert [n for n, _ in m.stages] == ["InputValidationStage", "TextEncodingStage", "TimestepPreparationStage",
                                        "LatentPreparationStage", "DenoisingStage", "DecodingStage"]
    assert m.step0_ms == pytest.approx(14478.07622800002)  # compile/first call lives in step 0
    assert m.steady_step_mean_ms == pytest.approx((55.5025069999715 + 155.2064339999788 + 156.34772600003544) / 3)
    assert (m.peak_memory_mb, m.peak_memory_source, m.peak_memory_checkpoint) == \
        (32082.0, "max_checkpoint_peak_reserved", "after_forward")
    assert m.layout == "sglang-0.5.10" and m.memory_kind == "device" and m.commit_hash is None
    assert m.warnings == ()


@pytest.mark.parametrize("case", ["tiny_plain", "tiny_profile", "full_profile"])
def test_every_real_h200_dump_parses(case):
    raw = json.loads((TEST_FIXTURES / H200 / case / "perf.json").read_text())
    m = perf_dump.load_perf_dump(TEST_FIXTURES / H200 / case / "perf.json", "device")
    assert m.e2e_ms == raw["total_duration_ms"]
    assert m.denoise_ms == next(s["duration_ms"] for s in raw["steps"] if s["name"] == "DenoisingStage")
    assert len(m.denoise_steps_ms) == len(raw["denoise_steps_ms"])


def test_cpu_adapter_dump_is_process_rss():
    m = perf_dump.parse_perf_dump(dump(), "process_rss")
    assert m.memory_kind == "process_rss" and m.peak_memory_mb == 691.55
    assert m.to_json()["memory_kind"] == "process_rss"


def test_runtime_peak_is_preferred_over_load_peak():
    m = perf_dump.load_perf_dump(SEED / "r1-a1-eager.json", "device")
    raw = json.loads((SEED / "r1-a1-eager.json").read_text())["memory_checkpoints"]
    assert raw["load_peak"]["peak_reserved_mb"] > raw["runtime_peak"]["peak_reserved_mb"]
    assert (m.peak_memory_mb, m.peak_memory_source) == (raw["runtime_peak"]["peak_reserved_mb"], "runtime_peak")
    assert m.layout == "sglang-0.5.23" and m.commit_hash == "482e9f257bb9d9ac57c2245c93768a96ec70edbe"


def test_denoise_rule_sums_denoise_and_refinement_but_not_before_denoising():
    steps = [{"name": "QwenImageLayeredBeforeDenoisingStage", "duration_ms": 50.0},
             {"name": "LTX2AVDenoisingStage", "duration_ms": 300.0},
             {"name": "LTX2RefinementStage", "duration_ms": 120.0},
             {"name": "DecodingStage", "duration_ms": 30.0}]
    m = perf_dump.parse_perf_dump(dump(steps=steps), "device")
    assert m.denoise_ms == 420.0 and m.denoise_source == "stages"
    assert m.denoise_stage_names == ("LTX2AVDenoisingStage", "LTX2RefinementStage")


def test_denoise_falls_back_to_step_records_and_says_so():
    steps = [s for s in CPU_DUMP["steps"] if s["name"] != "DenoisingStage"]
    m = perf_dump.parse_perf_dump(dump(steps=steps), "device")
    assert m.denoise_source == "denoise_steps_ms"
    assert m.denoise_ms == pytest.approx(13.737944000013158 + 6.166315999962535)
    assert any("denoise_steps_ms" in w for w in m.warnings)


def test_nothing_to_measure_is_none_not_zero():
    m = perf_dump.parse_perf_dump(dump(steps=[{"name": "DecodingStage", "duration_ms": 1.0}], denoise_steps_ms=[],
                                       memory_checkpoints={}), "device")
    assert m.denoise_ms is None and m.denoise_source is None
    assert m.peak_memory_mb is None and m.layout == "legacy"
    assert len(m.warnings) == 2


def test_unknown_extra_keys_are_tolerated():
    m = perf_dump.parse_perf_dump(dump(custom_metrics={"x": 1}, cache_stats={}, stage_counts={}), "device")
    assert m.e2e_ms == CPU_DUMP["total_duration_ms"]


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d.pop("total_duration_ms"), "'total_duration_ms' is a required property"),
    (lambda d: d.update(total_duration_ms="118"), "is not of type 'number'"),
    (lambda d: d.update(total_duration_ms=0), "less than or equal to the minimum"),
    (lambda d: d["steps"][1].update(duration_ms=None), "steps/1/duration_ms"),
    (lambda d: d["steps"][0].pop("name"), "'name' is a required property"),
    (lambda d: d.update(steps={"DenoisingStage": 1.0}), "is not of type 'array'"),
    (lambda d: d["denoise_steps_ms"][1].update(step=0), "lists step 0 twice"),
    (lambda d: d["denoise_steps_ms"][1].update(step=3), "are not 0..1"),
    (lambda d: d["memory_checkpoints"]["after_forward"].pop("peak_reserved_mb"), "peak_reserved_mb"),
    (lambda d: d["steps"][4].update(duration_ms=True), "is not of type 'number'"),
    (lambda d: d.update(total_duration_ms=float("nan")), "not a finite number"),
])
def test_malformed_dumps_raise_with_a_reason(mutate, reason):
    doc = dump()
    mutate(doc)
    with pytest.raises(perf_dump.PerfDumpError) as info:
        perf_dump.parse_perf_dump(doc, "device", source="cell-3/perf.json")
    assert reason in info.value.reason
    assert "cell-3/perf.json" in info.value.message and info.value.exit_code == 2


@pytest.mark.parametrize("content, reason", [
    ("", "empty"), ('{"total_duration_ms": 1.0, "steps": [', "not valid JSON"),
    ('{"total_duration_ms": NaN, "steps": []}', "non-finite"), ("[1, 2]", "top level is list"),
])
def test_unreadable_files_raise_with_a_reason(tmp_path, content, reason):
    path = tmp_path / "perf.json"
    path.write_text(content)
    with pytest.raises(perf_dump.PerfDumpError) as info:
        perf_dump.load_perf_dump(path, "device")
    assert reason in info.value.reason


def test_missing_file_and_bad_memory_kind(tmp_path):
    with pytest.raises(perf_dump.PerfDumpError, match="file not found"):
        perf_dump.load_perf_dump(tmp_path / "absent.json", "device")
    with pytest.raises(ValueError):
        perf_dump.parse_perf_dump(dump(), "gpu")


def test_to_json_matches_the_bench_report_perf_object():
    validator = Draft202012Validator({"$ref": contract.SCHEMA_BASE_URI + "bench-report.v1.schema.json#/$defs/perf"},
                                     registry=contract._registry())
    for doc, kind in ((dump(), "process_rss"), (json.loads((SEED / "r2-b1-bcg.json").read_text()), "device")):
        perf = perf_dump.parse_perf_dump(doc, kind).to_json()
        assert list(validator.iter_errors(perf)) == []
    assert perf["stages"]["TextEncodingStage"] == 371.106
