"""render_bench_report: turn a bench-report.v1 JSON into PR evidence (Markdown section + PNG plot of every cell)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from .. import contract, inputs, selftest
from ..results import report
from ..judging.cell import Cell
from . import _runner

TOOL = "render_bench_report"
EPILOG = """examples:
  python3 scripts/render_bench_report.py outputs/benchmarks/run1/bench-report.json
  python3 scripts/render_bench_report.py REPORT.json --output-dir evidence/ --json

""" + _runner.EXIT_CODES_EPILOG

SELF_TEST_REPORT = {
    "schema": "bench-report.v1", "ok": True, "tool": {"name": "bench_diffusion_denoise", "version": "0"},
    "created_at": "2026-01-01T00:00:00Z",
    "campaign": {"mode": "single", "preset": None, "label": "self-test", "rounds": 1, "threshold_pct": 1.5,
                 "primary_metric": "e2e_ms", "baseline_arm": None, "candidate_arm": None, "discard_outliers": False,
                 "arms": {"eager": {"description": "eager", "extra_args": [], "quality": None, "bcg": False}},
                 "order": [{"round": 1, "position": "A1", "arm": "eager"}]},
    "engine": {}, "environment": {}, "plan": {},
    "cells": [{"index": 0, "arm": "eager", "round": 1, "position": "A1", "status": "failed",
               "reasons": ["exit code 1"], "argv": ["sglang", "generate"], "started_at": None, "wall_s": None,
               "log_path": None, "perf_dump_path": None, "perf": None, "outputs": [], "gates": {}}],
    "summary": {"arms": {}, "comparison": None, "output_quality": None},
}


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("report", nargs="?", help="a bench-report.v1 JSON file")
    parser.add_argument("--output-dir", help="where to write bench-report.md and bench-report.png "
                                             "(default: beside REPORT)")
    return parser


def load_report(path: Path) -> dict:
    if not path.exists():
        raise contract.InputError("input.not_found", f"{path} does not exist",
                                  "give the bench-report.json the benchmark wrote")
    try:
        doc = inputs.load_json(path, "input.unreadable")
    except contract.InputError as exc:
        raise contract.InputError("input.unreadable", f"{path} is not readable JSON: {exc.message}",
                                  "give the bench-report.json the benchmark wrote") from None
    contract.validate_input(doc, "bench-report.v1", str(path))
    return doc


def render(doc: dict, source: str, out_dir: Path) -> _runner.Result:
    try:
        paths = report.render_report(doc, out_dir)
    except OSError as exc:
        raise contract.UsageError("usage.unwritable_output", f"cannot write into {out_dir}: {exc}",
                                  "pick a writable --output-dir") from None
    comparison = doc["summary"].get("comparison")
    result = contract.envelope(
        "report-render.v1", TOOL, report=source, markdown_path=paths["markdown"], plot_path=paths["plot"],
        verdict=comparison["verdict"] if comparison else None, report_ok=doc["ok"],
        cells={"total": len(doc["cells"]),
               "valid": sum(1 for c in map(Cell.from_json, doc["cells"]) if c.status == "valid")})
    return _runner.Result(result, f"wrote {paths['markdown']} and {paths['plot']}")


def handle(args: argparse.Namespace) -> _runner.Result:
    if not args.report:
        raise contract.UsageError("usage.no_report", "no bench-report.v1 file given", f"{TOOL} REPORT.json")
    path = Path(args.report)
    doc = load_report(path)
    return render(doc, str(path), Path(args.output_dir) if args.output_dir else path.parent)


def self_tests() -> list[selftest.Check]:
    def renders_fixture() -> str:
        contract.validate_input(SELF_TEST_REPORT, "bench-report.v1", "<self-test report>")
        with tempfile.TemporaryDirectory() as tmp:
            result = render(SELF_TEST_REPORT, "<self-test>", Path(tmp))
            contract.check_document(result.document)
            text = Path(result.document["markdown_path"]).read_text()
            if "exit code 1" not in text or Path(result.document["plot_path"]).stat().st_size == 0:
                raise AssertionError("the failed cell or the plot is missing from the rendering")
        return "a one-cell report with a failed cell renders Markdown and a PNG"

    return [*selftest.schema_checks(["report-render.v1", "bench-report.v1"]),
            selftest.Check("render", renders_fixture)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
