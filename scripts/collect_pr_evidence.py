#!/usr/bin/env python3
"""One command from "is my change faster?" to a PR evidence folder a reviewer can verify (run, verify, render)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -I` leaves this folder off sys.path
from sgl_diffusion_bench.cli.evidence import main  # noqa: E402  (checks the interpreter first)

if __name__ == "__main__":
    sys.exit(main())
