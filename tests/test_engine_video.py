"""The real sglang engine on the tiny Wan2.1 text-to-video model, on CPU. One evidence folder (a warm A/B/B/A campaign
under the sequential rule, a profile of each arm, the trace analysis) read by every test: cells judged on the decoded
video (frames, size), `verify`, `judge_run` on a cell and the hotspots of its profile trace (the image-to-video
model: test_engine_image_input.py). The CPU adapter's gaps on record (0.5.23: b7 for Wan's blocks; 0.5.10.post1: the
same gaps as FLUX, its Wan blocks call no sgl-kernel CPU op). Both releases."""

from __future__ import annotations

import json

import pytest

from conftest import CPU_EVIDENCE_OPTIONS, assert_announced_and_summarised, run_script
from engine_release import DEFAULT_RELEASE, FLUX_GAPS_0510, INSTALLED, OLDER_RELEASE, expects
from sgl_diffusion_bench.judging import output_check
from pathlib import Path

pytestmark = [pytest.mark.engine, expects(DEFAULT_RELEASE, OLDER_RELEASE)]
# the adapter's patches a Wan run applies; b0 and gc too where the engine's own process imported torchvision and
# sglang (not where the probe's interpreter did and then became the warm engine)
WAN_PATCHES = {"b7", "fork"} if INSTALLED == DEFAULT_RELEASE else {*FLUX_GAPS_0510, "fork"}
AT_IMPORT = {"b0", "gc"}


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("video-evidence") / "out"
    run = run_script("collect_pr_evidence", "run", "--out", str(out), "--model", "tiny-wan-t2v-cpu",
                     *CPU_EVIDENCE_OPTIONS, "--json", timeout=1500)
    assert run.returncode == 0 and run.document["state"] == "complete", run.stderr[-3000:]
    (report_path,) = (out / "campaign").glob("*.bench-report.json")
    return {"out": out, "run": run, "report": json.loads(report_path.read_text())}


def test_the_video_campaign_is_valid_judged_on_its_frames_and_its_folder_verifies(evidence):
    assert_announced_and_summarised(evidence["run"].stderr, "collect_pr_evidence")
    report = evidence["report"]
    cells = report["cells"]
    assert [c["status"] for c in cells] == ["valid"] * 8 and report["campaign"]["preset"] == "tiny-wan-t2v-cpu"
    outputs = [Path(o["path"]) for c in cells for o in c["outputs"]]
    assert len(outputs) == 8 and all(p.suffix == ".mp4" for p in outputs)
    decoded = output_check.decode(outputs[0])
    assert (decoded.kind, decoded.width, decoded.height, decoded.frames) == ("video", 64, 64, 5)
    (identity,) = report["summary"]["output_quality"]["checks"]
    assert identity["kind"] == "byte_identity" and identity["passed"]  # same seed: the same video in both arms
    adapter = report["engine"]["adapter"]
    assert WAN_PATCHES <= set(adapter["applied"]) <= WAN_PATCHES | AT_IMPORT, adapter
    b7 = adapter["reasons"].get("b7") or next(n["reason"] for n in adapter["not_needed"] if n["id"] == "b7")
    assert "sgl-kernel" in b7  # applied, or why it was not needed (0.5.10.post1)
    assert all(c["perf"]["denoise_steps_ms"] and len(c["perf"]["denoise_steps_ms"]) == 2 for c in cells)
    markdown = (evidence["out"] / "EVIDENCE.md").read_text()
    assert "**Verdict: " in markdown and "All 8 a/b outputs are byte-identical" in markdown
    verify = run_script("collect_pr_evidence", "verify", str(evidence["out"]), "--json")
    assert verify.returncode == 0 and verify.document["ok"], verify.document["findings"]


def test_judge_run_checks_a_video_cell_against_the_presets_frames(evidence):
    cell = next(c for c in evidence["report"]["cells"] if c["arm"] == "a")
    folder = Path(cell["outputs"][0]["path"]).parent
    given = ("--log", str(folder / "engine.log"), "--perf-dump", str(next(folder.glob("*.perf.json"))), "--output",
             cell["outputs"][0]["path"], "--preset", "tiny-wan-t2v-cpu", "--json")
    judged = run_script("judge_run", *given)
    assert judged.returncode == 0 and judged.document["status"] == "valid", judged.document["reasons"]
    assert judged.document["intent"]["requested"] == {"width": 64, "height": 64, "num_frames": 5}
    wrong = run_script("judge_run", *given, "--num-frames", "9")
    assert wrong.returncode == 1 and any("a video of the wrong shape: frames 5 (requested 9)" in r
                                         for r in wrong.document["reasons"]), wrong.document["reasons"]


def test_the_video_profile_trace_has_the_stages_and_denoise_steps_of_a_wan_request(evidence):
    (trace,) = (evidence["out"] / "profile").glob("*-baseline__profile/traces/*.trace.json.gz")
    hotspots = run_script("analyze_trace", "hotspots", str(trace), "--json").document
    assert {"DenoisingStage", "DecodingStage"} <= set(hotspots["stages"])
    # 0.5.23's loop runs one method per step, whose frames number the steps; 0.5.10.post1's inline loop leaves the trace
    # no step range (its perf dump carries the step times, checked above)
    steps = ["denoising_step_0", "denoising_step_1"] if INSTALLED == DEFAULT_RELEASE else []
    assert [s["label"] for s in hotspots["steps"]] == steps
    assert hotspots["stages"]["DenoisingStage"]["cpu_us"] > 0 and hotspots["kernels"] == []  # CPU: no GPU kernels
