#!/usr/bin/env python3
"""Isolated model caches per benchmark run, and cleanup proven by an independent re-scan and a JSONL ledger."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.cache import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
