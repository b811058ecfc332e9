"""compare_perf: files mode on real H200 dumps, groups mode on the seed PR's rows, errors as error.v1."""

from __future__ import annotations

import json
import re

from conftest import TEST_FIXTURES, run_script

SEED = TEST_FIXTURES / "seed-pr-38591"
H200 = "sglang-0.5.10-h200"
EAGER = [str(SEED / f) for f in ("r1-a1-eager.json", "r1-a2-eager.json", "r2-a1-eager.json", "r2-a2-eager.json")]
BCG = [str(SEED / f) for f in ("r1-b1-bcg.json", "r1-b2-bcg.json", "r2-b1-bcg.json", "r2-b2-bcg.json")]


def test_groups_reproduce_the_seed_pr(tmp_path):
    md = tmp_path / "cmp.md"
    run = run_script("compare_perf", "--baseline", *EAGER, "--candidate", *BCG, "--markdown", str(md), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["schema"] == "compare.v1" and doc["mode"] == "groups" and len(doc["inputs"]) == 8
    (cmp,) = doc["comparisons"]
    assert abs(cmp["e2e_ms"]["baseline"] / 1000 - 4.315577) <= 1e-6 + 1e-12
    assert abs(cmp["e2e_ms"]["candidate"] / 1000 - 4.177754) <= 1e-6 + 1e-12
    assert round(cmp["e2e_ms"]["change_pct"], 3) == -3.194 and round(cmp["denoise_ms"]["change_pct"], 3) == -5.054
    stats = cmp["statistics"]
    assert stats["metrics"]["denoise_ms"]["verdict"] == "improved"
    assert stats["verdict"] == "no_significant_change"  # the 371 ms text-encoding outlier widens the E2E interval
    assert cmp["arms"]["candidate"]["outliers"][0]["attributed_stage"] == "TextEncodingStage"
    assert [s["name"] for s in cmp["stages"]][:2] == ["InputValidationStage", "TextEncodingStage"]
    text = md.read_text()
    assert doc["markdown_path"] == str(md)
    for needle in ("| E2E (s) | 4.315578 | 4.177754 |", "-3.194%", "-5.054%", "### 3. Statistics",
                   "no_significant_change", "Rule:", "| DenoisingStage |"):
        assert needle in text, needle


def test_files_mode_on_real_h200_dumps():
    files = [str(TEST_FIXTURES / H200 / c / "perf.json") for c in ("full_plain", "full_profile", "tiny_plain")]
    run = run_script("compare_perf", *files, "--json")
    assert run.returncode == 0
    doc = run.document
    assert doc["mode"] == "files" and [c["candidate"] for c in doc["comparisons"]] == ["file1", "file2"]
    first = doc["comparisons"][0]
    assert first["statistics"] is None and first["n_baseline"] == first["n_candidate"] == 1
    assert first["e2e_ms"]["baseline"] == 15921.826763000012 and first["e2e_ms"]["status"] == "faster"
    decoding = next(s for s in first["stages"] if s["name"] == "DecodingStage")
    assert decoding["status"] == "same"  # -94 ms: under the 120 ms floor of the stage marker rule
    denoise = next(s for s in first["stages"] if s["name"] == "DenoisingStage")
    assert denoise["status"] == "faster"
    assert first["peak_memory_mb"]["baseline"] == 32082.0 and first["peak_memory_mb"]["diff"] == 0


def test_human_markdown_and_process_rss_label():
    files = [str(TEST_FIXTURES / H200 / c / "perf.json") for c in ("tiny_plain", "tiny_profile")]
    run = run_script("compare_perf", "--memory-kind", "process_rss", *files)
    assert run.returncode == 0 and run.stdout.startswith("# Perf dump comparison")
    assert "process RSS (CPU adapter, not device memory)" in run.stdout
    assert re.search(r"\| E2E \(s\) \| 26\.473655 \| 2\.881685 \|", run.stdout)
    assert "single-sample indications" in run.stdout


def test_malformed_dump_is_an_input_error(tmp_path):
    bad = tmp_path / "perf.json"
    bad.write_text(json.dumps({"total_duration_ms": "12", "steps": []}))
    run = run_script("compare_perf", EAGER[0], str(bad), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.perf_dump_invalid"
    assert "is not of type 'number'" in run.document["error"]["message"]


def test_usage_errors():
    assert run_script("compare_perf", EAGER[0], "--json").document["error"]["code"] == "usage.too_few_files"
    run = run_script("compare_perf", EAGER[0], EAGER[1], "--baseline", EAGER[2], "--candidate", BCG[0], "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.conflicting_inputs"
    run = run_script("compare_perf", "--baseline", EAGER[0], "--json")
    assert run.document["error"]["code"] == "usage.missing_group"
