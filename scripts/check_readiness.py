#!/usr/bin/env python3
"""Can a preset run here, now? GPUs, token or local copy, engine flags, disk, assets, hub reachability."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.readiness import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
