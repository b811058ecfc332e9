"""Where a benchmark's model caches live, and what a name may be.

Layout: ``<root>/.sglang-diffusion-benchmark-cache`` (ownership marker, written when we create or adopt the root) and
one child per run, ``<root>/<safe(model)>-<safe(label)>/``, holding ``.sglang-diffusion-benchmark-child.json``
(manifest: model, label, seed caches and their fingerprints), ``huggingface/`` + ``modelscope/`` (model caches),
``sgl_diffusion/`` (sglang's materialized overlay models), ``torch/``, ``xdg-cache/`` and ``jit/`` (Triton, Inductor,
tvm-ffi, DeepGEMM, FlashInfer, CUDA compute caches).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from .. import contract, paths
from ..work_dirs import repo_root as sglang_repo_root

MARKER_NAME = ".sglang-diffusion-benchmark-cache"
MARKER_TEXT = ("This directory is owned by sglang-diffusion-benchmark-profile (cleanup_model_cache.py).\n"
               "Only generated child caches (directories holding " + ".sglang-diffusion-benchmark-child.json"
               ") may be removed by the tool; nothing else here is ever deleted.\n")
MANIFEST_NAME = ".sglang-diffusion-benchmark-child.json"


def safe_name(text: str, what: str) -> str:
    """Characters outside alnum and ``-_.`` become ``_``; dot runs collapse and edge dots go, so ``..`` cannot form."""
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]", "_", text)).strip(".")
    if not name or not name.strip("_-."):
        raise contract.UsageError("cache.bad_name", f"{what} {text!r} leaves no usable directory name",
                                  f"pass a {what} with letters or digits")
    return name


def child_name(model: str, label: str) -> str:
    name = f"{safe_name(model, 'model')}-{safe_name(label, 'label')}"
    if len(name) > 200:
        raise contract.UsageError("cache.name_too_long", f"child cache name is {len(name)} characters (max 200)",
                                  "use a shorter --label")
    return name


def protected_paths() -> list[Path]:
    """Directories no cache root may be, or contain: /, $HOME, this bundle's checkout and the sglang checkout."""
    protected = [Path("/"), Path.home().resolve(), paths.CHECKOUT_ROOT.resolve()]
    sglang_root, _ = sglang_repo_root()
    if sglang_root is not None:
        protected.append(sglang_root.resolve())
    return protected


def resolve_root(root: str | Path) -> Path:
    """The resolved cache root; refuses /, $HOME, a repo root, or any ancestor of them (a symlink to / included)."""
    resolved = Path(root).expanduser().resolve()
    for protected in protected_paths():
        if protected == resolved or protected.is_relative_to(resolved):
            raise contract.UsageError(
                "cache.root_forbidden", f"cache root {root!r} resolves to {resolved}, which is or contains {protected}",
                "pass a dedicated directory such as /data/sglang-bench-cache as --root")
    return resolved


def resolve_seed_hub(seed: str | Path) -> Path:
    """``<seed>/hub`` if it is a directory, else the seed itself when named ``hub``; resolved."""
    seed_path = Path(seed).expanduser()
    if not seed_path.exists():
        from .. import hf_settings

        here = hf_settings.hub_cache()
        found = [str(h) for h in (here.parent, here) if h.is_dir()]
        raise contract.InputError(
            "cache.seed_missing", f"seed cache {seed} does not exist",
            ("this machine's Hugging Face home is " + found[0] + " (pass it, or its hub/ directory)") if found else
            "no Hugging Face cache exists on this machine yet: drop --seed-model-cache-root (the run downloads "
            "into its isolated cache) or point it at a directory that holds a hub/ with models--* folders")
    if (seed_path / "hub").is_dir():
        return (seed_path / "hub").resolve()
    if seed_path.is_dir() and seed_path.resolve().name == "hub":
        return seed_path.resolve()
    raise contract.InputError("cache.seed_not_hf_cache",
                              f"seed cache {seed} is neither an HF home (with hub/) nor a hub directory",
                              "pass the HF home (e.g. ~/.cache/huggingface) or its hub/ directory as --seed-cache")


def marker_ok(root: Path) -> bool:
    marker = root / MARKER_NAME
    try:
        st = marker.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and marker.read_text(encoding="utf-8", errors="replace").startswith(
        MARKER_TEXT.splitlines()[0])


# ----------------------------------------------------------------------------------------------- environment


def cache_environment(child: Path) -> dict[str, str]:
    """Every cache location the engine and its compilers write, pointed inside the child.

    Read by: huggingface_hub/diffusers/transformers (HF_*), modelscope (MODELSCOPE_*), sglang.multimodal_gen envs.py
    (SGLANG_DIFFUSION_CACHE_ROOT: materialized overlay models, i.e. weights), torch (TORCHINDUCTOR_CACHE_DIR,
    TORCH_HOME), triton (TRITON_CACHE_DIR), tvm_ffi.cpp.load_inline used by sglang.jit_kernel (TVM_FFI_CACHE_DIR),
    sglang's deep_gemm wrapper (SGLANG_DG_CACHE_DIR, copied into DG_JIT_CACHE_DIR), flashinfer's JIT
    (FLASHINFER_WORKSPACE_BASE), the CUDA driver's PTX cache (CUDA_CACHE_PATH), and anything else under ~/.cache
    that honours XDG_CACHE_HOME.
    """
    hf, hub, jit = child / "huggingface", child / "huggingface" / "hub", child / "jit"
    env = {
        "HF_HOME": hf, "HF_HUB_CACHE": hub, "HUGGINGFACE_HUB_CACHE": hub, "DIFFUSERS_CACHE": hub,
        "TRANSFORMERS_CACHE": hub, "HF_ASSETS_CACHE": hf / "assets", "HF_MODULES_CACHE": hf / "modules",
        "HF_XET_CACHE": hf / "xet", "MODELSCOPE_CACHE": child / "modelscope",
        "MODELSCOPE_MODULES_CACHE": child / "modelscope" / "modules",
        "SGLANG_DIFFUSION_CACHE_ROOT": child / "sgl_diffusion", "TORCH_HOME": child / "torch",
        "XDG_CACHE_HOME": child / "xdg-cache", "TRITON_CACHE_DIR": jit / "triton",
        "TORCHINDUCTOR_CACHE_DIR": jit / "torchinductor", "TVM_FFI_CACHE_DIR": jit / "tvm-ffi",
        "SGLANG_DG_CACHE_DIR": jit / "deep_gemm", "DG_JIT_CACHE_DIR": jit / "deep_gemm",
        "FLASHINFER_WORKSPACE_BASE": jit / "flashinfer", "CUDA_CACHE_PATH": jit / "cuda",
    }
    return {k: str(v) for k, v in sorted(env.items())}

