"""The options every engine-touching CLI shares: which interpreter's sglang, and whether a degraded probe will do."""

from __future__ import annotations

import argparse

from .. import engine_probe, engine_python


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine-python", metavar="PATH",
                        help="the Python whose sglang to drive (default: $" + engine_python.ENV_VAR + ", else this "
                             "interpreter); the bundle stays in its own environment")
    parser.add_argument("--accept-degraded-probe", action="store_true",
                        help="continue when sglang's parser cannot be imported and the probe only read its sources")


def probe(args: argparse.Namespace, *, refresh: bool = False, accept_degraded: bool | None = None
          ) -> engine_probe.ProbeResult:
    """The probe of the engine these arguments name (cached unless refresh; degraded only if accepted)."""
    return engine_probe.probe_engine(
        refresh=refresh, python=engine_python.resolve(args.engine_python),
        accept_degraded=args.accept_degraded_probe if accept_degraded is None else accept_degraded)
