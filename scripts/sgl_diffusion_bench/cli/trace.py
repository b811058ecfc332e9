"""analyze_trace: hotspots, eager-vs-graph comparison and fast-path classification of torch.profiler traces."""

from __future__ import annotations

import argparse
import gzip
import tempfile
from pathlib import Path

from .. import contract, progress, selftest
from ..trace.analyses.ranks import analyze_ranks
from ..trace.load import load_trace
from ..trace.render import render_classify_text, render_hotspots_text
from ..trace.summary import bounded, hotspots_body, rank_summaries, trace_info
from . import _runner

# Each subcommand imports what only it needs (the fast-path registry, the profile table) when it runs: a hotspots
# run on a large trace is about a second, and those imports were a tenth of it.

TOOL = "analyze_trace"
SAMPLE_TRACE = Path(__file__).resolve().parents[1] / "data" / "sample_trace.json.gz"
EPILOG = """examples:
  python3 scripts/analyze_trace.py hotspots prof/*-global-rank0.trace.json.gz --top 20 --json
  python3 scripts/analyze_trace.py hotspots rank0.trace.json.gz rank1.trace.json.gz --json   # ranks + skew
  python3 scripts/analyze_trace.py compare eager.trace.json.gz graph.trace.json.gz --markdown table.md --json
      (reads <trace>.host-load.json beside each trace; a pair profiled on a busy host gets no verdict, exit 1)
  python3 scripts/analyze_trace.py classify prof/*.trace.json.gz --top 15 --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    sub = parser.add_subparsers(dest="command", parser_class=_runner.Parser)
    parent = _runner.json_flag_parent()
    p = _runner.add_command(sub, "hotspots", parents=[parent],
                            help="kernels, launches, stages and steps of one or more traces")
    p.add_argument("traces", nargs="+", metavar="TRACE", help=".json or .json.gz Chrome trace; several = ranks")
    p.add_argument("--top", type=_runner.bounded_int(1, 100_000), default=30,
                   help="kernels/CPU ops shown on stdout (default 30)")
    p.add_argument("--output", help="write the full, unbounded document (every kernel) to this file")
    p = _runner.add_command(sub, "compare", parents=[parent],
                            help="two traces (e.g. eager vs graph) as the PR profile table")
    p.add_argument("trace_a", metavar="A", help="the baseline trace (e.g. eager)")
    p.add_argument("trace_b", metavar="B", help="the candidate trace of the same request (e.g. graph replay)")
    p.add_argument("--label-a", default="A", help="A's name in the tables")
    p.add_argument("--label-b", default="B", help="B's name in the tables")
    p.add_argument("--top", type=_runner.bounded_int(1, 100_000), default=15,
                   help="changed kernels listed (default 15)")
    p.add_argument("--markdown", help="also write the Markdown table to this file")
    p.add_argument("--host-load-a", metavar="FILE",
                   help="A's host-load record (trace-host-load.v1; default: <A>.host-load.json beside the trace)")
    p.add_argument("--host-load-b", metavar="FILE", help="B's host-load record, as --host-load-a")
    p = _runner.add_command(sub, "classify", parents=[parent],
                       help="label hot kernels and unfused chains with fast-path families")
    p.add_argument("trace", metavar="TRACE", help=".json or .json.gz Chrome trace")
    p.add_argument("--top", type=_runner.bounded_int(1, 100_000), default=20,
                   help="hot kernels classified (default 20)")
    return parser


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise contract.UsageError("usage.bad_value", f"{flag} must be at least 1, got {value}", f"pass {flag} 10")
    return value


def _prepare(schema_id: str):
    """What the analyses and the output's check load anyway (numpy, jsonschema and the schema's validator, ~0.3 s),
    loaded by this process while worker processes decode a large trace rather than after them."""
    def prepare() -> None:
        import numpy  # noqa: F401
        contract.validator(schema_id)
    return prepare


def hotspots(paths: list[str], top: int, output: str | None) -> _runner.Result:
    if len(paths) == 1:
        body = hotspots_body(load_trace(paths[0], meanwhile=_prepare("trace-hotspots.v1")), None)
        full = contract.envelope("trace-hotspots.v1", TOOL, output=output, **body)
        doc = contract.envelope("trace-hotspots.v1", TOOL, output=output, **bounded(body, top))
        text = render_hotspots_text(doc)
    else:
        with progress.phase(f"reading {len(paths)} traces", "one process per trace, up to the host's cores"):
            summaries = rank_summaries(paths, meanwhile=_prepare("trace-ranks.v1"))
        bodies = [body for body, _ in summaries]
        ranks = analyze_ranks([figures for _, figures in summaries], bodies)
        full = contract.envelope("trace-ranks.v1", TOOL, output=output, traces=bodies, **ranks)
        doc = contract.envelope("trace-ranks.v1", TOOL, output=output, traces=[bounded(b, top) for b in bodies],
                                **ranks)
        text = "\n".join(render_hotspots_text(b) for b in doc["traces"])
    if output:
        contract.check_document(full)
        _runner.write_output_file(output, contract.dumps(full) + "\n", "--output")
    return _runner.Result(doc, text)


def compare(args: argparse.Namespace) -> _runner.Result:
    """The profile table of two traces, with each run's host load; a contended pair gets no verdict (exit 1)."""
    from ..campaign.profile_compare import profile_table
    trace_a = load_trace(args.trace_a, meanwhile=_prepare("trace-compare.v1"))
    payload = profile_table(trace_a, load_trace(args.trace_b), (args.label_a, args.label_b),
                            _positive(args.top, "--top"), args.host_load_a, args.host_load_b)
    path = _runner.write_output_file(args.markdown, payload["markdown"], "--markdown") if args.markdown else None
    doc = contract.envelope("trace-compare.v1", TOOL, ok=payload["verdict"]["status"] != "withheld_contended",
                            markdown_path=path, **payload)
    return _runner.Result(doc, payload["markdown"])


def handle(args: argparse.Namespace) -> _runner.Result:
    if args.command is None:
        raise contract.UsageError("usage.no_command", "no subcommand given", f"run '{TOOL} --help'")
    if args.command == "hotspots":
        return hotspots(args.traces, _positive(args.top, "--top"), args.output)
    if args.command == "compare":
        return compare(args)
    return classify(args)


def classify(args: argparse.Namespace) -> _runner.Result:
    from .. import fast_paths
    from ..trace.analyses.classify import classify_trace
    trace = load_trace(args.trace, meanwhile=_prepare("trace-classify.v1"))
    result = classify_trace(trace, fast_paths.load_registry(), _positive(args.top, "--top"))
    doc = contract.envelope("trace-classify.v1", TOOL, trace=trace_info(trace),
                            registry=str(fast_paths.REGISTRY_PATH.name), **result)
    return _runner.Result(doc, render_classify_text(result))


def self_tests() -> list[selftest.Check]:
    from .. import fast_paths
    from ..trace.analyses.classify import classify_trace
    from ..trace.analyses.compare import compare_traces

    def registry_loads() -> str:
        registry = fast_paths.load_registry()
        table = fast_paths.render_family_table()
        return f"{len(registry.families)} families load; family table has {table.count(chr(10)) - 2} rows"

    def sample_hotspots() -> str:
        doc = hotspots([str(SAMPLE_TRACE)], 5, None).document
        contract.check_document(doc)
        if not doc["kernels"] or "DenoisingStage" not in doc["stages"]:
            raise AssertionError("bundled sample trace lost its kernels or stages")
        return (f"bundled trace: {doc['kernels_total']['count']} kernels, stages {sorted(doc['stages'])}, "
                f"{doc['denoise']['steps']} denoise steps")

    def sample_classify_and_compare() -> str:
        trace = load_trace(SAMPLE_TRACE)
        result = classify_trace(trace, fast_paths.load_registry(), 5)
        families = sorted(result["families"])
        compare = compare_traces(trace, trace, ("a", "b"))
        if any(m["delta"] not in (0, None) for m in compare["metrics"]):
            raise AssertionError("a trace compared with itself shows a difference")
        return f"classified families {families}; self-compare has no differences"

    def corrupt_input_is_input_error() -> str:
        with tempfile.TemporaryDirectory(prefix="analyze_trace_selftest_") as tmp:
            bad = Path(tmp) / "cut.json.gz"
            bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
            try:
                load_trace(bad)
            except contract.InputError as exc:
                return f"truncated trace -> {exc.code}"
        raise AssertionError("a truncated trace was accepted")

    return [*selftest.schema_checks(["trace-hotspots.v1", "trace-ranks.v1", "trace-compare.v1", "trace-classify.v1",
                                     "trace-host-load.v1", "fast-paths.v1"]),
            selftest.Check("fast-path-registry", registry_loads),
            selftest.Check("sample-hotspots", sample_hotspots),
            selftest.Check("sample-classify-compare", sample_classify_and_compare),
            selftest.Check("corrupt-trace", corrupt_input_is_input_error)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
