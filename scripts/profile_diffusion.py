#!/usr/bin/env python3
"""Run a preset under the engine's torch.profiler and list the trace files per rank (never benchmark numbers)."""
import sys

from sgl_diffusion_bench.cli.profile import main

if __name__ == "__main__":
    sys.exit(main())
