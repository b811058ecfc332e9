"""The profile table of two traces as one payload (trace-compare.v1 without its envelope): the comparison, each
run's host-load record read beside its trace, and the verdict that withholds a contended pair. analyze_trace.py
compare and collect_pr_evidence.py both build it here."""

from __future__ import annotations

from typing import Any

from .analyses.compare import compare_traces
from .host_record import comparison_verdict, read_record
from .model import Trace
from .render import render_compare_markdown
from .summary import trace_info


def profile_table(a: Trace, b: Trace, labels: tuple[str, str], top: int,
                  host_load_a: str | None = None, host_load_b: str | None = None) -> dict[str, Any]:
    """``a``/``b`` as load.load_trace read them (their paths locate the host-load records beside them)."""
    trace_a, trace_b = a.source, b.source
    host = {"a": read_record(trace_a, host_load_a), "b": read_record(trace_b, host_load_b)}
    verdict = comparison_verdict(host["a"], host["b"], labels)
    result = compare_traces(a, b, labels, top)
    return {"traces": {"a": trace_info(a), "b": trace_info(b)}, "host_load": host, "verdict": verdict,
            "markdown": render_compare_markdown(result, verdict), **result}
