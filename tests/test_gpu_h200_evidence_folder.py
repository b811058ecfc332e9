"""The seed experiment as one `collect_pr_evidence.py run` on a real H200 (sglang 0.5.23, FLUX.1-dev-shaped model,
1024x1024, 28 steps, eager vs BCG, both arms `--attention-backend torch_sdpa`; tests/gpu_harness/run_h200_0523.sh
PARTS=evidence, 2026-12-04). The folder is kept in tests/fixtures/gpu-h200-0.5.23/evidence-folder without what is too
large for the repository (evidence-dropped.txt: the two traces, the plot, the replay's three distinct outputs); the
campaign's 8 outputs and warm-ups are one image (sha256 2c0dbc1f…), kept once. A reviewer's `verify` over it must
agree with everything stored and miss exactly the dropped files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import TEST_FIXTURES, run_script

H200 = TEST_FIXTURES / "gpu-h200-0.5.23"
OUTPUT_SHA = "2c0dbc1fb78aaaa85db285979b5986f184e7c6858d5d12ee3db012c58e8f15f2"


def _folder(tmp_path: Path) -> Path:
    """The kept folder with the one campaign image restored wherever the manifest records its hash."""
    folder = tmp_path / "evidence"
    shutil.copytree(H200 / "evidence-folder", folder)
    first = run_script("collect_pr_evidence", "verify", str(folder), "--json")
    for finding in first.document["findings"]:
        if finding["check"] == "missing" and OUTPUT_SHA in finding["expected"]:
            shutil.copyfile(H200 / "evidence-output-2c0dbc1f.png", folder / finding["file"])
    return folder


def test_verify_agrees_with_everything_kept_and_misses_only_the_dropped_files(tmp_path):
    result = run_script("collect_pr_evidence", "verify", str(_folder(tmp_path)), "--json")
    assert result.returncode != 0  # the dropped files are missing, and verify says so
    findings = result.document["findings"]
    dropped = (H200 / "evidence-dropped.txt").read_text().split()
    assert sorted(f["file"] for f in findings) == sorted(dropped)
    assert {f["check"] for f in findings} == {"missing"}
    checked = result.document["checked"]
    assert checked["cells_judged"] == 8 and checked["statistics"] and checked["markdown"]


def test_a_changed_number_in_a_kept_perf_dump_is_named(tmp_path):
    folder = _folder(tmp_path)
    dump = next((folder / "campaign").glob("*eager__r01p01/*.perf.json"))
    text = dump.read_text()
    doc = json.loads(text)
    doc["total_duration_ms"] = doc["total_duration_ms"] * 0.9
    dump.write_text(json.dumps(doc))
    findings = run_script("collect_pr_evidence", "verify", str(folder), "--json").document["findings"]
    assert any(f["file"].endswith(dump.name) and f["check"] != "missing" for f in findings)


def test_the_folder_states_the_seed_experiments_facts():
    doc = json.loads((H200 / "evidence-folder" / "evidence.json").read_text())
    assert doc["state"] == "complete" and doc["request"]["experiment"] == "bcg"
    assert doc["request"]["common_args"] == ["--attention-backend", "torch_sdpa"]
    assert {s["name"]: s["status"] for s in doc["steps"]} == {
        "readiness": "done", "campaign": "done", "output_identity": "done", "profile": "done",
        "trace_analysis": "done", "bcg_replay": "done", "cleanup": "done"}
    md = (H200 / "evidence-folder" / "EVIDENCE.md").read_text()
    assert "**Verdict: no_significant_change**" in md and "All 8 eager/bcg outputs are byte-identical" in md
    assert "| Captured segments per step | 0 | 58 |" in md
    assert "| Host per-kernel launches per denoise step | 1,136 | 62 |" in md
    assert "| eager | 24.959 | 25.738 |" in md  # allocated and reserved device memory, apart
    steps = (H200 / "evidence-steps.txt").read_text()
    assert "evidence rc=0" in steps and "evidence-verify rc=0" in steps  # verified on the machine too
