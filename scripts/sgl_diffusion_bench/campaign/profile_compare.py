"""Two profiles compared as evidence: the host-load record beside each profiled trace, whether the pair may be read at
all, and the profile table that puts the kernel comparison under that verdict. Kept out of ``trace/`` (which reads
traces and nothing else) because the verdict is the host samples' (``host_load``).

profile_diffusion samples the host at the profiled run's start and end (the samples a campaign cell records, see
``host_load``) and writes them beside each trace as ``<trace>.host-load.json`` (``trace-host-load.v1``). A profile
on a shared CPU swings many times over with a neighbour's load, so ``analyze_trace.py compare`` reads both records:
a pair where either run had another busy process is contended and its verdict is withheld; a trace without a record
has an unknown host load, and the comparison says so instead of assuming a quiet host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import contract, fileio, inputs
from ..judging import host_load
from ..trace.analyses.compare import compare_traces
from ..trace.model import Trace
from ..trace.render import render_compare_markdown
from ..trace.summary import trace_info

SIDECAR_SUFFIX = ".host-load.json"
SCHEMA = "trace-host-load.v1"


def sidecar_path(trace_path: str | Path) -> Path:
    return Path(str(trace_path) + SIDECAR_SUFFIX)


def sidecar_document(tool: str, trace_path: str, trace_sha256: str, host_gate: dict[str, Any]) -> dict[str, Any]:
    """The record written beside one trace: the run's host samples, tied to the trace by its sha256."""
    return contract.envelope(SCHEMA, tool, trace={"path": trace_path, "sha256": trace_sha256}, host=host_gate)


def read_record(trace_path: str | Path, explicit: str | None = None) -> dict[str, Any]:
    """The host load of the run that wrote ``trace_path``: from ``explicit`` (a ``--host-load-*`` file) or the
    sidecar beside the trace. ``recorded: false`` when there is none, or the record names another trace."""
    path = Path(explicit) if explicit else sidecar_path(trace_path)
    if explicit is None and not path.exists():
        return {"recorded": False, "source": None, "contended": None, "reason": None,
                "note": f"host load unknown: no host-load record beside {trace_path} ({path.name}); the profile "
                        "may have run on a busy host"}
    doc = inputs.load_json(path, "input.unreadable")
    contract.validate_input(doc, SCHEMA, str(path))
    if doc["trace"]["sha256"] != fileio.sha256_file(trace_path):
        return {"recorded": False, "source": str(path), "contended": None, "reason": None,
                "note": f"host load unknown: {path} records the run of another trace ({doc['trace']['path']}, "
                        "sha256 differs)"}
    before, after = doc["host"]["before"], doc["host"]["after"]
    contended = host_load.contended(before, after)
    return {"recorded": True, "source": str(path), "contended": contended,
            "reason": host_load.reason(before, after) if contended else None,
            "note": "another process was busy on the host while this profile ran" if contended else
                    "no other busy process on the host at the profiled run's start and end"}


def comparison_verdict(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str]) -> dict[str, Any]:
    """``withheld_contended`` when either run was contended, ``host_load_unknown`` when either has no record,
    else ``comparable``; ``reason`` says which trace and why."""
    contended = [(label, r) for label, r in zip(labels, (a, b), strict=True) if r["contended"]]
    if contended:
        return {"status": "withheld_contended",
                "reason": "the host was contended while " + "; ".join(
                    f"{label} was profiled ({r['reason']})" for label, r in contended)
                          + ". The timings are the machine's as much as the change's: re-profile both on a quiet "
                            "host (no other busy process)"}
    unknown = [label for label, r in zip(labels, (a, b), strict=True) if not r["recorded"]]
    if unknown:
        return {"status": "host_load_unknown",
                "reason": f"no host-load record for {' and '.join(unknown)}: timing differences may be host noise "
                          "(profile_diffusion.py writes <trace>.host-load.json beside each trace it captures)"}
    return {"status": "comparable", "reason": "both profiles ran with no other busy process on the host"}


def profile_table(a: Trace, b: Trace, labels: tuple[str, str], top: int,
                  host_load_a: str | None = None, host_load_b: str | None = None) -> dict[str, Any]:
    """``a``/``b`` as load.load_trace read them (their paths locate the host-load records beside them)."""
    trace_a, trace_b = a.source, b.source
    host = {"a": read_record(trace_a, host_load_a), "b": read_record(trace_b, host_load_b)}
    verdict = comparison_verdict(host["a"], host["b"], labels)
    result = compare_traces(a, b, labels, top)
    return {"traces": {"a": trace_info(a), "b": trace_info(b)}, "host_load": host, "verdict": verdict,
            "markdown": render_compare_markdown(result, verdict), **result}
