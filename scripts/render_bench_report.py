#!/usr/bin/env python3
"""Render a bench-report.v1 JSON as Markdown PR evidence plus a PNG plot of every cell."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.report import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
