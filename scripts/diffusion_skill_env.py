#!/usr/bin/env python3
"""Preflight for diffusion benchmarks: repo root, output dirs, idle GPUs, leases, `inspect --json`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.env import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
