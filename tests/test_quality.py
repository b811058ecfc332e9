"""quality: byte identity for lossless, SSIM/PSNR on real images and real video files, thresholds, JSON safety."""

from __future__ import annotations

import dataclasses
import json
import shutil

import av
import imageio.v3 as iio
import numpy as np
import pytest
from jsonschema import Draft202012Validator
from PIL import Image

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract, fileio
from sgl_diffusion_bench.judging import quality
from sgl_diffusion_bench.judging.cell import Cell

PNG = "sglang-0.5.10-h200/tiny_plain/out.png"


def perturbed(src, dst, sigma, seed=0):
    pixels = np.asarray(Image.open(src).convert("RGB")).astype(np.int16)
    noise = np.random.default_rng(seed).normal(0, sigma, pixels.shape)
    Image.fromarray(np.clip(pixels + noise, 0, 255).astype(np.uint8)).save(dst)
    return dst


def test_identical_image_is_ssim_1_and_infinite_psnr(tmp_path):
    copy = shutil.copy(TEST_FIXTURES / PNG, tmp_path / "copy.png")
    r = quality.compare_media(TEST_FIXTURES / PNG, copy)
    assert r["ssim"] == pytest.approx(1.0) and r["psnr_db"] is None and r["psnr_infinite"] is True
    assert r["passed"] and r["frames"] == 1 and r["media"] == "image"
    json.loads(contract.dumps({"schema": "x.v1", "r": r}))  # no Infinity in JSON (allow_nan=False)


def test_perturbed_images_score_lower_and_fail_thresholds(tmp_path):
    ref = TEST_FIXTURES / PNG
    light = quality.compare_media(ref, perturbed(ref, tmp_path / "light.png", 2))
    heavy = quality.compare_media(ref, perturbed(ref, tmp_path / "heavy.png", 40))
    assert 0.9 < light["ssim"] < 1.0 and 35 < light["psnr_db"] < 60 and light["passed"]
    assert heavy["ssim"] < light["ssim"] and heavy["psnr_db"] < 28 and not heavy["passed"]
    strict = {**quality.DEFAULT_THRESHOLDS, "image": quality.Thresholds(ssim_min=0.9999, psnr_min_db=28.0)}
    assert quality.compare_media(ref, tmp_path / "light.png", strict)["passed"] is False


def test_size_mismatch_and_unreadable(tmp_path):
    Image.new("RGB", (32, 32)).save(tmp_path / "small.png")
    with pytest.raises(quality.QualityError, match="shapes differ"):
        quality.compare_media(TEST_FIXTURES / PNG, tmp_path / "small.png")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(quality.QualityError, match="not a readable image"):
        quality.compare_media(TEST_FIXTURES / PNG, tmp_path / "bad.png")
    with pytest.raises(quality.QualityError):
        quality.media_kind("mesh.glb")


def frames(count=6, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (48, 64, 3)).astype(np.uint8)
    return [np.roll(base, k * 3, axis=1) for k in range(count)]


def write_mp4(path, video):
    """PyAV directly: imageio 2.36's pyav writer fails on av 16 (AttributeError in time_base)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=8, options={"crf": "10"})
        stream.width, stream.height, stream.pix_fmt = video[0].shape[1], video[0].shape[0], "yuv420p"
        for frame in video:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def test_gif_written_with_imageio(tmp_path):
    video = frames()
    iio.imwrite(tmp_path / "a.gif", np.stack(video), duration=100, loop=0)
    shutil.copy(tmp_path / "a.gif", tmp_path / "b.gif")
    same = quality.compare_media(tmp_path / "a.gif", tmp_path / "b.gif")
    assert same["frames"] == 6 and same["psnr_infinite"] and same["ssim"] == pytest.approx(1.0)
    assert same["media"] == "video" and same["passed"]
    damaged = [f.copy() for f in video]
    damaged[4] = np.zeros_like(damaged[4])
    iio.imwrite(tmp_path / "c.gif", np.stack(damaged), duration=100, loop=0)
    r = quality.compare_media(tmp_path / "a.gif", tmp_path / "c.gif")
    assert r["worst_frame"]["index"] == 4 and r["worst_frame"]["ssim"] < 0.2
    assert not r["passed"] and r["psnr_db"] is not None


def test_mp4_frames_and_frame_count_mismatch(tmp_path):
    video = frames()
    write_mp4(tmp_path / "a.mp4", video)
    shutil.copy(tmp_path / "a.mp4", tmp_path / "b.mp4")
    r = quality.compare_media(tmp_path / "a.mp4", tmp_path / "b.mp4")
    assert r["frames"] == 6 and r["psnr_infinite"] and r["worst_frame"]["psnr_infinite"]
    noisy = [np.clip(f.astype(int) + (k == 2) * 60, 0, 255).astype(np.uint8) for k, f in enumerate(video)]
    write_mp4(tmp_path / "c.mp4", noisy)
    r = quality.compare_media(tmp_path / "a.mp4", tmp_path / "c.mp4")
    assert r["worst_frame"]["index"] == 2 and r["psnr_db"] > 0
    write_mp4(tmp_path / "short.mp4", video[:4])
    with pytest.raises(quality.QualityError, match="frame counts differ"):
        quality.compare_media(tmp_path / "a.mp4", tmp_path / "short.mp4")


def example_cells():
    document = json.loads((TEST_FIXTURES / "bench-report" / "example.json").read_text())
    return [Cell.from_json(c) for c in document["cells"]]


def test_byte_identity_groups_cells_by_hash():
    cells = example_cells()
    check = quality.byte_identity(cells, ["eager", "bcg"])
    assert check["identical"] and check["passed"] and len(check["groups"]) == 1
    assert check["groups"][0]["cells"] == list(range(8))
    cells[6].outputs[0]["sha256"] = "0" * 64
    cells[2].outputs = []
    check = quality.byte_identity(cells, ["eager", "bcg"])
    assert not check["passed"] and [g["cells"] for g in check["groups"]] == [[0, 1, 3, 4, 5, 7], [6]]
    assert check["groups"][1]["arms"] == ["bcg"] and check["cells_without_outputs"] == [2]


def test_output_quality_scores_a_lossy_arm_against_the_reference(tmp_path):
    ref = shutil.copy(TEST_FIXTURES / PNG, tmp_path / "ref.png")
    outs = {0: ref, 1: perturbed(ref, tmp_path / "hi1.png", 2), 2: perturbed(ref, tmp_path / "hi2.png", 40, 1)}
    cells = [Cell(index=i, arm="eager" if i == 0 else "high", status="valid",
                  outputs=[{"path": str(p), "sha256": fileio.sha256_file(p), "bytes": 1}]) for i, p in outs.items()]
    arms = {"eager": {"quality": "lossless"}, "high": {"quality": "high"}}
    result = quality.output_quality(cells, arms, "eager")
    identity, similarity = result["checks"]
    assert identity["kind"] == "byte_identity" and identity["passed"]
    assert similarity["reference"]["cell"] == 0 and [r["cell"] for r in similarity["results"]] == [1, 2]
    assert [r["passed"] for r in similarity["results"]] == [True, False]
    assert similarity["thresholds"] == {"ssim_min": 0.95, "psnr_min_db": 28.0}
    assert result["passed"] is False
    validator = Draft202012Validator(
        {"$ref": contract.SCHEMA_BASE_URI + "bench-report.v1.schema.json#/$defs/output_quality"},
        registry=contract._registry())
    assert list(validator.iter_errors(result)) == []
    assert quality.output_quality([dataclasses.replace(c, outputs=[]) for c in cells], arms, "eager") is None


def test_default_thresholds():
    assert quality.DEFAULT_THRESHOLDS["video"] == quality.Thresholds(0.92, 24.0)
