"""The real sglang engine on the tiny Wan2.1 video models, on CPU: a warm A/B campaign of the text-to-video model whose
cells are judged on the decoded video (frames, size), and an image-to-video run whose input image (an asset the bundle
ships, installed without --fetch-assets) reaches the engine's image encoder; the CPU adapter's gaps on record (0.5.23:
b7 for Wan's blocks; 0.5.10.post1: the same gaps as FLUX, its Wan blocks call no sgl-kernel CPU op). Both releases."""

from __future__ import annotations

import pytest

from conftest import assert_announced_and_summarised, run_script
from engine_release import DEFAULT_RELEASE, FLUX_GAPS_0510, INSTALLED, OLDER_RELEASE, expects
from sgl_diffusion_bench.engine import tiny_model
from sgl_diffusion_bench.judging import output_check
from pathlib import Path

pytestmark = [pytest.mark.engine, expects(DEFAULT_RELEASE, OLDER_RELEASE)]
# the adapter's patches a Wan run applies; b0 too where the engine did not start in the probe's process
WAN_PATCHES = {"b7", "fork"} if INSTALLED == DEFAULT_RELEASE else {*FLUX_GAPS_0510, "fork"}


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
    assert WAN_PATCHES <= set(adapter["applied"]) <= WAN_PATCHES | {"b0"}, adapter
    b7 = adapter["reasons"].get("b7") or next(n["reason"] for n in adapter["not_needed"] if n["id"] == "b7")
    assert "sgl-kernel" in b7  # applied, or why it was not needed (0.5.10.post1)
    assert all(c["perf"]["denoise_steps_ms"] and len(c["perf"]["denoise_steps_ms"]) == 2 for c in cells)


def test_the_tiny_image_to_video_model_runs_on_the_bundled_input_image(tmp_path):
    # an empty work folder, so the bundled image must be installed by the run; the tiny model from the usual cache
    env = {"DIFFUSION_BENCH_WORKDIR": str(tmp_path / "work"), tiny_model.CACHE_ENV: str(tiny_model.default_cache_dir())}
    run = run_script("bench_diffusion_denoise", "--model", "tiny-wan-i2v-cpu", "--label", "i2v", "--output-dir",
                     str(tmp_path / "out"), "--json", env=env, timeout=1200)
    doc = run.document
    assert run.returncode == 0 and doc["ok"], run.stderr[-3000:]
    (cell,) = doc["cells"]
    image = tmp_path / "work" / "inputs" / "diffusion_benchmark" / "figs" / "tiny_input_64.png"
    assert cell["status"] == "valid" and f"--image-path={image}" in cell["argv"] and image.is_file()
    decoded = output_check.decode(Path(cell["outputs"][0]["path"]))
    assert (decoded.kind, decoded.width, decoded.height, decoded.frames) == ("video", 64, 64, 5)
    engine_log = next((tmp_path / "out").glob("*__warm-e1/engine.log")).read_text()
    assert "Loaded image_encoder: CLIPVisionModel (sgl-diffusion version)" in engine_log  # the engine's own loader
    assert WAN_PATCHES <= set(doc["engine"]["adapter"]["applied"])
