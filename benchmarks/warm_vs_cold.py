#!/usr/bin/env python3
"""Warm against cold on the real engine, and the runner's own overhead per cold cell.

campaign: the same A/A campaign (tiny-flux-cpu, --rounds R, so 4R measured requests) run once with --engine cold
and once with --engine warm. Prints the wall-time ratio warm/cold (goal <= 0.3), engine starts (goal: one per engine
configuration), the share of engine wall time spent in measured requests, whether every output hash is identical
across both modes, and whether the warm and cold medians agree within the measured noise (the A/A spread).

overhead: N paired cold cells: our runner (bench_diffusion_denoise.py, one cell) against invoking the same
`sglang generate` argv directly with the same environment, alternating which goes first. Prints the median of the
paired wall-time differences as a share of the direct run (goal <= 1 %).

  .venv/bin/python benchmarks/warm_vs_cold.py campaign --rounds 2
  .venv/bin/python benchmarks/warm_vs_cold.py overhead --pairs 4

Measured 2026-12-01 on the 2-core CI-class machine shared with other sessions (load average 6-15 throughout, so
single requests swung by 100-300 %), sglang 0.5.23, tiny-flux-cpu, `campaign --rounds 2` (8 measured requests each):
  warm: wall 152.3 s; engine starts 1; engine wall 148.2 s, measured requests (e2e) 8.15 s = 5.50 %
  cold: wall 1507.9 s; engine starts 8; engine wall 1490.3 s, measured requests (e2e) 13.76 s = 0.92 %
  wall ratio warm/cold 0.101; output hashes identical across both modes (b750d22f...); e2e medians cold 1193.8 ms,
  warm 921.1 ms: a 22.8 % gap inside the measured A/A noise (spread up to 297.7 %) on that loaded machine.
`overhead --pairs 2` on the same machine (load 12-15): ours 155.6 s vs direct 171.6 s, ours 164.3 s vs direct
156.7 s; median difference -4.26 s over a 164.2 s direct cell (-2.6 %): the load's noise (+-10 % per pair) is larger
than any overhead, so <= 1 % is neither shown nor refuted there; rerun on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench_diffusion_denoise.py"
sys.path.insert(0, str(REPO / "scripts"))

from sgl_diffusion_bench import engine_process  # noqa: E402


def bench(*args: str) -> tuple[dict, float]:
    began = time.monotonic()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny-flux-cpu", "--json", *args],
                          capture_output=True, text=True)
    wall = time.monotonic() - began
    doc = json.loads(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"benchmark run failed ({proc.returncode}): {doc.get('error') or 'cells not valid'}")
    return doc, wall


def spread_pct(values: list[float]) -> float:
    median = statistics.median(values)
    return (max(values) - min(values)) / median * 100


def campaign(args: argparse.Namespace, root: Path) -> int:
    runs = {}
    for mode in args.order:
        doc, wall = bench("--campaign", "aa", "--rounds", str(args.rounds), "--engine", mode, "--label", mode,
                          "--output-dir", str(root / mode))
        runs[mode] = (doc, wall)
        engines = doc["engines"]
        e2e = [c["perf"]["e2e_ms"] for c in doc["cells"]]
        print(f"{mode}: wall {wall:.1f} s for {len(doc['cells'])} measured requests; engine starts "
              f"{engines['engine_starts']}; engine wall {engines['time']['engine_wall_s']:.1f} s of which measured "
              f"requests (e2e) {engines['time']['measured_e2e_s']:.2f} s = "
              f"{engines['time']['measured_share'] * 100:.2f} %; e2e median {statistics.median(e2e):.1f} ms, "
              f"A/A spread {spread_pct(e2e):.1f} %", flush=True)
    cold, warm = runs["cold"], runs["warm"]
    ratio = warm[1] / cold[1]
    hashes = {mode: sorted({o["sha256"] for c in doc["cells"] for o in c["outputs"]}) for mode, (doc, _) in runs.items()}
    identical = len({h for hs in hashes.values() for h in hs}) == 1
    medians = {m: statistics.median(c["perf"]["e2e_ms"] for c in d["cells"]) for m, (d, _) in runs.items()}
    noise = max(spread_pct([c["perf"]["e2e_ms"] for c in d["cells"]]) for d, _ in runs.values())
    gap = abs(medians["warm"] - medians["cold"]) / medians["cold"] * 100
    first = warm[0]["engines"]["first_measured"]
    print(f"wall ratio warm/cold: {ratio:.3f} (goal <= 0.3)")
    print(f"engine starts: cold {cold[0]['engines']['engine_starts']}, warm {warm[0]['engines']['engine_starts']} "
          f"(one per engine configuration: {warm[0]['engines']['engine_starts'] == 1})")
    print(f"output hashes identical across both modes: {identical} ({hashes})")
    print(f"e2e medians: cold {medians['cold']:.1f} ms, warm {medians['warm']:.1f} ms, gap {gap:.1f} %; "
          f"measured A/A noise (largest spread) {noise:.1f} %: agree within noise: {gap <= noise}")
    print(f"first measured warm request: {json.dumps(first)}")
    return 0 if identical else 1


def direct_cell(run: dict, out: Path, direct_dir: Path) -> float:
    """The same `sglang generate` argv and environment as our cell, without our runner."""
    argv = [t.replace(str(out), str(direct_dir)) for t in run["argv"]]
    run_dir = Path(run["artifacts"]["run_dir"].replace(str(out), str(direct_dir)))
    run_dir.mkdir(parents=True)
    env = engine_process.cpu_adapter_env({**os.environ, **run["env_set"]})
    began = time.monotonic()
    subprocess.run(argv, env=env, capture_output=True, check=True, cwd=run_dir)
    return time.monotonic() - began


def overhead(args: argparse.Namespace, root: Path) -> int:
    diffs, direct_walls = [], []
    for pair in range(args.pairs):
        label = f"ov{pair}"
        out = root / label
        plan, _ = bench("--label", label, "--output-dir", str(out), "--dry-run")
        run = plan["runs"][0]
        if pair % 2:  # alternate which goes first: drift over the pair hits both sides
            d = direct_cell(run, out, root / f"direct{pair}")
            o = bench("--label", label, "--output-dir", str(out))[1]
        else:
            o = bench("--label", label, "--output-dir", str(out))[1]
            d = direct_cell(run, out, root / f"direct{pair}")
        diffs.append(o - d)
        direct_walls.append(d)
        print(f"pair {pair + 1}: ours {o:.2f} s, direct {d:.2f} s, overhead {o - d:+.2f} s", flush=True)
    share = statistics.median(diffs) / statistics.median(direct_walls) * 100
    print(f"runner overhead per cold cell: median {statistics.median(diffs):+.2f} s over a median direct cell of "
          f"{statistics.median(direct_walls):.2f} s = {share:+.2f} % (goal <= 1 %)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("campaign", allow_abbrev=False)
    c.add_argument("--rounds", type=int, default=2)
    c.add_argument("--order", nargs=2, default=["warm", "cold"], choices=["warm", "cold"])
    o = sub.add_parser("overhead", allow_abbrev=False)
    o.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--keep", help="keep the run directories here instead of a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warm-vs-cold-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        return campaign(args, root) if args.what == "campaign" else overhead(args, root)


if __name__ == "__main__":
    raise SystemExit(main())
