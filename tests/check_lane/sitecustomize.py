"""The fast lane (`make check`) proves its promise: in it, torch, sglang and the model libraries look uninstalled.

conftest.py puts this directory first on PYTHONPATH when DIFFUSION_BENCH_CHECK_LANE=1, so every script a test starts
gets the same guard as the test process. A test that needs these packages is marked ``torch`` (or ``engine``) and
runs in `make test` only.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

BLOCKED = ("torch", "torchvision", "sglang", "diffusers", "transformers", "triton")


class _Absent(importlib.abc.Loader):
    """A spec without an origin reads as 'not installed'; importing it raises ModuleNotFoundError."""

    def create_module(self, spec):
        raise ModuleNotFoundError(f"{spec.name} is not importable in the check lane (DIFFUSION_BENCH_CHECK_LANE=1): "
                                  "mark the test `torch` or `engine`", name=spec.name)

    def exec_module(self, module):  # never reached: create_module raises
        raise AssertionError(module)


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(fullname, _Absent())
        return None


def _bench_env():
    """The package's variable reader, loaded by path: the package is not importable yet when this file runs."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "sgl_diffusion_bench" / "bench_env.py"
    spec = importlib.util.spec_from_file_location("_check_lane_bench_env", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_variables = _bench_env()
if _variables.get(_variables.CHECK_LANE) == "1":
    sys.meta_path.insert(0, _Blocked())
