"""render_bench_report: the seed PR's evidence section from a bench-report.v1, the plot, and partial campaigns."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
from PIL import Image

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.judging import quality
from sgl_diffusion_bench.results import report, stats
from sgl_diffusion_bench.judging.cell import Cell

EXAMPLE = TEST_FIXTURES / "bench-report" / "example.json"


def load_example():
    return json.loads(EXAMPLE.read_text())


def test_example_validates_and_its_summary_is_what_the_code_computes():
    doc = load_example()
    assert contract.validation_errors(doc) == []
    c, cells = doc["campaign"], [Cell.from_json(raw) for raw in doc["cells"]]
    summary = stats.summarize(cells, list(c["arms"]), c["baseline_arm"], c["candidate_arm"])
    summary["output_quality"] = quality.output_quality(cells, c["arms"], c["baseline_arm"])
    assert json.loads(contract.dumps({"s": summary})) == {"s": doc["summary"]}


def test_renders_the_seed_pr_evidence(tmp_path):
    run = run_main("render_bench_report", str(EXAMPLE), "--output-dir", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["schema"] == "report-render.v1" and doc["verdict"] == "no_significant_change"
    assert doc["cells"] == {"total": 8, "valid": 8}
    md = (tmp_path / "bench-report.md").read_text()
    assert "| Run order | eager E2E (s) | bcg E2E (s) | eager denoise (s) | bcg denoise (s) |" in md
    assert "| Round 2 — B1 |  | 4.385315 |  | 3.917348 |" in md
    means = re.search(r"\| Mean \(valid cells\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", md)
    published = (4.315577, 4.177754, 4.119540, 3.911356)
    assert all(abs(float(v) - p) <= 1e-6 + 1e-12 for v, p in zip(means.groups(), published, strict=True))
    for needle in ("change -3.194% (95% interval [-4.944%, -1.437%])",
                   "change -5.054% (95% interval [-5.339%, -4.766%])", "Per-round E2E reductions are 4.771% and 1.620%",
                   "Round 2 B1 (bcg, cell 5)", "371.106 ms in TextEncodingStage", "remains in the aggregate",
                   "No samples were discarded.", "from 19.473 GiB to 20.707 GiB",
                   "All 8 eager/bcg outputs are byte-identical: SHA-256 "
                   "a713777ad67b4e82915aef972612f243d6f4cbd8db9aebdfdff976b4c7d2c7d3",
                   "--enable-breakable-cuda-graph --warmup-resolutions 1024x1024 --output-file-name bcg.png",
                   "```bash", "### Environment", "torch 2.13.0+cu130", "![E2E and denoise", "Rule: "):
        assert needle in md, needle
    with Image.open(tmp_path / "bench-report.png") as png:
        assert png.format == "PNG" and png.size == (800, 600)
        colours = len(np.unique(np.asarray(png.convert("RGB")).reshape(-1, 3), axis=0))
    assert colours > 50  # points, labels and rings were drawn, not a blank canvas


def test_partial_campaign_with_invalid_cells_and_no_comparison(tmp_path):
    doc = load_example()
    doc["campaign"].update(mode="single", baseline_arm=None, candidate_arm=None)
    doc["cells"][2] = dict(doc["cells"][2], status="invalid", perf=None,
                           reasons=["no '[Diffusion BCG] captured' marker"])
    doc["cells"][7] = dict(doc["cells"][7], status="contended", reasons=["foreign process on GPU 1"])
    doc["summary"] = stats.summarize([Cell.from_json(raw) for raw in doc["cells"]], ["eager", "bcg"])
    doc["summary"]["output_quality"] = None
    doc["plan"] = {}
    assert contract.validation_errors(doc) == []
    paths = report.render_report(doc, tmp_path / "out")
    md = open(paths["markdown"]).read()
    assert "invalid: no '[Diffusion BCG] captured' marker" in md
    assert "- Round 2 — A2 (eager, cell 7): contended — foreign process on GPU 1" in md
    assert "6 of 8 cells valid" in md and "### Statistics" not in md and "No outputs were recorded." in md
    assert "sglang generate" in md  # reproduce falls back to the cells' argv
    assert open(paths["plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_report_is_an_input_error(tmp_path):
    doc = copy.deepcopy(load_example())
    doc["cells"][0]["status"] = "fine"
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(doc))
    run = run_main("render_bench_report", str(bad), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.schema_mismatch"
    assert "cells/0/status" in run.document["error"]["message"]
    run = run_main("render_bench_report", str(tmp_path / "absent.json"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.not_found"
