#!/usr/bin/env python3
"""Serving-mode A/B: two real `sglang serve` arms under the same seeded load, with percentiles and a verdict."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.serving import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
