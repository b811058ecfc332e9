"""Kept reports must still be what today's code makes of their raw inputs: each recorded cell whose perf dump and
engine log are kept is re-judged from them, the summary is recomputed from the cells, and the Markdown is re-rendered
from the JSON. A fixture that predates a fix (the H200 report once called device memory "process RSS") fails here
instead of being quoted as evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES
from sgl_diffusion_bench.judging import memory_evidence, perf_dump
from sgl_diffusion_bench.results import report, stats
from sgl_diffusion_bench.judging.cell import Cell

H200_0523 = TEST_FIXTURES / "gpu-h200-0.5.23" / "campaign"
H200_0510 = TEST_FIXTURES / "gpu-h200-0.5.10"
REPORTS = [H200_0523, H200_0510]


def _doc(folder: Path) -> dict:
    return json.loads((folder / "bench-report.json").read_text(encoding="utf-8"))


def _engine_log_of(folder: Path, doc: dict, cell: dict) -> Path:
    """A warm cell's evidence is its engine's log (warm-<id>.engine.log); a cold cell's its own kept log."""
    if doc.get("engines", {}).get("mode") == "warm":
        start = next(s for s in doc["engines"]["starts"] if cell["arm"] in s["arms"])
        return folder / f"warm-{start['id']}.engine.log"
    first = min(c["index"] for c in doc["cells"] if c["round"] == cell["round"])  # kept as r<round>p<slot>
    return folder / f"cell-{cell['arm']}-r{cell['round']:02d}p{cell['index'] - first + 1:02d}.engine.log"


@pytest.mark.parametrize("folder", REPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_markdown_is_what_the_json_renders_to(folder):
    assert (folder / "bench-report.md").read_text(encoding="utf-8") == report.render_markdown(_doc(folder))


@pytest.mark.parametrize("folder", REPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_each_cells_memory_kind_is_what_its_log_says(folder):
    doc = _doc(folder)
    judged = 0
    for cell in doc["cells"]:
        log = _engine_log_of(folder, doc, cell)
        if cell["perf"] is None or not log.is_file():
            continue
        kind = memory_evidence.evidence_of(log.read_text(encoding="utf-8", errors="replace").splitlines()).kind
        assert cell["perf"]["memory_kind"] == kind, (cell["index"], log.name)
        judged += 1
    assert judged >= 1


def test_the_kept_h200_cell_re_parses_to_its_recorded_perf():
    doc = _doc(H200_0523)
    cell = next(c for c in doc["cells"] if c["perf_dump_path"].endswith("bcg__r01p02.perf.json"))
    kind = memory_evidence.evidence_of((H200_0523 / "warm-e2.engine.log").read_text().splitlines()).kind
    assert perf_dump.load_perf_dump(H200_0523 / "cell-bcg-r01p02.perf.json", kind).to_json() == cell["perf"]


@pytest.mark.parametrize("folder", REPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_summary_is_what_the_cells_give(folder):
    doc = _doc(folder)
    campaign = doc["campaign"]
    summary = stats.summarize([Cell.from_json(c) for c in doc["cells"]], list(campaign["arms"]),
                              campaign["baseline_arm"], campaign["candidate_arm"],
                              discard_outliers=campaign["discard_outliers"], threshold_pct=campaign["threshold_pct"],
                              primary_metric=campaign["primary_metric"])
    summary = json.loads(json.dumps(summary))  # through JSON text, as the report file is
    assert summary["arms"] == doc["summary"]["arms"]
    assert summary["comparison"] == doc["summary"]["comparison"]
