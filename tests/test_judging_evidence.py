"""judge_run and the runner judge the same evidence the same way: memory kind from the run's own log on both releases
and both devices, outputs opened at the requested shape, a warm cell judged with and without its engine's log, and a
profiled run marked as such. Every case is a recorded real run kept in tests/fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.judging import (host_load, log_gates, log_markers, memory_evidence, output_check, request_path,
                                         run_judge)
from sgl_diffusion_bench.judging.cell import Cell

CPU_0510 = TEST_FIXTURES / "engine-cpu-0.5.10"
CPU_0523 = TEST_FIXTURES / "engine-cpu-0.5.23"
H200_0523 = TEST_FIXTURES / "gpu-h200-0.5.23"
H200_0510 = TEST_FIXTURES / "sglang-0.5.10-h200"
CAMPAIGN = H200_0523 / "campaign"
BCG_CELL = "flux-1gpu__h200warm__bcg__r01p02"  # the kept BCG cell of the warm H200 campaign, served by engine e2


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


@pytest.mark.parametrize("log, kind", [
    (CPU_0510 / "native-ok" / "log.txt", "process_rss"),  # 0.5.10-era adapter line, b5 active
    (CPU_0510 / "gen-failed-rc0-b5-off" / "log.txt", None),  # the same line with b5 disabled: no stand-in ran
    (CPU_0523 / "native-ok" / "log.txt", None),  # 0.5.23 on CPU: b5 not needed, device=cpu
    (H200_0523 / "direct-pair" / "eager" / "log.txt", "device"),
    (CAMPAIGN / "warm-e2.engine.log", "device"),
    (H200_0510 / "tiny_plain" / "log.txt", "device"),
])
def test_memory_kind_comes_from_the_runs_own_log(log, kind):
    evidence = memory_evidence.evidence_of(_lines(log))
    assert evidence.kind == kind, evidence.basis
    assert evidence.basis  # says which line decided, or why none did


def test_the_adapters_b5_line_means_process_rss_and_silence_means_unknown():
    applied = "[sgl-cpu-adapter] b5 applied (pid 7): torch.cpu lacks max_memory_reserved; defined the RSS stand-in"
    assert memory_evidence.evidence_of([applied]).kind == "process_rss"
    assert memory_evidence.evidence_of(["[sgl-cpu-adapter] b5 not-needed (pid 7): torch.cpu has it"]).kind is None
    assert memory_evidence.evidence_of(["[sgl-cpu-adapter] inactive: accelerator_present (pid 9)"]).kind == "device"
    assert memory_evidence.evidence_of(["nothing about memory here"]).kind is None


def _judge(*args: str):
    return run_main("judge_run", "--json", *args)


def _png(path: Path, size=(64, 64)) -> Path:
    rng = np.random.default_rng(0)  # noise: a PNG that cannot compress to a few bytes, so truncation bites
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def _mp4(path: Path, frames: int, size=(64, 64)) -> Path:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), i * 20, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def test_judge_run_names_the_memory_of_the_0510_cpu_run_as_the_runner_does(tmp_path):
    """The issue's repro: the 0.5.10 adapter line used to be read as device memory by judge_run."""
    run = CPU_0510 / "native-ok"
    doc = _judge("--log", str(run / "log.txt"), "--perf-dump", str(run / "perf.json"), "--output",
                 str(_png(tmp_path / "o.png")), "--engine-version", "0.5.10.post1", "--size", "64x64").document
    assert doc["status"] == "valid" and doc["intent"]["memory_kind"] == "process_rss"
    assert doc["perf"]["memory_kind"] == "process_rss" and doc["perf"]["peak_memory_mb"] == 679.64


def test_a_cpu_0523_run_withholds_memory_it_cannot_name(tmp_path):
    run = CPU_0523 / "native-ok"
    doc = _judge("--log", str(run / "log.txt"), "--perf-dump", str(run / "perf.json"), "--output",
                 str(_png(tmp_path / "o.png")), "--engine-version", "0.5.23").document
    assert doc["status"] == "valid" and doc["intent"]["memory_kind"] is None
    assert doc["perf"]["peak_memory_mb"] is None and "device=cpu" not in doc["intent"]["memory_basis"]


@pytest.mark.parametrize("make, code", [
    (lambda d: (d / "o.png").write_bytes(b"") and None or d / "o.png", "artifacts.empty_output"),
    (lambda d: (d / "o.png").write_text("abcdef") and None or d / "o.png", "artifacts.undecodable_output"),
    (lambda d: _truncate(_png(d / "o.png")), "artifacts.undecodable_output"),
    (lambda d: _png(d / "o.png", (32, 64)), "artifacts.output_shape"),
])
def test_bad_outputs_do_not_count_in_judge_run(tmp_path, make, code):
    run = CPU_0510 / "native-ok"
    out = make(tmp_path)
    result = _judge("--log", str(run / "log.txt"), "--perf-dump", str(run / "perf.json"), "--output", str(out),
                    "--engine-version", "0.5.10.post1", "--size", "64x64")
    doc = result.document
    assert result.returncode == 1 and doc["status"] == "invalid" and doc["perf"] is None
    assert [r for r in doc["reasons"] if r.startswith(code) and str(out) in r], doc["reasons"]


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_no_output_given_and_output_missing_are_two_reasons(tmp_path):
    run = CPU_0510 / "native-ok"
    base = ["--log", str(run / "log.txt"), "--perf-dump", str(run / "perf.json"), "--engine-version", "0.5.10.post1"]
    not_given = _judge(*base).document
    missing = _judge(*base, "--output", str(tmp_path / "never-written.png")).document
    assert [r.split(":")[0] for r in not_given["reasons"]] == ["artifacts.no_output_given"]
    assert "artifacts.output_missing" in [r.split(":")[0] for r in missing["reasons"]]
    assert str(tmp_path / "never-written.png") in missing["reasons"][0]


def test_videos_are_decoded_with_their_frame_count(tmp_path):
    good = _mp4(tmp_path / "v.mp4", frames=5)
    assert output_check.check_output(good, output_check.RequestedShape(64, 64, 5)) == \
        {"kind": "video", "width": 64, "height": 64, "frames": 5}
    with pytest.raises(output_check.OutputProblem) as wrong:
        output_check.check_output(good, output_check.RequestedShape(64, 64, 9))
    assert wrong.value.code == "artifacts.output_shape" and "frames 5 (requested 9)" in wrong.value.message
    with pytest.raises(output_check.OutputProblem) as cut:
        output_check.check_output(_truncate(_mp4(tmp_path / "t.mp4", frames=5)), output_check.NOT_REQUESTED)
    assert cut.value.code == "artifacts.undecodable_output"


def test_the_runner_counts_no_zero_byte_output(tmp_path):
    """The runner's own path (finish_cell, used by cold cells and warm requests) on a recorded real run."""
    recorded = CPU_0523 / "native-ok"
    shutil.copy(recorded / "perf.json", tmp_path / "perf.json")
    (tmp_path / "out.png").write_bytes(b"")
    log = (recorded / "log.txt").read_text()
    cell = Cell(index=0, arm="a", argv=["sglang", "generate", "--width", "64", "--height", "64"])
    request_path.finish_cell(cell, verdict=log_gates.scan_log(log, log_markers.markers_for_version("0.5.23"),
                                                             require_native=True),
                             returncode=0, stop_reason=None, stop_line=None, stopped_after_s=None, wall_s=1.0,
                             perf_dump_path=tmp_path / "perf.json", output_dir=tmp_path, output_stem="out",
                             task="t2i", memory_kind=None, requested=output_check.requested_shape(cell.argv),
                             boundary=request_path.Boundary(False, [], [], host_load.sample(), host_load.sample()))
    assert cell.status == "invalid" and cell.perf is None
    assert cell.reasons == [f"artifacts.empty_output: {tmp_path / 'out.png'} is empty (0 bytes)"]
    assert cell.outputs[0]["bytes"] == 0  # still listed, with its hash, for debugging


def _warm_campaign_folder(tmp_path: Path, with_engine: bool) -> Path:
    """The kept warm BCG cell laid out as the runner writes it: <run>/engine.log beside <label>__warm-e2/."""
    cell_dir = tmp_path / BCG_CELL
    cell_dir.mkdir()
    shutil.copy(CAMPAIGN / "cell-bcg-r01p02.engine.log", cell_dir / "engine.log")
    shutil.copy(CAMPAIGN / "cell-bcg-r01p02.perf.json", cell_dir / f"{BCG_CELL}.perf.json")
    Image.new("RGB", (1024, 1024)).save(cell_dir / "flux-1gpu_h200warm_bcg_r01p02.png")
    engine_dir = tmp_path / ("flux-1gpu__h200warm__warm-e2" if with_engine else "kept-elsewhere")
    engine_dir.mkdir()
    shutil.copy(CAMPAIGN / "warm-e2.engine.log", engine_dir / "engine.log")
    return cell_dir


def _judge_warm(cell_dir: Path, *extra: str):
    return _judge("--log", str(cell_dir / "engine.log"), "--perf-dump", str(cell_dir / f"{BCG_CELL}.perf.json"),
                  "--output", str(cell_dir / "flux-1gpu_h200warm_bcg_r01p02.png"), "--bcg", "--quality", "lossless",
                  "--engine-version", "0.5.23", "--size", "1024x1024", *extra)


def test_a_warm_cell_is_judged_like_the_runner_judged_it(tmp_path):
    cell_dir = _warm_campaign_folder(tmp_path, with_engine=True)
    doc = _judge_warm(cell_dir).document
    assert doc["status"] == "valid", doc["reasons"]
    assert doc["intent"]["engine_log"] == str(tmp_path / "flux-1gpu__h200warm__warm-e2" / "engine.log")
    assert doc["intent"]["memory_kind"] == "device" and doc["log"]["bcg"]["capture_seen"]
    import json
    report = json.loads((CAMPAIGN / "bench-report.json").read_text())
    runner = next(c for c in report["cells"] if c["perf_dump_path"].endswith(f"{BCG_CELL}.perf.json"))
    assert runner["status"] == "valid" and doc["perf"] == runner["perf"]  # same numbers, same memory kind


def test_a_warm_cell_without_its_engine_log_says_which_file_would_cure_it(tmp_path):
    cell_dir = _warm_campaign_folder(tmp_path, with_engine=False)
    alone = _judge_warm(cell_dir)
    codes = [r.split(":")[0] for r in alone.document["reasons"]]
    assert alone.returncode == 1 and codes == ["backend.no_native_evidence", "bcg.no_capture"]
    assert all("--engine-log" in r for r in alone.document["reasons"])
    assert "--no-require-native" in alone.document["reasons"][0]
    given = _judge_warm(cell_dir, "--engine-log", str(tmp_path / "kept-elsewhere" / "engine.log"))
    assert given.returncode == 0 and given.document["status"] == "valid"


def test_a_profiled_run_is_judged_as_a_profile(tmp_path):
    run = H200_0523 / "profile-pair" / "eager"
    out = next(run.glob("*.png"), None)
    args = ["--log", str(run / "log.txt"), "--perf-dump", str(run / "perf.json"), "--engine-version", "0.5.23"]
    if out is None:  # the kept pair has no image: judge its evidence with a stand-in of the requested shape
        out = _png(tmp_path / "o.png", (1024, 1024))
    measured = _judge(*args, "--output", str(out)).document
    assert measured["status"] == "invalid"
    assert any(r.startswith("profiler.timings_distorted") and "--intent profile" in r for r in measured["reasons"])
    profiled = _judge(*args, "--output", str(out), "--intent", "profile").document
    assert profiled["status"] == "valid", profiled["reasons"]
    assert profiled["intent"]["purpose"] == "profile" and profiled["timing_note"] == run_judge.PROFILE_NOTE
