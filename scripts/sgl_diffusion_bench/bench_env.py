"""The bundle's own environment variables, read in this one place.

They are named DIFFUSION_BENCH_*, outside both of the engine's namespaces: sglang claims every SGLANG_* variable,
and its ``srt/environ.py`` rewrites every SGL_* variable to SGLANG_* with a warning in each engine process, so an
SGL_DIFFUSION_BENCH_* name would be copied into the engine's namespace too. The names used before
(SGLANG_DIFFUSION_SKILL_*, SGLANG_DIFFUSION_GPU_LOCK_DIR, SGL_BENCH_CHECK_LANE) are still read, with one deprecation
line on stderr per process.

Standard library only: tests/check_lane/sitecustomize.py loads this file by path, before the package is importable.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

WORKDIR = "DIFFUSION_BENCH_WORKDIR"  # where assets and outputs go
DEBUG = "DIFFUSION_BENCH_DEBUG"  # a traceback for an internal error (exit 70)
CHECK_LANE = "DIFFUSION_BENCH_CHECK_LANE"  # `make check`: torch and the engine look uninstalled
ENGINE_PYTHON = "DIFFUSION_BENCH_ENGINE_PYTHON"  # the interpreter whose sglang to drive
TINY_MODEL_DIR = "DIFFUSION_BENCH_TINY_MODEL_DIR"  # where the tiny local model is built
GPU_LOCK_DIR = "DIFFUSION_BENCH_GPU_LOCK_DIR"  # the GPU lease directory several users share
CPU_ADAPTER_DISABLE = "DIFFUSION_BENCH_CPU_ADAPTER_DISABLE"  # read by cpu_adapter/ itself, inside engine processes
VARIABLES = (WORKDIR, DEBUG, CHECK_LANE, ENGINE_PYTHON, TINY_MODEL_DIR, GPU_LOCK_DIR, CPU_ADAPTER_DISABLE)
FORMER_NAMES = {WORKDIR: "SGLANG_DIFFUSION_SKILL_WORKDIR", DEBUG: "SGLANG_DIFFUSION_SKILL_DEBUG",
                CHECK_LANE: "SGL_BENCH_CHECK_LANE", GPU_LOCK_DIR: "SGLANG_DIFFUSION_GPU_LOCK_DIR"}
_warned: set[str] = set()


def source(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable that gives ``name`` its value: ``name`` itself, else its former name; None when neither is set
    (an empty value counts as unset)."""
    env = os.environ if environ is None else environ
    if env.get(name):
        return name
    former = FORMER_NAMES.get(name)
    return former if former and env.get(former) else None


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of our variable ``name``; a former name still counts, and says once per process that it is old."""
    env = os.environ if environ is None else environ
    given_by = source(name, env)
    if given_by is None:
        return None
    if given_by != name and given_by not in _warned:
        _warned.add(given_by)
        print(f"[sgl-diffusion-bench] {given_by} is deprecated: set {name} instead (sglang claims the SGL_* and "
              "SGLANG_* names)", file=sys.stderr)
    return env[given_by]


def deprecated_in_use(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{former name: new name} for each former name set where its new name is not."""
    env = os.environ if environ is None else environ
    return {former: name for name, former in FORMER_NAMES.items() if source(name, env) == former}
