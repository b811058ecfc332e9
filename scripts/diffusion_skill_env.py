#!/usr/bin/env python3
"""Preflight for diffusion benchmarks: repo root, output dirs, idle GPUs, leases, `inspect --json`."""
import sys

from sgl_diffusion_bench.cli.env import main

if __name__ == "__main__":
    sys.exit(main())
