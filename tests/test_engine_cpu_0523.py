"""The real sglang 0.5.23 engine on CPU (tiny FLUX.1, the CPU adapter): only the b0 gap is filled, the native path
runs, its log has no "Generated N outputs", its perf dump times scheduler-internal steps apart from the pipeline
stages and records no memory. Recorded runs: tests/fixtures/engine-cpu-0.5.23 (record.py there). The same facts on
the installed engine, run directly without the runner: tests/test_reproduce.py (its Reproduce block is that run)."""

from __future__ import annotations

import json

from conftest import TEST_FIXTURES
from sgl_diffusion_bench.judging import log_gates, log_markers, perf_dump
from sgl_diffusion_bench.engine import adapter_record

RECORDED = TEST_FIXTURES / "engine-cpu-0.5.23"
STAGES = ["InputValidationStage", "TextEncodingStage", "LatentPreparationStage", "TimestepPreparationStage",
          "DenoisingStage", "DecodingStage"]


def test_recorded_native_run_applied_only_b0_in_both_processes():
    adapter = adapter_record.summarize((RECORDED / "native-ok" / "log.txt").read_text().splitlines())
    assert adapter["active"] and adapter["applied"] == ["b0"] and len(adapter["pids"]) == 2
    assert [n["id"] for n in adapter["not_needed"]] == ["b1", "b2", "b2a", "b3", "b4", "b5", "b6"]
    assert adapter["memory_source"] is None  # no torch.cpu memory stand-in was asked for


def test_recorded_native_run_passes_the_0523_gate_without_a_generated_line():
    log = (RECORDED / "native-ok" / "log.txt").read_text()
    assert "Generated" not in log and "SGL_" not in log  # no deprecation warning for our variables either
    verdict = log_gates.scan_log(log, log_markers.markers_for_version("0.5.23"), require_native=True)
    assert verdict.valid and verdict.generated_outputs is None and verdict.native_evidence, verdict.reasons


def test_recorded_perf_dump_keeps_scheduler_steps_apart_and_has_no_memory():
    perf = perf_dump.parse_perf_dump(json.loads((RECORDED / "native-ok" / "perf.json").read_text()), "device")
    assert [name for name, _ in perf.stages] == STAGES
    assert perf.internal_steps and all("." in name for name, _ in perf.internal_steps)
    assert perf.peak_memory_mb is None  # 0.5.23 writes no memory checkpoints on CPU: reported as not recorded
