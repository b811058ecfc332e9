#!/usr/bin/env python3
"""One command from "is my change faster?" to a PR evidence folder a reviewer can verify (run, verify, render)."""
import sys

from sgl_diffusion_bench.cli.evidence import main

if __name__ == "__main__":
    sys.exit(main())
