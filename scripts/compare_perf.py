#!/usr/bin/env python3
"""Compare sglang diffusion perf dumps: E2E, denoise, stages, steps, memory; statistics for groups."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.compare import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
