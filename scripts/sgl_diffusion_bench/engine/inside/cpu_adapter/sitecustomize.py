"""Install the sglang CPU adapter in every Python process started with this directory on PYTHONPATH.

Python imports the first ``sitecustomize`` on sys.path, so this one would hide any other; it runs that one too.
Installing only registers import hooks: no torch or sglang import happens here.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize() -> None:
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import sgl_cpu_adapter  # noqa: E402

sgl_cpu_adapter.install()
_chain_next_sitecustomize()
