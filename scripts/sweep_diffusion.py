#!/usr/bin/env python3
"""Sweeps: many presets' campaigns as shards on this host, a Slurm cluster or a Ray cluster, one merged report."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.sweep import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
