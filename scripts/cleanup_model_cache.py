#!/usr/bin/env python3
"""Isolated model caches per benchmark run, and cleanup proven by an independent re-scan and a JSONL ledger."""
import sys

from sgl_diffusion_bench.cli.cache import main

if __name__ == "__main__":
    sys.exit(main())
