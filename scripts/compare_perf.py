#!/usr/bin/env python3
"""Compare sglang diffusion perf dumps: E2E, denoise, stages, steps, memory; statistics for groups."""
import sys

from sgl_diffusion_bench.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
