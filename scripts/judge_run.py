#!/usr/bin/env python3
"""Judge a run made elsewhere (engine log, perf dump, outputs) with the benchmark runner's own gates."""
import sys

from sgl_diffusion_bench.cli.judge import main

if __name__ == "__main__":
    sys.exit(main())
