"""GPU test harness for running the real sglang engine (0.5.10.post1 and 0.5.23) on a lent H200 (test tooling, not
product code).

Put this directory on PYTHONPATH; every Python process started with it (the CLI, the engine's spawned worker, our
tools) then gets the out-of-tree adapter described in shared/reference/sglang-gpu-engine.md:

- stand-ins for ``sgl_kernel``, ``av`` and ``imageio_ffmpeg``, served only when no real package is importable (a
  finder appended at the END of sys.meta_path, so an installed package always wins);
- sglang's CuTe-DSL Wan q/k RMSNorm+RoPE module replaced by one that declines every tensor, only when ``cutlass`` is
  not importable (its import would fail and the engine would load diffusers' Wan transformer instead of its own);
- the machine image's namespace-only ``sphinx`` directory hidden from imports (a half-imported ``sphinx`` left in
  sys.modules by sglang's platform module breaks scipy.stats later);
- CUDA_HOME and TVM_FFI_CACHE_DIR defaulted, so sglang's JIT CUDA kernels (apache-tvm-ffi) compile and link.

Each action is logged once per process on stderr as ``[gpu-harness] ...``. Python imports only the first
``sitecustomize`` on sys.path, so this one runs the next one too.
"""

import glob
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_STANDINS = os.path.join(_HERE, "standins")
_STANDIN_NAMES = ("sgl_kernel", "av", "imageio_ffmpeg")
CUTEDSL_MODULE = "sglang.kernels.ops.diffusion.rope.rmsnorm_interleaved_rope_cutedsl"
TAG = "[gpu-harness]"


def log(message: str) -> None:
    print(f"{TAG} {message} (pid {os.getpid()})", file=sys.stderr, flush=True)


def _is_namespace_only(spec) -> bool:
    return spec is not None and spec.origin in (None, "namespace") and spec.submodule_search_locations is not None


class _HideNamespaceSphinx(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: ``sphinx`` (and submodules) is not importable when it is only a namespace directory."""

    logged = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] != "sphinx":
            return None
        spec = importlib.machinery.PathFinder.find_spec("sphinx")
        if not _is_namespace_only(spec):
            return None
        if not self.logged:
            self.logged = True
            log(f"hiding namespace-only sphinx directory {list(spec.submodule_search_locations)} from imports")
        raise ModuleNotFoundError(f"No module named {fullname!r} (namespace-only sphinx hidden by the GPU harness)",
                                  name=fullname)


class _StandIns(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: serves a stand-in package only when no real one was found before it."""

    served: set = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _STANDIN_NAMES:
            return None  # submodules resolve through the stand-in package's own __path__
        spec = importlib.machinery.PathFinder.find_spec(fullname, [_STANDINS])
        if spec is not None and fullname not in self.served:
            self.served.add(fullname)
            log(f"no real {fullname!r} importable: using the stand-in {os.path.join(_STANDINS, fullname)}")
        return spec


class _NoCuteDSL(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: ``CUTEDSL_MODULE`` served from the stand-in when ``cutlass`` is not importable."""

    logged = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != CUTEDSL_MODULE or importlib.machinery.PathFinder.find_spec("cutlass") is not None:
            return None
        standin = os.path.join(_STANDINS, "no_cutedsl_rmsnorm_rope.py")
        if not self.logged:
            self.logged = True
            log(f"no real 'cutlass' importable: using the stand-in {standin} for {CUTEDSL_MODULE}")
        return importlib.util.spec_from_file_location(fullname, standin)


def _cuda_root():
    """A CUDA root whose lib64 holds libcudart.so (sglang's JIT link step uses -L$CUDA_HOME/lib64)."""
    candidates = []
    nvcc = next((os.path.join(d, "nvcc") for d in os.environ.get("PATH", "").split(os.pathsep)
                 if d and os.access(os.path.join(d, "nvcc"), os.X_OK)), None)
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in candidates:
        if glob.glob(os.path.join(root, "lib64", "libcudart.so*")):
            return root
    return None


def _set_cuda_env() -> None:
    if not os.environ.get("CUDA_HOME"):
        root = _cuda_root()
        if root:
            os.environ["CUDA_HOME"] = root
            log(f"CUDA_HOME={root} (has lib64/libcudart.so)")
        else:
            log("no CUDA root with lib64/libcudart.so found; CUDA_HOME left unset")
    if not os.environ.get("TVM_FFI_CACHE_DIR"):
        cache = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tvm-ffi-cache")
        os.makedirs(cache, exist_ok=True)
        os.environ["TVM_FFI_CACHE_DIR"] = cache
        log(f"TVM_FFI_CACHE_DIR={cache}")


def _chain_next_sitecustomize() -> None:
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


sys.meta_path.insert(0, _HideNamespaceSphinx())
sys.meta_path.insert(0, _NoCuteDSL())
sys.meta_path.append(_StandIns())
_set_cuda_env()
_chain_next_sitecustomize()
