"""compare_perf: files mode on real H200 dumps, groups mode on the seed PR's rows, errors as error.v1."""

from __future__ import annotations

import json
import re
import shutil

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.results import perf_compare

SEED = TEST_FIXTURES / "seed-pr-38591"
H200 = "sglang-0.5.10-h200"
EAGER = [str(SEED / f) for f in ("r1-a1-eager.json", "r1-a2-eager.json", "r2-a1-eager.json", "r2-a2-eager.json")]
BCG = [str(SEED / f) for f in ("r1-b1-bcg.json", "r1-b2-bcg.json", "r2-b1-bcg.json", "r2-b2-bcg.json")]


def test_groups_reproduce_the_seed_pr(tmp_path):
    md = tmp_path / "cmp.md"
    run = run_main("compare_perf", "--baseline", *EAGER, "--candidate", *BCG, "--markdown", str(md), "--json")
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
    run = run_main("compare_perf", "--memory-kind", "device", *files, "--json")  # H200 dumps
    assert run.returncode == 0
    doc = run.document
    assert doc["mode"] == "files" and [c["candidate"] for c in doc["comparisons"]] == ["file1", "file2"]
    first = doc["comparisons"][0]
    assert first["statistics"] is None and first["n_baseline"] == first["n_candidate"] == 1
    assert first["e2e_ms"]["baseline"] == 15921.826763000012 and first["e2e_ms"]["status"] == "faster"
    decoding = next(s for s in first["stages"] if s["name"] == "DecodingStage")
    assert decoding["diff"] > -120 and decoding["change_pct"] < -10  # past the share bound, under the time one
    assert decoding["status"] == "minor"  # not "same": it moved by more than 10 %
    denoise = next(s for s in first["stages"] if s["name"] == "DenoisingStage")
    assert denoise["status"] == "faster"
    assert first["peak_memory_mb"]["baseline"] == 32082.0 and first["peak_memory_mb"]["diff"] == 0


def test_human_markdown_and_process_rss_label():
    files = [str(TEST_FIXTURES / H200 / c / "perf.json") for c in ("tiny_plain", "tiny_profile")]
    run = run_main("compare_perf", "--memory-kind", "process_rss", *files)
    assert run.returncode == 0 and run.stdout.startswith("# Perf dump comparison")
    assert "process RSS (CPU adapter, not device memory)" in run.stdout
    assert re.search(r"\| E2E \(s\) \| 26\.473655 \| 2\.881685 \|", run.stdout)
    assert "single-sample indications" in run.stdout


def test_malformed_dump_is_an_input_error(tmp_path):
    bad = tmp_path / "perf.json"
    bad.write_text(json.dumps({"total_duration_ms": "12", "steps": []}))
    run = run_main("compare_perf", EAGER[0], str(bad), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.perf_dump_invalid"
    assert "is not of type 'number'" in run.document["error"]["message"]


def test_usage_errors():
    assert run_main("compare_perf", EAGER[0], "--json").document["error"]["code"] == "usage.too_few_files"
    run = run_main("compare_perf", EAGER[0], EAGER[1], "--baseline", EAGER[2], "--candidate", BCG[0], "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.conflicting_inputs"
    run = run_main("compare_perf", "--baseline", EAGER[0], "--json")
    assert run.document["error"]["code"] == "usage.missing_group"


def test_round_structure_comes_from_file_names_and_outliers_are_named_by_file():
    seed = TEST_FIXTURES / "seed-pr-38591"
    base = sorted(str(p) for p in seed.glob("r*-a*-eager.json"))
    cand = sorted(str(p) for p in seed.glob("r*-b*-bcg.json"))
    payload = perf_compare.compare_groups(base, cand, "device", primary_metric="denoise_ms")
    stats_ = payload["comparisons"][0]["statistics"]
    assert [r["round"] for r in stats_["rounds"]] == [1, 2]  # r1-/r2- in the names: a stratified, per-round test
    assert stats_["verdict"] == "improved" and "every round is faster" in stats_["metrics"]["denoise_ms"]["reason"]
    markdown = perf_compare.render_markdown(payload)
    assert "Outlier `" + str(seed / "r2-b1-bcg.json") + "` (round 2)" in markdown  # by file, not by index


def test_no_rounds_never_claims_every_round(tmp_path):
    seed = TEST_FIXTURES / "seed-pr-38591"
    renamed = []
    tmp = tmp_path
    for p in sorted(seed.glob("r*.json")):
        renamed.append(shutil.copy(p, tmp / p.name.replace("r1-", "one-").replace("r2-", "two-")))
    base = [str(p) for p in renamed if "eager" in str(p)]
    cand = [str(p) for p in renamed if "bcg" in str(p)]
    stats_ = perf_compare.compare_groups(base, cand, "device", primary_metric="denoise_ms")["comparisons"][0][
        "statistics"]
    assert stats_["rounds"] == [] and "every round" not in stats_["metrics"]["denoise_ms"]["reason"]
    assert "no rounds" in stats_["metrics"]["denoise_ms"]["reason"]


def test_one_change_gets_one_mark_in_every_table():
    seed = TEST_FIXTURES / "seed-pr-38591"
    cmp = perf_compare.compare_files([str(seed / "r1-a1-eager.json"), str(seed / "r1-b1-bcg.json")],
                                     "device")["comparisons"][0]
    denoise_stage = next(r for r in cmp["stages"] if r["name"] == "DenoisingStage")
    assert cmp["denoise_ms"]["status"] == denoise_stage["status"] == "faster"  # -5 %: the same word in both tables
    assert set(perf_compare.MARKS.values()) == {"faster", "slower", "same", "minor", "unclear", ""}


def test_same_only_inside_the_band_it_states():
    """A stage +90 % but 50 ms is not 'same' (it passed one bound); with groups, E2E is 'same' only when its
    interval lies inside +/-threshold, and a change the interval cannot place is 'unclear', in every table."""
    row = perf_compare._row(55.0, 104.5, "stage")
    assert row["change_pct"] == 90.0 and row["status"] == "minor"
    assert perf_compare._row(1000.0, 1050.0, "stage")["status"] == "same"
    assert perf_compare._row(5000.0, 5300.0, "stage")["status"] == "minor"  # +300 ms but 6 %
    seed = sorted((TEST_FIXTURES / "seed-pr-38591").glob("r*-*.json"))
    base = [str(p) for p in seed if "eager" in p.name]
    cand = [str(p) for p in seed if "bcg" in p.name]
    cmp = perf_compare.compare_groups(base, cand, "device")["comparisons"][0]
    e2e, denoise = cmp["statistics"]["metrics"]["e2e_ms"], cmp["statistics"]["metrics"]["denoise_ms"]
    assert e2e["ci_low_pct"] < -1.5 < e2e["ci_high_pct"] and cmp["e2e_ms"]["status"] == "unclear"
    assert denoise["ci_high_pct"] < -1.5 and cmp["denoise_ms"]["status"] == "faster"
    assert next(r for r in cmp["stages"] if r["name"] == "DenoisingStage")["status"] == "faster"
    assert cmp["measured_over"] == "every_dump_given"  # a different quantity from a campaign's steady state
    assert "over every dump given" in perf_compare.render_markdown(
        perf_compare.compare_groups(base, cand, "device"))
    wide = perf_compare.compare_groups(base, cand, "device", threshold_pct=50.0)["comparisons"][0]
    assert wide["e2e_ms"]["status"] == "same"  # the whole interval inside +/-50 %


def test_memory_is_compared_only_when_its_kind_is_said():
    """A dump does not say whether its figures are device memory or process RSS: no default decides it."""
    files = [str(TEST_FIXTURES / H200 / c / "perf.json") for c in ("tiny_plain", "tiny_profile")]
    unsaid = run_main("compare_perf", *files, "--json").document
    assert unsaid["memory_kind"] is None and unsaid["comparisons"][0]["peak_memory_mb"]["baseline"] is None
    assert "withheld" in run_main("compare_perf", *files).stdout
    said = run_main("compare_perf", "--memory-kind", "device", *files)
    assert "Peak memory, reserved device memory" in said.stdout
