#!/usr/bin/env python3
"""How long the bench takes to plan (``--dry-run --json``) an A/A campaign over a long request manifest (issue 44).

Each size writes an N-line manifest of mixed shapes, runs the real bench CLI against the installed engine's manifest
parser (no engine start) and records the wall time, the child's peak RSS, the exit code, and either the number of
runs planned or the error code. A campaign plans at most ``design.MAX_CELLS`` cells; a longer one is refused before
any cell is built, so the 10^5-line case measures the refusal and the bound's size measures the largest plan.

  .venv/bin/python benchmarks/plan_large_manifest.py [--lines 100000 2500] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_manifest(path: Path, lines: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for n in range(lines):
            out.write(json.dumps({"prompt": f"a cat number {n}", "seed": n, "width": 64 + 8 * (n % 3), "height": 64,
                                  "num_inference_steps": 2}) + "\n")


def measure(lines: int, work: Path) -> dict:
    manifest = work / f"requests-{lines}.jsonl"
    write_manifest(manifest, lines)
    argv = [sys.executable, str(ROOT / "scripts" / "bench_diffusion_denoise.py"), "--model", "tiny-flux-cpu",
            "--campaign", "aa", "--rounds", "1", "--requests-file", str(manifest), "--engine-capabilities", "recent",
            "--label", "plan", "--output-dir", str(work / f"out-{lines}"), "--dry-run", "--json"]
    started = time.monotonic()
    with open(work / f"plan-{lines}.json", "wb") as stdout:
        child = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    document = json.loads((work / f"plan-{lines}.json").read_text(encoding="utf-8"))
    row = {"lines": lines, "cells": 4 * lines, "wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024),
           "exit_code": os.waitstatus_to_exitcode(status), "schema": document["schema"]}
    if document["schema"] == "error.v1":
        row["error_code"] = document["error"]["code"]
    else:
        row["runs_planned"] = len(document["runs"])
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 2_500])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plan-manifest-") as work:
        rows = [measure(n, Path(work)) for n in args.lines]
    for row in rows:
        outcome = row.get("error_code") or f"{row['runs_planned']} runs planned"
        print(f"{row['lines']:>7} lines ({row['cells']} cells): {row['wall_s']:6.2f} s, {row['peak_rss_mb']} MB, "
              f"exit {row['exit_code']}, {outcome}", file=sys.stderr)
    if args.json:
        print(json.dumps({"benchmark": "plan_large_manifest", "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
