#!/usr/bin/env python3
"""Can a preset run here, now? GPUs, token or local copy, engine flags, disk, assets, hub reachability."""
import sys

from sgl_diffusion_bench.cli.readiness import main

if __name__ == "__main__":
    sys.exit(main())
