#!/usr/bin/env python3
"""Run a preset under the engine's torch.profiler and list the trace files per rank (never benchmark numbers)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.profile import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
