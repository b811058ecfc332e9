#!/usr/bin/env python3
"""Time `analyze_trace.py hotspots` against Holistic Trace Analysis on the same large trace, whole process each.

The large trace is the real H200 FLUX eager fixture replicated N times (default 6, ~140 MB of JSON): every copy's
timestamps are shifted past the previous copy and its correlation/flow/external ids offset, so kernels, launches and
stages stay linked exactly as in the original. Each tool runs as its own process; wall time and peak RSS come from
``os.wait4`` (the child's own rusage). The trace is built in a separate process, so this small parent is what the
children fork from and their peak RSS is theirs alone. Both report kernel totals, which must agree: counts exactly,
device time up to HTA's rounding of each event to whole microseconds.

HTA lives in its own virtualenv outside the repo (see requirements/bench-trace.txt):
    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install -r requirements/bench-trace.txt
    .venv/bin/python benchmarks/bench_trace_analysis.py --hta-python /tmp/hta-venv/bin/python
With ``--ranks N`` the source is replicated into N rank files (``--copies`` replicas each, each with its own
``distributedInfo.rank``) and both tools read the set: ours with one process per trace, HTA as it parses a folder;
kernel totals are checked on the first rank. The floor is what no analysis can go under: reading, gunzipping and
typed-decoding the same files (ours's own decoder) whole, timed inside one process, one file after another, in turn
with our runs; the document gives our whole-process time as a ratio to it. Prints one JSON document on stdout;
progress on stderr.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = (REPO / "tests" / "fixtures" / "traces-h200"
                  / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz")
HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
trace = analyzer.t.get_trace(next(iter(analyzer.t.traces)))
kernel = analyzer.t.symbol_table.get_sym_id_map()["kernel"]
kernels = trace[trace["cat"] == kernel]
names = analyzer.t.symbol_table.get_sym_table()
counts = kernels.groupby("name").size()
print(json.dumps({"count": int(len(kernels)), "total_us": float(kernels["dur"].sum()),
                  "per_name": {names[i]: int(c) for i, c in counts.items()}}))
"""


FLOOR_SCRIPT = """
import sys, time
from pathlib import Path
from sgl_diffusion_bench.trace.load import decode_events, read_trace_bytes
started = time.perf_counter()
for name in sys.argv[1:]:
    decode_events(read_trace_bytes(Path(name)), name)
print(time.perf_counter() - started)
"""


def build_large_trace(source: Path, copies: int, target: Path, rank: int = 0, world_size: int = 1) -> dict:
    """Write ``copies`` time-shifted replicas of ``source``'s events as one uncompressed trace."""
    doc = json.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    max_id = max([e.get("id", 0) for e in events if isinstance(e.get("id"), int)]
                 + [e.get("args", {}).get(k, 0) for e in events for k in ("correlation", "External id")
                    if isinstance(e.get("args", {}).get(k), int)]) + 1
    out = []
    for k in range(copies):
        shift_ts, shift_id = k * (span + 1000.0), k * max_id
        for e in events:
            if e.get("ph") == "M" and k:
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + shift_ts
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + shift_id
            if isinstance(e.get("args"), dict):
                args = dict(e["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += shift_id
                e["args"] = args
            out.append(e)
    doc["traceEvents"] = out
    doc["distributedInfo"] = {"rank": rank, "world_size": world_size}
    text = json.dumps(doc).encode()
    target.write_bytes(gzip.compress(text) if target.suffix == ".gz" else text)  # level 9, as torch.profiler writes
    return {"source": str(source), "copies": copies, "events": len(out), "json_bytes": len(text),
            "file_bytes": target.stat().st_size}


def run_measured(cmd: list[str]) -> dict:
    """Run one process to completion; its wall time, peak RSS (its own rusage) and stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stdout": stdout}


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--build-to", type=Path, help=argparse.SUPPRESS)  # internal: build the trace and exit
    parser.add_argument("--repeat", type=int, default=3, help="runs of our analyser (median reported)")
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--hta-repeat", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=1, help="rank files of --copies replicas each (default 1)")
    parser.add_argument("--build-rank", type=int, default=0, help=argparse.SUPPRESS)  # internal, with --build-to
    parser.add_argument("--gzip", action="store_true", help="write the traces as .json.gz, as the profiler does")
    args = parser.parse_args()
    if args.build_to:
        print(json.dumps(build_large_trace(args.source, args.copies, args.build_to, args.build_rank, args.ranks)))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="bench_trace_analysis_"))
    try:
        trace_dir = workdir / "trace"
        trace_dir.mkdir()
        suffix = ".trace.json.gz" if args.gzip else ".trace.json"
        traces = [trace_dir / f"large-rank{r}{suffix}" for r in range(args.ranks)]
        files = []
        for rank, trace in enumerate(traces):
            print(f"[bench] building rank {rank}: {args.copies} replicas of {args.source.name} ...", file=sys.stderr)
            files.append(json.loads(subprocess.run(
                [sys.executable, __file__, "--source", str(args.source), "--copies", str(args.copies), "--ranks",
                 str(args.ranks), "--build-rank", str(rank), "--build-to", str(trace)], check=True,
                capture_output=True, text=True).stdout))
        built = {"source": files[0]["source"], "copies": args.copies, "ranks": args.ranks, "gzip": args.gzip,
                 "events": sum(f["events"] for f in files), "json_bytes": sum(f["json_bytes"] for f in files),
                 "file_bytes": sum(f["file_bytes"] for f in files)}
        print(f"[bench] {built['json_bytes'] / 1e6:.1f} MB, {built['events']:,} events", file=sys.stderr)
        floors, ours_runs = [], []
        for i in range(args.repeat):  # floor and ours in turn, so both see the same host
            floors.append(float(subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, *map(str, traces)], check=True,
                                               capture_output=True, text=True, cwd=REPO / "scripts").stdout))
            print(f"[bench] floor (read + decode): {floors[-1]:.3f} s", file=sys.stderr)
            full = workdir / f"full-{i}.json"
            run = run_measured([sys.executable, str(REPO / "scripts" / "analyze_trace.py"), "hotspots",
                                *map(str, traces), "--top", "10", "--output", str(full), "--json"])
            doc = json.loads(run.pop("stdout"))
            first = doc if args.ranks == 1 else doc["traces"][0]
            first_full = json.loads(full.read_text())
            first_full = first_full if args.ranks == 1 else first_full["traces"][0]
            run["kernels"] = first["kernels_total"]
            run["per_name"] = {r["name"]: r["count"] for r in first_full["kernels"]}
            ours_runs.append(run)
            print(f"[bench] analyze_trace hotspots: {run['wall_s']} s, {run['peak_rss_mb']} MB", file=sys.stderr)
        hta_runs = []
        for _ in range(args.hta_repeat):
            run = run_measured([args.hta_python, "-c", HTA_SCRIPT, str(trace_dir)])
            run["kernels"] = json.loads(run.pop("stdout").decode().strip().splitlines()[-1])
            hta_runs.append(run)
            print(f"[bench] HTA: {run['wall_s']} s, {run['peak_rss_mb']} MB", file=sys.stderr)
        ours, hta = ours_runs[0], hta_runs[0]
        ours_wall = statistics.median(r["wall_s"] for r in ours_runs)
        hta_wall = statistics.median(r["wall_s"] for r in hta_runs)
        count = ours["kernels"]["count"]
        floor = statistics.median(floors)
        result = {
            "trace": built,
            "floor": {"wall_s": [round(f, 3) for f in floors], "median_s": round(floor, 3),
                      "what": "read + gunzip + typed decode of the same files, in one process, one after another"},
            "ratio_to_floor": round(ours_wall / floor, 2) if floor else None,
            "analyze_trace": {"wall_s": [r["wall_s"] for r in ours_runs], "median_wall_s": ours_wall,
                              "peak_rss_mb": max(r["peak_rss_mb"] for r in ours_runs),
                              "kernel_count": count, "kernel_total_us": ours["kernels"]["total_us"]},
            "hta": {"version": "0.5.0", "wall_s": [r["wall_s"] for r in hta_runs], "median_wall_s": hta_wall,
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in hta_runs),
                    "kernel_count": hta["kernels"]["count"], "kernel_total_us": hta["kernels"]["total_us"]},
            "speedup": round(hta_wall / ours_wall, 2) if ours_wall else None,
            "kernel_counts_identical": count == hta["kernels"]["count"]
            and ours["per_name"] == hta["kernels"]["per_name"],
            # HTA rounds every event to whole microseconds, so totals may differ by less than 1 us per kernel
            "kernel_time_within_hta_rounding": abs(ours["kernels"]["total_us"] - hta["kernels"]["total_us"]) < count,
        }
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0 if result["kernel_counts_identical"] and result["kernel_time_within_hta_rounding"] else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
