#!/usr/bin/env python3
"""Analyse torch.profiler traces: hotspots, eager-vs-graph comparison, fast-path classification."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.trace import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
