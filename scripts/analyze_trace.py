#!/usr/bin/env python3
"""Analyse torch.profiler traces: hotspots, eager-vs-graph comparison, fast-path classification."""
import sys

from sgl_diffusion_bench.cli.trace import main

if __name__ == "__main__":
    sys.exit(main())
