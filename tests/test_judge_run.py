"""judge_run gives a run made elsewhere the runner's own verdict: recorded real engine runs (sglang 0.5.10.post1 on
the tiny CPU model), judged through the CLI and through the runner's request path, agree reason for reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from conftest import TEST_FIXTURES, run_script
from sgl_diffusion_bench import log_gates, log_markers, request_path, run_judge

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
    return run_script("judge_run", *args)


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
    bcg = _judge("native-ok", tmp_path, "--output", str(out), "--bcg").document
    assert bcg["status"] == "invalid" and any(r.startswith("bcg.") for r in bcg["reasons"]), bcg["reasons"]
    bare = _judge("native-ok", tmp_path).document  # no output given: the runner would not count it either
    assert bare["status"] == "invalid" and any(r.startswith("artifacts.no_output") for r in bare["reasons"])
