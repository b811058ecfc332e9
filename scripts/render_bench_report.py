#!/usr/bin/env python3
"""Render a bench-report.v1 JSON as Markdown PR evidence plus a PNG plot of every cell."""
import sys

from sgl_diffusion_bench.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
