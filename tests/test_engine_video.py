"""The real sglang engine on the tiny Wan2.1 text-to-video model, on CPU: a warm A/B campaign whose cells are judged
on the decoded video (frames, size), with the CPU adapter's b7 patch (sgl-kernel's CPU ops) on record."""

from __future__ import annotations

import pytest

from conftest import assert_announced_and_summarised, run_script
from engine_release import DEFAULT_RELEASE, expects
from sgl_diffusion_bench.judging import output_check
from pathlib import Path

pytestmark = [pytest.mark.engine, expects(DEFAULT_RELEASE)]


def test_a_warm_ab_campaign_on_the_tiny_video_model_is_valid_and_judged_on_its_frames(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-wan-t2v-cpu", "--campaign", "ab", "--rounds", "1",
                     "--arm-b-args=--log-level info", "--label", "video", "--output-dir", str(tmp_path), "--report",
                     "--json", timeout=1200)
    doc = run.document
    assert run.returncode == 0 and doc["ok"], run.stderr[-3000:]
    assert_announced_and_summarised(run.stderr, "bench_diffusion_denoise")
    cells = doc["cells"]
    assert [c["status"] for c in cells] == ["valid"] * 4 and doc["campaign"]["preset"] == "tiny-wan-t2v-cpu"
    outputs = [Path(o["path"]) for c in cells for o in c["outputs"]]
    assert len(outputs) == 4 and all(p.suffix == ".mp4" for p in outputs)
    decoded = output_check.decode(outputs[0])
    assert (decoded.kind, decoded.width, decoded.height, decoded.frames) == ("video", 64, 64, 5)
    (identity,) = doc["summary"]["output_quality"]["checks"]
    assert identity["kind"] == "byte_identity" and identity["passed"]  # same seed: the same video in both arms
    adapter = doc["engine"]["adapter"]
    assert adapter["applied"] == ["b0", "b7", "fork"], adapter  # Wan's blocks reach sgl-kernel's missing CPU ops
    assert "sgl-kernel" in adapter["reasons"]["b7"]
    assert all(c["perf"]["denoise_steps_ms"] and len(c["perf"]["denoise_steps_ms"]) == 2 for c in cells)
