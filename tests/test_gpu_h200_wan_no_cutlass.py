"""The tiny Wan2.1 text-to-video evidence path on a real H200 (sglang 0.5.23, tests/gpu_harness/run_h200_0523.sh
PARTS=video, 2026-12-07), kept in tests/fixtures/gpu-h200-0.5.23/wan-t2v-no-cutlass: sglang's Wan DiT imports a CuTe
DSL kernel module (`import cutlass`, the nvidia-cutlass-dsl package the carry cannot hold), so the engine loaded
diffusers' WanTransformer3DModel instead of its own and said so. The log gate, replayed here on the machine's engine
log, refuses that engine at the line where it fell back, names the import that failed and the stand-in modules; the
campaign and the evidence folder it left count no cell valid and claim no verdict."""

from __future__ import annotations

import json

from conftest import TEST_FIXTURES
from sgl_diffusion_bench.judging import log_gates, log_markers

KEPT = TEST_FIXTURES / "gpu-h200-0.5.23" / "wan-t2v-no-cutlass"
FALLBACK = "Error while loading customized transformer, falling back to native version"


def test_the_log_gate_refuses_the_native_fallback_at_its_line_and_names_the_missing_import():
    verdict = log_gates.scan_log((KEPT / "engine-e1.log").read_text(), log_markers.markers_for_version("0.5.23"))
    assert not verdict.valid and verdict.reason_codes() == ["backend.component_not_native", "engine.exception"]
    (native, _) = verdict.reasons
    assert native.line_no == 93 and FALLBACK in native.message
    assert "ModuleNotFoundError: No module named 'cutlass'" in [ref.line for ref in verdict.failure_lines]
    assert verdict.standin_modules == ("av", "imageio_ffmpeg", "sgl_kernel")
    assert [code for code, _ in verdict.warnings] == ["engine.standin_kernels"]


def test_no_cell_counts_and_the_evidence_folder_claims_no_verdict():
    report = json.loads((KEPT / "bench-report.json").read_text())
    assert report["campaign"]["preset"] == "tiny-wan-t2v-gpu" and "NVIDIA H200" in (KEPT / "machine.txt").read_text()
    assert [c["status"] for c in report["cells"]] == ["failed"] * 8
    assert all("backend.component_not_native" in " ".join(c["reasons"]) for c in report["cells"])
    assert report["summary"]["comparison"]["verdict"] == "insufficient_data"
    assert all(s["standin_modules"] == ["av", "imageio_ffmpeg", "sgl_kernel"] for s in report["engines"]["starts"])
    evidence = json.loads((KEPT / "evidence.json").read_text())
    assert evidence["state"] == "failed"
    assert {s["name"]: s["status"] for s in evidence["steps"]}["campaign"] == "failed"
    assert "Folder state: failed" in (KEPT / "EVIDENCE.md").read_text()
