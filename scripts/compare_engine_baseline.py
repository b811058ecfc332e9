#!/usr/bin/env python3
"""Compare a run with the perf baselines the installed sglang engine ships for its nightly CI."""
import sys

from sgl_diffusion_bench.cli.baseline import main

if __name__ == "__main__":
    sys.exit(main())
