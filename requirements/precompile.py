"""Compile, on every core, the bytecode of the modules an engine run imports (a measured list), so a fresh venv's first
run does not compile them one by one inside its single-threaded import of sglang.

  VENV/bin/python requirements/precompile.py requirements/engine-0.5.23-bytecode.txt [--also DIR ...]

The list holds paths relative to the venv's site-packages, one per line (`measure_bytecode.py` writes it). Files the
venv does not have are skipped and counted: a stale list only costs speed. Prints one line on stderr. Standalone (the
standard library only): it runs before anything else is importable.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import py_compile
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _compile(path: str) -> bool:
    try:
        cached = Path(importlib.util.cache_from_source(path))
        if cached.exists() and cached.stat().st_mtime >= Path(path).stat().st_mtime:
            return True  # a re-run of the set-up recompiles nothing
        py_compile.compile(path, doraise=True)
        return True
    except (py_compile.PyCompileError, OSError, ValueError):
        return False


def targets(listing: Path, root: Path, also: list[Path]) -> tuple[list[str], int]:
    """The files to compile and how many listed ones this venv lacks."""
    names = [line.strip() for line in listing.read_text(encoding="utf-8").splitlines()]
    wanted = [root / n for n in names if n and not n.startswith("#")]
    present = [str(p) for p in wanted if p.is_file()]
    for folder in also:
        present.extend(str(p) for p in sorted(folder.rglob("*.py")))
    return present, len(wanted) - sum(1 for p in wanted if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("listing", type=Path, help="the measured list (paths relative to site-packages)")
    ap.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["purelib"]),
                    help="where the listed paths are relative to (default: this interpreter's site-packages)")
    ap.add_argument("--also", type=Path, action="append", default=[], help="a folder whose .py files are compiled too")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    files, missing = targets(args.listing, args.root, args.also)
    workers = max(1, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers) as pool:
        compiled = sum(pool.map(_compile, files, chunksize=64))
    print(f"precompile: {compiled} of {len(files)} modules compiled on {workers} cores in "
          f"{time.monotonic() - t0:.1f} s ({missing} listed files not in this venv, {len(files) - compiled} failed)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
