"""collect_pr_evidence on the real CPU engine (tiny-flux-cpu): one folder, made by a run that is killed during its
campaign and then run again; every test reads that one folder (or a copy it tampers with). Killed and resumed, the
folder is complete, no finished step ran twice (the engine starts are counted in the documents), verify passes, and
editing a perf dump, deleting a log or changing a line of EVIDENCE.md each makes verify fail naming that file."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (CPU_EVIDENCE_OPTIONS, HF_TOKEN_CANARY, REPO, SCRIPTS, assert_announced_and_summarised,
                      run_script)

pytestmark = pytest.mark.engine

# --engine-overlap early: both engines launch together, sized by the weights on disk (auto does so on a GPU only)
REQUEST = ("--model", "tiny-flux-cpu", *CPU_EVIDENCE_OPTIONS)
RUN = ("collect_pr_evidence", "run", *REQUEST)  # SKILL.md's CPU evidence block is this request (test_docs.py)


def _manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / "evidence.json").read_text())
    except (OSError, ValueError):
        return {}


def _step(doc: dict, name: str) -> dict:
    return next(s for s in doc["steps"] if s["name"] == name)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> dict:
    """Start a run, SIGTERM it once the manifest shows its campaign running, keep what the kill left, run it again."""
    base = tmp_path_factory.mktemp("evidence")
    out, cache = base / "out", base / "cache"
    args = [sys.executable, str(SCRIPTS / "collect_pr_evidence.py"), "run", "--out", str(out), *REQUEST,
            "--model-cache-root", str(cache), "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "HF_TOKEN": HF_TOKEN_CANARY})
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline and proc.poll() is None:
        doc = _manifest(out)
        if doc and _step(doc, "campaign")["status"] == "running":
            time.sleep(5)  # inside the campaign: its engines are starting
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(1)
    stdout, stderr = proc.communicate(timeout=600)
    killed = {"returncode": proc.returncode, "stdout": stdout, "stderr": stderr, "manifest": _manifest(out)}
    resumed = run_script("collect_pr_evidence", *args[2:], timeout=1800)
    return {"out": out, "killed": killed, "resumed": resumed}


def test_a_killed_run_leaves_a_manifest_naming_the_step_it_interrupted(folder):
    killed = folder["killed"]
    assert killed["returncode"] == 130, killed["stderr"][-3000:]
    assert json.loads(killed["stdout"])["error"]["code"] == "run.interrupted"
    doc = killed["manifest"]
    assert doc["state"] == "interrupted" and doc["interrupted_step"] == "campaign"
    assert _step(doc, "readiness")["status"] == "done" and _step(doc, "campaign")["status"] == "interrupted"
    assert all(_step(doc, n)["status"] == "pending" for n in ("profile", "trace_analysis", "cleanup"))


def test_the_resumed_run_completes_and_no_finished_step_ran_twice(folder):
    run = folder["resumed"]
    doc = run.document
    assert run.returncode == 0 and doc["state"] == "complete" and doc["ok"], run.stderr[-3000:]
    last = assert_announced_and_summarised(run.stderr, "collect_pr_evidence")[-1]
    assert last.startswith("[collect_pr_evidence] evidence complete: verdict ") and "steps 6 done, 1 skipped" in last
    assert str(folder["out"] / "EVIDENCE.md") in last and last.endswith(f"verify {doc['out_dir']}")
    statuses = {s["name"]: s["status"] for s in doc["steps"]}
    assert statuses == {"readiness": "done", "campaign": "done", "output_identity": "done", "profile": "done",
                        "trace_analysis": "done", "bcg_replay": "skipped", "cleanup": "done"}
    assert "no arm uses breakable CUDA graphs" in _step(doc, "bcg_replay")["reason"]
    # readiness finished before the kill and was kept: the same start time, one attempt
    assert _step(doc, "readiness")["started_at"] == _step(folder["killed"]["manifest"], "readiness")["started_at"]
    assert {s["name"]: s["attempts"] for s in doc["steps"]} == {
        "readiness": 1, "campaign": 2, "output_identity": 1, "profile": 1, "trace_analysis": 1, "bcg_replay": 1,
        "cleanup": 1}
    report = json.loads((folder["out"] / _step(doc, "campaign")["document"]).read_text())
    assert report["engines"]["engine_starts"] == 2  # one warm engine per arm, in the campaign that finished
    assert len(report["cells"]) == 8 and all(c["status"] == "valid" for c in report["cells"])
    for arm in ("baseline", "candidate"):
        profile = json.loads((folder["out"] / "profile" / f"profile-{arm}.json").read_text())
        assert profile["status"] == "valid" and len(profile["traces"]) == 1  # one profiled engine start per arm
    cleanup = json.loads((folder["out"] / "cleanup" / "cache-verify.json").read_text())
    assert cleanup["residue_count"] == 0 and cleanup["entry_count"] >= 1  # the killed attempt's entry stays too
    markdown = (folder["out"] / "EVIDENCE.md").read_text()
    order = ["## Claim and verdict", "## Environment", "## A/B/B/A run order", "## Output identity",
             "## Profile comparison", "## Replay correctness", "## Cache cleanup", "## How to reproduce"]
    assert [markdown.index(h) for h in order] == sorted(markdown.index(h) for h in order)
    verdict = report["summary"]["comparison"]["verdict"]
    assert f"**Verdict: {verdict}**" in markdown and "byte-identical" in markdown
    assert (folder["out"] / "evidence-plot.png").stat().st_size > 10_000


def _utc(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_the_engines_loaded_side_by_side_and_the_evidence_says_so(folder):
    """Both engines launched together (the tiny model's weights on disk fit twice over the free memory), before
    either was READY; both finished before the first measured request; every cell valid, one output across both
    engines; the shutdowns ran at once, so the campaign waited for the slower one only."""
    report = json.loads((folder["out"] / _step(folder["resumed"].document, "campaign")["document"]).read_text())
    engines = report["engines"]
    overlap = engines["overlap"]
    assert overlap["overlapped"] and overlap["mode"] == "early" and overlap["when"] == "at_launch", overlap
    assert overlap["weights_bytes"] > 0 and overlap["needed_bytes"] == int(overlap["weights_bytes"] * 2 * 1.5)
    assert "launched together" in overlap["reason"] and engines["schedule"] == "interleaved"
    e1, e2 = engines["starts"]
    assert e1["overlapped_with"] == ["e2"] and e2["overlapped_with"] == ["e1"]
    assert _utc(e1["launched_at"]) <= _utc(e2["launched_at"]) < _utc(e1["ready_at"])
    cells = report["cells"]
    # no measured request beside a loading engine (a cell's started_at is in whole seconds, truncated)
    first_cell = min(_utc(c["started_at"]) for c in cells)
    assert first_cell >= _utc(e2["finished_at"]).replace(microsecond=0)
    for start in (e1, e2):  # each engine's load timed from its own launch to its own READY
        load = (_utc(start["ready_at"]) - _utc(start["launched_at"])).total_seconds()
        assert start["load_s"] == pytest.approx(load, abs=0.01) and start["warmup_s"] > 0
    assert {c["engine"]["id"] for c in cells} == {"e1", "e2"} and all(c["status"] == "valid" for c in cells)
    assert len({o["sha256"] for c in cells for o in c["outputs"]}) == 1
    shutdowns = [(_utc(s["closed_at"]) - datetime.timedelta(seconds=s["shutdown_s"]), _utc(s["closed_at"]))
                 for s in (e1, e2)]
    assert shutdowns[0][0] < shutdowns[1][1] and shutdowns[1][0] < shutdowns[0][1], shutdowns  # at once
    markdown = (folder["out"] / "EVIDENCE.md").read_text()
    assert "- Engine overlap: e1 with e2 started side by side (all 2 engines launched together" in markdown
    assert "--engine-overlap early" in markdown  # the reproduce command asks for the same


def test_verify_passes_on_the_folder_and_a_second_run_redoes_nothing(folder, tmp_path):
    out = folder["out"]
    run = run_script("collect_pr_evidence", "verify", str(out), "--json")
    assert run.returncode == 0 and run.document["ok"], run.document["findings"]
    checked = run.document["checked"]
    assert checked["cells_judged"] == 8 and checked["statistics"] and checked["markdown"]
    assert checked["documents"] >= 5
    again = run_script("collect_pr_evidence", "run", "--out", str(out), *REQUEST, "--model-cache-root",
                       str(out.parent / "cache"), "--json", timeout=600)
    assert again.returncode == 0 and [s["attempts"] for s in again.document["steps"]] == \
        [s["attempts"] for s in folder["resumed"].document["steps"]]

def test_a_moved_folder_verifies_and_resumes_with_no_step_redone(folder, tmp_path):
    """Moved (the first location gone for the test: nothing may read it), the folder verifies, a run on it redoes no
    step (paths are read relative to the folder; the campaign report's own paths through its plan.output_dir),
    and it still verifies after that run has moved the manifest's out_dir on."""
    out = folder["out"]
    moved, away = tmp_path / "moved", out.with_name(out.name + ".away")
    shutil.copytree(out, moved)
    out.rename(away)
    try:
        first = run_script("collect_pr_evidence", "verify", str(moved), "--json")
        assert first.returncode == 0 and first.document["ok"], first.document["findings"]
        again = run_script("collect_pr_evidence", "run", "--out", str(moved), *REQUEST, "--model-cache-root",
                           str(out.parent / "cache"), "--json", timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        assert [s["attempts"] for s in again.document["steps"]] == \
            [s["attempts"] for s in folder["resumed"].document["steps"]]
        assert again.document["out_dir"] == str(moved.resolve())
        after = run_script("collect_pr_evidence", "verify", str(moved), "--json")
        assert after.returncode == 0 and after.document["ok"], after.document["findings"]
        assert after.document["checked"]["cells_judged"] == 8
    finally:
        away.rename(out)


def test_the_evidence_states_the_steady_state_the_verdict_is_on(folder):
    """Build 4: each warm engine's first measured request is set beside the steady state in the report and in
    EVIDENCE.md, and verify (above) recomputed the same steady-state verdict from the stored numbers."""
    report = json.loads((folder["out"] / _step(folder["resumed"].document, "campaign")["document"]).read_text())
    comparison, arms = report["summary"]["comparison"], report["summary"]["arms"]
    firsts = [f for arm in arms.values() for f in arm["first_requests"]]
    assert sorted(f["cell"] for f in firsts if not f["in_steady_state"]) == comparison["steady_state"]["excluded_cells"]
    assert len(comparison["steady_state"]["excluded_cells"]) == 2  # one warm engine per arm
    assert all(arm["n_used"] == arm["n_valid"] - 1 for arm in arms.values())
    markdown = (folder["out"] / "EVIDENCE.md").read_text()
    assert "means over the steady state" in markdown
    assert "the verdict and the statistics are on the steady state" in markdown


def _tampered(folder, tmp_path, change) -> list[dict]:
    copy = tmp_path / "copy"
    shutil.copytree(folder["out"], copy)
    change(copy)
    run = run_script("collect_pr_evidence", "verify", str(copy), "--json")
    assert run.returncode == 1 and not run.document["ok"]
    return run.document["findings"]


def test_an_edited_perf_dump_fails_verify_naming_it(folder, tmp_path):
    report = json.loads((folder["out"] / _step(folder["resumed"].document, "campaign")["document"]).read_text())
    dump = Path(report["cells"][0]["perf_dump_path"]).relative_to(_manifest(folder["out"])["out_dir"])

    def edit(copy: Path) -> None:
        doc = json.loads((copy / dump).read_text())
        doc["total_duration_ms"] = doc["total_duration_ms"] * 0.5
        (copy / dump).write_text(json.dumps(doc))

    findings = _tampered(folder, tmp_path, edit)
    named = {(f["file"], f["check"]) for f in findings}
    assert named == {(dump.as_posix(), "hash"), (dump.as_posix(), "perf_dump")}, findings  # only the changed file


def test_a_deleted_log_fails_verify_naming_it(folder, tmp_path):
    logs = sorted(p for p in (folder["out"] / "campaign").rglob("*.log"))
    gone = logs[0].relative_to(folder["out"]).as_posix()
    findings = _tampered(folder, tmp_path, lambda copy: (copy / gone).unlink())
    assert (gone, "missing") in {(f["file"], f["check"]) for f in findings}, findings


def test_a_changed_line_of_evidence_md_fails_verify_naming_it(folder, tmp_path):
    def edit(copy: Path) -> None:
        text = (copy / "EVIDENCE.md").read_text()
        (copy / "EVIDENCE.md").write_text(text.replace("**Verdict: ", "**Verdict: improved, not ", 1))

    findings = _tampered(folder, tmp_path, edit)
    assert {(f["file"], f["check"]) for f in findings} == {("EVIDENCE.md", "hash"), ("EVIDENCE.md", "markdown")}
