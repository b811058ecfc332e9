"""compare_perf: compare sglang diffusion perf dumps (E2E, denoise, every stage, per-step, peak memory).

Give N dumps (the first is the baseline, as upstream compare_perf.py), or two groups with --baseline/--candidate:
with more than one dump per group the comparison carries a bootstrap interval and a verdict."""

from __future__ import annotations

import argparse

from .. import contract, selftest
from ..judging import perf_dump
from ..results import perf_compare, stats
from ..judging.cell import Cell
from . import _runner

TOOL = "compare_perf"
EPILOG = """examples:
  python3 scripts/compare_perf.py base.json new.json --markdown compare.md
  python3 scripts/compare_perf.py --baseline eager-*.json --candidate bcg-*.json --json
  python3 scripts/compare_perf.py --memory-kind process_rss cpu-a.json cpu-b.json   # CPU-adapter dumps

""" + _runner.EXIT_CODES_EPILOG

SELF_TEST_DUMP = {
    "total_duration_ms": 118.4, "tag": "cli_generate",
    "steps": [{"name": "TextEncodingStage", "duration_ms": 80.6}, {"name": "DenoisingStage", "duration_ms": 24.7},
              {"name": "DecodingStage", "duration_ms": 10.6}],
    "denoise_steps_ms": [{"step": 0, "duration_ms": 13.7}, {"step": 1, "duration_ms": 6.2}],
    "memory_checkpoints": {"after_forward": {"allocated_mb": 691.55, "reserved_mb": 691.55,
                                             "peak_allocated_mb": 691.55, "peak_reserved_mb": 691.55}},
}


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    parser.add_argument("files", nargs="*", help="perf dumps; the first is the baseline")
    parser.add_argument("--baseline", nargs="+", default=[], metavar="DUMP", help="baseline group of perf dumps")
    parser.add_argument("--candidate", nargs="+", default=[], metavar="DUMP", help="candidate group of perf dumps")
    parser.add_argument("--memory-kind", choices=perf_dump.MEMORY_KINDS,
                        help="what the dumps' memory figures are: device (a GPU run) or process_rss (the CPU "
                             "adapter's stand-in); a dump does not say, so without it no peak memory is compared")
    parser.add_argument("--threshold-pct", type=_runner.bounded_float(0, 100, low_open=True),
                        default=stats.DEFAULT_THRESHOLD_PCT,
                        help="smallest change (%%) the verdict may call improved/regressed (default %(default)s)")
    parser.add_argument("--primary-metric", choices=stats.METRICS, default="e2e_ms",
                        help="the metric the verdict is stated on")
    parser.add_argument("--discard-outliers", action="store_true",
                        help="leave stage-attributed e2e outliers out of the statistics (they are listed)")
    parser.add_argument("--resamples", type=_runner.bounded_int(1, 1_000_000), default=stats.DEFAULT_RESAMPLES,
                        help="bootstrap resamples (at least 100)")
    parser.add_argument("--seed", type=_runner.bounded_int(0, 2**32 - 1), default=stats.DEFAULT_SEED,
                        help="bootstrap seed (deterministic)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the Markdown rendering to FILE")
    return parser


def handle(args: argparse.Namespace) -> _runner.Result:
    if args.files and (args.baseline or args.candidate):
        raise contract.UsageError("usage.conflicting_inputs", "give positional dumps or --baseline/--candidate, "
                                  "not both",
                                  f"{TOOL} A.json B.json  or  {TOOL} --baseline A*.json --candidate B*.json")
    if bool(args.baseline) != bool(args.candidate):
        raise contract.UsageError("usage.missing_group", "--baseline and --candidate go together",
                                  "give at least one dump to each")
    if not args.baseline and len(args.files) < 2:
        raise contract.UsageError("usage.too_few_files", "need at least 2 perf dumps to compare",
                                  f"{TOOL} baseline.json candidate.json")
    if args.resamples < 100:
        raise contract.UsageError("usage.bad_resamples", "--resamples must be at least 100", "use the default")
    options = dict(threshold_pct=args.threshold_pct, primary_metric=args.primary_metric, resamples=args.resamples,
                   seed=args.seed, discard_outliers=args.discard_outliers)
    if args.baseline:
        payload = perf_compare.compare_groups(args.baseline, args.candidate, args.memory_kind, **options)
    else:
        payload = perf_compare.compare_files(args.files, args.memory_kind, **options)
    markdown = perf_compare.render_markdown(payload)
    payload["markdown_path"] = None
    if args.markdown:
        payload["markdown_path"] = _runner.write_output_file(args.markdown, markdown, "--markdown")
    return _runner.Result(contract.envelope("compare.v1", TOOL, **payload), markdown)


def self_tests() -> list[selftest.Check]:
    def groups_compare() -> str:
        def dump(scale: float) -> dict:
            doc = dict(SELF_TEST_DUMP, total_duration_ms=SELF_TEST_DUMP["total_duration_ms"] * scale)
            return doc

        cells = [Cell(index=i, arm=arm, status="valid", perf_dump_path="<self-test>",
                      perf=perf_dump.parse_perf_dump(dump(s), "process_rss").to_json())
                 for i, (arm, s) in enumerate([("baseline", 1.0), ("baseline", 1.002), ("candidate", 0.9),
                                               ("candidate", 0.901)])]
        entry = perf_compare.compare_cells(cells, "baseline", "candidate", resamples=200)
        payload = {"mode": "groups", "memory_kind": "process_rss", "threshold_pct": 1.5, "markdown_path": None,
                   "inputs": perf_compare.input_rows(cells), "comparisons": [entry]}
        contract.check_document(contract.envelope("compare.v1", TOOL, **payload))
        if entry["statistics"]["verdict"] != "improved":
            raise AssertionError(f"a 10% faster group should be 'improved', got {entry['statistics']['verdict']}")
        perf_compare.render_markdown(payload)
        return "a 10%-faster dump group is 'improved'; compare.v1 validates; Markdown renders"

    def malformed_dump() -> str:
        try:
            perf_dump.parse_perf_dump({"steps": []}, "device")
        except perf_dump.PerfDumpError as exc:
            return f"rejected: {exc.reason[:60]}"
        raise AssertionError("a dump without total_duration_ms was accepted")

    return [*selftest.schema_checks(["compare.v1", "perf-dump.v1", "bench-report.v1"]),
            selftest.Check("groups-compare", groups_compare), selftest.Check("malformed-dump", malformed_dump)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
