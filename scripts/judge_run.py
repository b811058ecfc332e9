#!/usr/bin/env python3
"""Judge a run made elsewhere (engine log, perf dump, outputs) with the benchmark runner's own gates."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.judge import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
