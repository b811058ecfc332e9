#!/usr/bin/env python3
"""Preset benchmarks around `sglang generate`: catalog, nightly drift check, engine probe, assets, run plans."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.bench import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
