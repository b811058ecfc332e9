"""The tiny text-to-video and image-edit presets through the evidence path on a real H100 (sglang 0.5.23,
tests/gpu_harness/run_h200_0523.sh PARTS="video edit", 2026-12-07), kept in tests/fixtures/gpu-h100-0.5.23: the log
gate, replayed on each machine's engine log, passes the engine's own components and names the stand-in modules; the
campaign counts all 8 cells valid with identical outputs; the folder verified there; the baseline profile's trace
has real GPU kernels attributed to the stages and both denoise steps."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.judging import log_gates, log_markers

KEPT = TEST_FIXTURES / "gpu-h100-0.5.23"
KINDS = {  # entry: (preset, the engine's own components, the stand-ins, the stage that encodes the input)
    "wan-t2v-evidence": ("tiny-wan-t2v-gpu", ("WanTransformer3DModel", "UMT5EncoderModel", "AutoencoderKLWan"),
                         ("av", "cutlass", "imageio_ffmpeg", "sgl_kernel"), "TextEncodingStage"),
    "flux2-edit-evidence": ("tiny-flux2-edit-gpu", ("Flux2Transformer2DModel", "Qwen3ForCausalLM",
                                                    "AutoencoderKLFlux2"),
                            ("av", "imageio_ffmpeg", "sgl_kernel"), "ImageEncodingStage"),
}


@pytest.mark.parametrize("entry", sorted(KINDS))
def test_the_log_gate_passes_the_engines_own_components_and_names_the_stand_ins(entry):
    _, components, standins, _ = KINDS[entry]
    log = (KEPT / entry / "engine-e1.log").read_text()
    verdict = log_gates.scan_log(log, log_markers.markers_for_version("0.5.23"))
    assert verdict.valid and verdict.reasons == () and verdict.native_evidence, verdict.reason_codes()
    assert verdict.standin_modules == standins
    assert all(f": {c} (sgl-diffusion version)" in log for c in components)  # "Loaded transformer: ..."
    assert "falling back to native version" not in log and "NVIDIA H100" in (KEPT / entry / "machine.txt").read_text()


@pytest.mark.parametrize("entry", sorted(KINDS))
def test_every_cell_counts_with_identical_outputs_and_the_folder_verified(entry):
    preset = KINDS[entry][0]
    report = json.loads((KEPT / entry / "bench-report.json").read_text())
    assert report["campaign"]["preset"] == preset and [c["status"] for c in report["cells"]] == ["valid"] * 8
    (identity,) = report["summary"]["output_quality"]["checks"]
    assert identity["kind"] == "byte_identity" and identity["passed"]
    assert all(len(c["perf"]["denoise_steps_ms"]) == 2 for c in report["cells"])
    assert json.loads((KEPT / entry / "evidence.json").read_text())["state"] == "complete"
    verify = json.loads((KEPT / entry / "verify.json").read_text())
    assert verify["ok"] and verify["findings"] == []
    assert "Folder state: complete" in (KEPT / entry / "EVIDENCE.md").read_text()


@pytest.mark.parametrize("entry", sorted(KINDS))
def test_the_profile_trace_has_gpu_kernels_in_the_stages_and_both_denoise_steps(entry):
    stage = KINDS[entry][3]
    doc = run_main("analyze_trace", "hotspots", str(KEPT / entry / "baseline.trace.json.gz"), "--json").document
    assert doc["kernels_total"]["count"] > 500 and doc["kernels_total"]["total_us"] > 0
    assert {stage, "DenoisingStage", "DecodingStage"} <= set(doc["stages"])
    assert doc["stages"]["DenoisingStage"]["gpu_us"] > 0
    assert [s["label"] for s in doc["steps"]] == ["denoising_step_0", "denoising_step_1"]
