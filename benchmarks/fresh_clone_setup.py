#!/usr/bin/env python3
"""A new user's first run, timed: fresh clone -> `make setup` -> `make demo` (first bench-report), cold and warm.

Clones this repository's HEAD (committed state only) into a temporary folder the benchmark creates and marks, runs
`make setup` then `make demo` there with UV_CACHE_DIR pointing at a folder of its own: "cold" starts with that
folder empty (uv downloads every wheel), "warm" is a second fresh clone with the same, now filled, folder. Each
phase's time comes from the tools' own lines on stderr: install.sh's `install.sh: <phase> done in X s` and the
bundle's `[progress] <phase>: done in X s` (import check, probe, engine load, warm-up...), beside our wall clocks
of clone, setup and demo. Prints one JSON document on stdout (human text on stderr); a failed step makes it exit 1
with that step's tail of stderr in the document and no totals for the run it broke.

It never touches the shared default uv cache (nor pip's): it deletes only its own temporary folder and the lock files
the engine left in the temp folder for model paths inside it.
uv itself is bootstrapped by install.sh into $XDG_CACHE_HOME when it is not on PATH: the benchmark points that at a
folder of its own too, filled by the cold run like the uv cache.

  .venv/bin/python benchmarks/fresh_clone_setup.py > benchmarks/results/fresh_clone_setup.json

Measured: see benchmarks/results/fresh_clone_setup.json (README's Quick start quotes the current figure;
benchmarks/results/README.md keeps the history).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = ".fresh-clone-setup-benchmark"
INSTALL_LINE = re.compile(r"^install\.sh: (?P<name>.+?) done in (?P<s>[0-9.]+) s$")
PROGRESS_LINE = re.compile(r"^\[progress\] (?P<name>.+?): (?P<outcome>[\w -]+?) in (?P<s>[0-9.]+) s$")
# the user's own settings that would make the clone's run differ from a new user's
DROPPED_ENV = ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "UV_CACHE_DIR")
DROPPED_PREFIXES = ("DIFFUSION_BENCH_", "SGL_DIFFUSION_BENCH_", "SGLANG_DIFFUSION_SKILL_")


def child_env(uv_cache: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and not k.startswith(DROPPED_PREFIXES)}
    env["UV_CACHE_DIR"] = str(uv_cache)
    env["XDG_CACHE_HOME"] = str(root / "xdg-cache")  # install.sh keeps its uv bootstrap there
    return env


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    return {"argv": argv, "rc": proc.returncode, "wall_s": round(wall, 2), "stdout": proc.stdout, "stderr": proc.stderr}


def phases(stderr: str, pattern: re.Pattern) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        m = pattern.match(line.strip())
        if m:
            row = {"phase": m["name"], "s": float(m["s"])}
            if "outcome" in pattern.groupindex:
                row["outcome"] = m["outcome"]
            out.append(row)
    return out


def one_run(label: str, root: Path, sha: str, uv_cache: Path) -> dict:
    clone = root / f"clone-{label}"
    env = child_env(uv_cache, root)
    print(f"[{label}] cloning {sha[:10]} into {clone}", file=sys.stderr, flush=True)
    steps = {}
    run: dict = {"label": label, "uv_cache_empty_at_start": not any(uv_cache.iterdir()), "uv_cache": str(uv_cache),
                 "load_avg_start": os.getloadavg()}
    for name, argv, cwd in (
        ("clone", ["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)], root),
        ("checkout", ["git", "-c", "advice.detachedHead=false", "checkout", "-q", sha], clone),
        ("setup", ["make", "setup"], clone),
        ("demo", ["make", "demo"], clone),
    ):
        print(f"[{label}] {name} ...", file=sys.stderr, flush=True)
        res = timed(argv, cwd, env)
        print(f"[{label}] {name}: rc {res['rc']} in {res['wall_s']} s", file=sys.stderr, flush=True)
        steps[name] = res
        if res["rc"] != 0:
            run.update(ok=False, failed_step=name, stderr_tail=res["stderr"][-4000:],
                       steps={k: {"wall_s": v["wall_s"], "rc": v["rc"]} for k, v in steps.items()})
            return run
    report = None
    try:
        report = json.loads(steps["demo"]["stdout"])
    except json.JSONDecodeError:
        pass
    ok = isinstance(report, dict) and report.get("schema") == "bench-report.v1"
    run.update(
        ok=ok,
        steps={k: {"wall_s": v["wall_s"], "rc": v["rc"]} for k, v in steps.items()},
        setup_phases=phases(steps["setup"]["stderr"], INSTALL_LINE),
        demo_phases=phases(steps["demo"]["stderr"], PROGRESS_LINE),
        demo_report_schema=report.get("schema") if isinstance(report, dict) else None,
        load_avg_end=os.getloadavg(),
    )
    if ok:
        clone_s = steps["clone"]["wall_s"] + steps["checkout"]["wall_s"]
        run["totals"] = {
            "clone_s": round(clone_s, 2),
            "setup_s": steps["setup"]["wall_s"],
            "demo_s": steps["demo"]["wall_s"],
            "clone_to_first_report_s": round(clone_s + steps["setup"]["wall_s"] + steps["demo"]["wall_s"], 2),
        }
    else:
        run["stderr_tail"] = steps["demo"]["stderr"][-4000:]
    return run


def engine_locks(root: Path) -> list[Path]:
    """The lock files the engine leaves in the temp folder for each model path it loads (named <hash>-<the path with
    '/' as '-'>.lock): those naming a path under our own temporary folder are ours to delete."""
    tag = str(root).replace("/", "-") + "-"
    return [p for p in Path(tempfile.gettempdir()).glob("*.lock") if tag in p.name and p.is_file()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="cold,warm", help="which runs, in order (cold needs to come first): cold,warm")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path goes to stderr)")
    ap.add_argument("--uv-cache", type=Path, help="use this (existing) folder as UV_CACHE_DIR and leave it in place; "
                    "default: an empty one inside the temporary folder (deleted with it)")
    args = ap.parse_args()
    labels = [x for x in args.runs.split(",") if x]
    if not labels or any(x not in ("cold", "warm") for x in labels):
        print(json.dumps({"schema": "error.v1", "ok": False, "error": {
            "code": "usage.bad_value", "message": f"--runs {args.runs!r}", "hint": "use cold, warm or cold,warm"}}))
        return 2
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, check=True, capture_output=True, text=True)
    sha = sha.stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip())
    root = Path(tempfile.mkdtemp(prefix="fresh-clone-setup-"))
    (root / MARKER).write_text("made by benchmarks/fresh_clone_setup.py; deleted when it ends\n")
    uv_cache = args.uv_cache.resolve() if args.uv_cache else root / "uv-cache"
    uv_cache.mkdir(exist_ok=bool(args.uv_cache))
    doc = {
        "schema": "fresh_clone_setup.v1",
        "commit": sha,
        "worktree_dirty_not_measured": dirty,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_avg_start": os.getloadavg(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "uv_on_path": shutil.which("uv") is not None,
        "runs": [],
    }
    try:
        for label in labels:
            doc["runs"].append(one_run(label, root, sha, uv_cache))
            if not doc["runs"][-1]["ok"]:
                break
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        elif (root / MARKER).is_file():
            shutil.rmtree(root, ignore_errors=True)
            for lock in engine_locks(root):
                lock.unlink(missing_ok=True)
    doc["ok"] = len(doc["runs"]) == len(labels) and all(r["ok"] for r in doc["runs"])
    print(json.dumps(doc, indent=2))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
