"""The real sglang engine on the tiny models that take an input image, on CPU: the FLUX.2 Klein image edit and the
Wan2.1 image-to-video. One evidence folder per model (a warm A/B/B/A campaign under the sequential rule, a profile of
each arm, the trace analysis) read by every test. The input image (an asset the bundle ships, installed by the run
into an empty work folder) reaches the engine's encoders in every cell; the cells are judged on the decoded output,
the folder verifies, `judge_run` checks a cell against the preset and the profile trace has the image-encoding stage
beside the denoise steps. Both releases."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import CPU_EVIDENCE_OPTIONS, assert_announced_and_summarised, run_script
from engine_release import DEFAULT_RELEASE, INSTALLED, OLDER_RELEASE, expects
from sgl_diffusion_bench.engine import tiny_model
from sgl_diffusion_bench.judging import output_check

pytestmark = [pytest.mark.engine, expects(DEFAULT_RELEASE, OLDER_RELEASE)]


@dataclasses.dataclass(frozen=True)
class Kind:
    preset: str
    decoded: tuple  # (kind, width, height, frames) of every output
    encoders: tuple[str, ...]  # the stages that take the input image, in the engine's pipeline
    loaded: str | None  # a line of the warm engine's log: the image encoder loaded by the engine's own loader
    wrong: tuple[tuple[str, str], str]  # a judge_run flag the output misses, and what it says


EDIT = Kind("tiny-flux2-edit-cpu", ("image", 64, 64, None), ("ImageVAEEncodingStage",), None,
            (("--size", "128x64"), "an image of the wrong shape: width 64 (requested 128)"))
I2V = Kind("tiny-wan-i2v-cpu", ("video", 64, 64, 5), ("ImageEncodingStage", "ImageVAEEncodingStage"),
           "Loaded image_encoder: CLIPVisionModel (sgl-diffusion version)",
           (("--num-frames", "9"), "a video of the wrong shape: frames 5 (requested 9)"))


@pytest.fixture(scope="module", params=[EDIT, I2V], ids=["edit", "i2v"])
def evidence(request, tmp_path_factory) -> dict:
    kind: Kind = request.param
    root = tmp_path_factory.mktemp(kind.preset)
    env = {"DIFFUSION_BENCH_WORKDIR": str(root / "work"), tiny_model.CACHE_ENV: str(tiny_model.default_cache_dir())}
    run = run_script("collect_pr_evidence", "run", "--out", str(root / "out"), "--model", kind.preset,
                     *CPU_EVIDENCE_OPTIONS, "--json", env=env, timeout=1500)
    assert run.returncode == 0 and run.document["state"] == "complete", run.stderr[-3000:]
    (report_path,) = (root / "out" / "campaign").glob("*.bench-report.json")
    image = root / "work" / "inputs" / "diffusion_benchmark" / "figs" / "tiny_input_64.png"
    return {"kind": kind, "out": root / "out", "run": run, "report": json.loads(report_path.read_text()),
            "image": image}


def test_every_cell_encodes_the_bundled_input_image_and_is_judged_on_its_output(evidence):
    assert_announced_and_summarised(evidence["run"].stderr, "collect_pr_evidence")
    kind, report, image = evidence["kind"], evidence["report"], evidence["image"]
    cells = report["cells"]
    assert [c["status"] for c in cells] == ["valid"] * 8 and report["campaign"]["preset"] == kind.preset
    assert image.is_file() and all(f"--image-path={image}" in c["argv"] for c in cells)
    for cell in cells:
        decoded = output_check.decode(Path(cell["outputs"][0]["path"]))
        assert (decoded.kind, decoded.width, decoded.height, decoded.frames) == kind.decoded
        log = (Path(cell["outputs"][0]["path"]).parent / "engine.log").read_text()
        assert f"image_path: ['{image}']" in log
        stages = re.search(r"Running pipeline stages: (\[[^]]*\])", log)
        assert stages and all(f"'{s}'" in stages.group(1) for s in kind.encoders), log[-2000:]
    if kind.loaded:
        warm = evidence["out"] / "campaign" / f"{kind.preset}__evidence__warm-e1" / "engine.log"
        assert kind.loaded in warm.read_text()  # the engine's own loader, not the plain Hugging Face class
    (identity,) = report["summary"]["output_quality"]["checks"]
    assert identity["kind"] == "byte_identity" and identity["passed"]  # same seed and image: the same output
    assert all(len(c["perf"]["denoise_steps_ms"]) == 2 for c in cells)
    assert "**Verdict: " in (evidence["out"] / "EVIDENCE.md").read_text()
    verify = run_script("collect_pr_evidence", "verify", str(evidence["out"]), "--json")
    assert verify.returncode == 0 and verify.document["ok"], verify.document["findings"]


def test_judge_run_checks_a_cell_against_the_presets_shape(evidence):
    kind = evidence["kind"]
    cell = next(c for c in evidence["report"]["cells"] if c["arm"] == "b")
    folder = Path(cell["outputs"][0]["path"]).parent
    given = ("--log", str(folder / "engine.log"), "--perf-dump", str(next(folder.glob("*.perf.json"))), "--output",
             cell["outputs"][0]["path"], "--preset", kind.preset, "--json")
    judged = run_script("judge_run", *given)
    assert judged.returncode == 0 and judged.document["status"] == "valid", judged.document["reasons"]
    assert judged.document["intent"]["requested"] == {"width": 64, "height": 64, "num_frames": kind.decoded[3]}
    (flag, says) = kind.wrong
    wrong = run_script("judge_run", *given, *flag)
    assert wrong.returncode == 1 and any(says in r for r in wrong.document["reasons"]), wrong.document["reasons"]


def test_the_profile_trace_has_its_image_encoding_stage_and_denoise_steps(evidence):
    (trace,) = (evidence["out"] / "profile").glob("*-baseline__profile/traces/*.trace.json.gz")
    hotspots = run_script("analyze_trace", "hotspots", str(trace), "--json").document
    assert {"ImageEncodingStage", "DenoisingStage", "DecodingStage"} <= set(hotspots["stages"])
    assert hotspots["stages"]["ImageEncodingStage"]["cpu_us"] > 0 and hotspots["kernels"] == []  # CPU: no kernels
    steps = ["denoising_step_0", "denoising_step_1"] if INSTALLED == DEFAULT_RELEASE else []
    assert [s["label"] for s in hotspots["steps"]] == steps
