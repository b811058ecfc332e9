#!/usr/bin/env python3
"""Preset benchmarks around `sglang generate`: catalog, nightly drift check, engine probe, assets, run plans."""
import sys

from sgl_diffusion_bench.cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
