"""judge_run gives a run made elsewhere the runner's own verdict: recorded real engine runs (sglang 0.5.10.post1 on
the tiny CPU model), judged through the CLI and through the runner's request path, agree reason for reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.judging import log_gates, log_markers, request_path, run_judge

CPU = TEST_FIXTURES / "engine-cpu-0.5.10"
VERSION = "0.5.10.post1"


def _png(tmp_path: Path) -> Path:
    path = tmp_path / "out.png"
    Image.new("RGB", (64, 64), (10, 20, 30)).save(path)
    return path


def _judge(scenario: str, tmp_path: Path, *extra: str):
    args = ["--log", str(CPU / scenario / "log.txt"), "--engine-version", VERSION, "--json", *extra]
    if (CPU / scenario / "perf.json").is_file():
        args += ["--perf-dump", str(CPU / scenario / "perf.json")]
    return run_main("judge_run", *args)


@pytest.mark.parametrize("scenario, status", [("native-ok", "valid"), ("fallback-auto", "invalid"),
                                              ("gen-failed-rc0-b5-off", "invalid")])
def test_recorded_runs_get_the_runners_verdict(scenario, status, tmp_path):
    out = _png(tmp_path)
    run = _judge(scenario, tmp_path, "--output", str(out), "--exit-code", "0", "--task", "t2i")
    doc = run.document
    assert doc["schema"] == "judge-run.v1" and doc["status"] == status and run.returncode == (0 if status == "valid"
                                                                                               else 1)
    verdict = log_gates.scan_log((CPU / scenario / "log.txt").read_text(), log_markers.markers_for_version(VERSION),
                                 require_native=True)
    perf_path = CPU / scenario / "perf.json"
    given = perf_path.is_file()  # judge_run says "not given" where the runner says "not written"
    runner = request_path.judge_request(verdict=verdict, returncode=0, stop_reason=None,
                                        perf_dump_path=perf_path if given else None,
                                        output_paths=[out], memory_kind=doc["intent"]["memory_kind"],
                                        no_perf_dump_reason=request_path.NO_PERF_DUMP_WRITTEN if given
                                        else run_judge.NO_PERF_DUMP_GIVEN)
    assert doc["reasons"] == list(runner.reasons) and doc["status"] == runner.status  # the same gates, same words
    assert (doc["perf"] is None) == (status != "valid")  # a run that does not count shows no numbers


def test_intent_and_media_kinds_are_applied(tmp_path):
    out = _png(tmp_path)
    gif = tmp_path / "extra.gif"
    Image.new("RGB", (8, 8)).save(gif)
    doc = _judge("native-ok", tmp_path, "--output", str(out), "--output", str(gif), "--preset",
                 "tiny-flux-cpu").document
    assert doc["intent"]["task"] == "t2i" and doc["other_files"] == [str(gif)] and len(doc["outputs"]) == 1
    assert doc["intent"]["requested"] == {"width": 64, "height": 64, "num_frames": None}  # the preset's request
    small = tmp_path / "small.png"
    Image.new("RGB", (32, 32)).save(small)
    wrong = _judge("native-ok", tmp_path, "--output", str(small), "--preset", "tiny-flux-cpu").document
    assert wrong["status"] == "invalid" and any(
        r.startswith("artifacts.output_shape") and "an image" in r and "(requested 64)" in r for r in wrong["reasons"]
    ), wrong["reasons"]
    sized = _judge("native-ok", tmp_path, "--output", str(small), "--preset", "tiny-flux-cpu", "--size", "32x32")
    assert sized.document["intent"]["requested"]["width"] == 32  # --size wins over the preset's
    bcg = _judge("native-ok", tmp_path, "--output", str(out), "--bcg").document
    assert bcg["status"] == "invalid" and any(r.startswith("bcg.") for r in bcg["reasons"]), bcg["reasons"]
    bare = _judge("native-ok", tmp_path).document  # no output given: the runner would not count it either
    assert bare["status"] == "invalid" and any(r.startswith("artifacts.no_output") for r in bare["reasons"])


H200_CAMPAIGN = TEST_FIXTURES / "gpu-h200-0.5.23" / "evidence-at-launch-verified" / "campaign"
H200_CELL = "flux-1gpu__evidence__bcg__r01p02"


def _h200_cell(tmp_path: Path, edit) -> list[str]:
    """One counted BCG cell of the H200 campaign, with its warm engine's log beside it, its segment edited."""
    for name in (H200_CELL, "flux-1gpu__evidence__warm-e2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "engine.log").write_bytes((H200_CAMPAIGN / name / "engine.log").read_bytes())
    log = tmp_path / H200_CELL / "engine.log"
    log.write_text(edit(log.read_text(encoding="utf-8")), encoding="utf-8")
    return ["--log", str(log), "--engine-log", str(tmp_path / "flux-1gpu__evidence__warm-e2" / "engine.log"),
            "--engine-version", "0.5.23", "--perf-dump", str(H200_CAMPAIGN / H200_CELL / f"{H200_CELL}.perf.json"),
            "--output", str(TEST_FIXTURES / "gpu-h200-0.5.23" / "evidence-output-2c0dbc1f.png"), "--task", "t2i",
            "--bcg", "--json"]


def test_the_unedited_h200_segment_is_valid(tmp_path):
    run = run_main("judge_run", *_h200_cell(tmp_path, lambda text: text))
    assert run.document["status"] == "valid", run.document["reasons"]


@pytest.mark.parametrize("edit, code", [
    (lambda text: "", "log.empty_segment"),
    (lambda text: "\n".join(line for line in text.splitlines() if "saved to" not in line.lower()
                            and "dumped to" not in line.lower()), "log.no_request_evidence"),
    (lambda text: text + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n", "engine.oom"),
    (lambda text: text + "RuntimeError: CUDA error: an illegal memory access was encountered\n", "engine.exception"),
])
def test_an_emptied_or_failing_segment_is_never_valid(tmp_path, edit, code):
    """A counted cell's request log emptied, stripped of its completion lines, or ending in an engine exception:
    the perf dump beside it is as good as ever, and the run still does not count."""
    run = run_main("judge_run", *_h200_cell(tmp_path, edit))
    assert run.returncode == 1 and run.document["status"] == "invalid" and run.document["perf"] is None
    assert any(r.startswith(code + ":") for r in run.document["reasons"]), run.document["reasons"]
