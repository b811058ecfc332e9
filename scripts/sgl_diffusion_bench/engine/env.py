"""Environment discovery: versions, GPUs, Hugging Face, and problems to act on (where sglang and our outputs live is
work_dirs's job).

Nothing here imports sglang: finding its files and reading package metadata is enough, and importing it costs
seconds and can fail in ways that are themselves findings.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from .. import bench_env, contract, fileio, hf_settings, progress, work_dirs
from . import gpu

BENCH_ENV_VARS = ("FLASHINFER_DISABLE_VERSION_CHECK", "SGLANG_DIFFUSION_SYNC_STAGE_PROFILING", "NCCL_NVLS_ENABLE")
GATED_HINT = f"{hf_settings.MISSING_TOKEN_HINT}; without it gated models fail with a misleading 'not supported' error"


def _git_commit(root: Path | None) -> str | None:
    if root is None or not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def torch_info(import_torch: bool = True, gpus_seen: bool = False) -> dict[str, Any]:
    """torch's version, CUDA build and NCCL version; importing torch is needed for the last two.

    ``import_torch=False`` (a benchmark run's record, which must not pay seconds of torch import per campaign):
    the CUDA build comes from torch/version.py read as text, CUDA availability from NVML (``gpus_seen``), NCCL stays
    unknown."""
    info: dict[str, Any] = {"version": work_dirs.dist_version("torch"), "cuda_build": None, "cuda_available": False,
                            "nccl": None}
    if info["version"] is None:
        return info
    if not import_torch:
        info["cuda_build"] = _torch_cuda_build_from_source()
        info["cuda_available"] = gpus_seen and info["cuda_build"] is not None
        return info
    try:
        with progress.phase("importing torch (its version, CUDA build and NCCL)"):
            import torch
    except Exception as exc:  # a broken torch install is itself a finding, reported in problems
        info["import_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["cuda_build"] = torch.version.cuda
    info["cuda_available"] = bool(torch.cuda.is_available())
    if info["cuda_available"]:
        try:
            nccl = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            info["nccl"] = None
    return info


def _torch_cuda_build_from_source() -> str | None:
    """``torch.version.cuda`` without importing torch: the generated torch/version.py holds it as a literal."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def hf_info(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Token presence (never the value) and cache locations with free disk."""
    env = os.environ if environ is None else environ
    hf_home = Path(env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface")
    hub = Path(env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or hf_home / "hub")
    return {
        "token_present": bool(hf_settings.token_vars_set(env)),
        "token_vars_set": hf_settings.token_vars_set(env),
        "offline": hf_settings.offline(env),
        "hf_home": str(hf_home),
        "hub_cache": str(hub),
        "hub_cache_free_bytes": fileio.free_bytes(hub),
    }


def engine_check(python: str, import_check: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The engine as ``python`` has it, checked for real: its generate entry point imported in a child process (the
    CPU adapter on PYTHONPATH, so a GPU-less box tests what `sglang generate` would; ``import_check`` is the engine
    probe's, cached), and sglang's declared torch requirement against the installed torch."""
    from . import engine_python

    info = engine_python.describe(python)
    return {"python": python, "import_check": import_check(python),
            "torch_requirement": engine_python.torch_requirement(info)}


def inspect(*, with_gpus: bool = True, nvml=None, import_torch: bool = True, engine_python: str | None = None,
            import_check: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The whole environment as one env.v1 document (``import_torch=False``: see torch_info; ``import_check``, the
    engine probe's, also imports the engine in a child process unless its cache answers: 10-40 s)."""
    from . import engine_python as engine_interpreter

    root, root_reason = work_dirs.repo_root()
    work, work_reason = work_dirs.work_root()
    own = engine_python is None or engine_interpreter.is_own(engine_python)
    location = work_dirs.sglang_location() if own else engine_interpreter.sglang_location(engine_python)
    inventory = gpu.read_inventory(nvml) if with_gpus else gpu.Inventory((), None, "GPU scan skipped")
    torch = torch_info(import_torch, gpus_seen=bool(inventory.gpus))
    writable = _writable(work)
    leased = {g.uuid: gpu.lease_holder(g.uuid) for g in inventory.gpus}
    doc = contract.envelope(
        "env.v1", "diffusion_skill_env",
        sglang={**location, "repo_root": str(root) if root else None, "repo_root_reason": root_reason,
                "git_commit": _git_commit(root)},
        directories={"work_root": str(work), "work_root_reason": work_reason, "writable": writable,
                     "assets": str(work / work_dirs.ASSETS_SUBDIR),
                     "benchmarks": str(work / work_dirs.OUTPUT_SUBDIRS["benchmarks"]),
                     "profiles": str(work / work_dirs.OUTPUT_SUBDIRS["profiles"])},
        versions={"python": sys.version.split()[0], "python_executable": sys.executable,
                  "torch": torch["version"], "torch_cuda_build": torch["cuda_build"],
                  "cuda_available": torch["cuda_available"], "sglang": location["version"],
                  "diffusers": work_dirs.dist_version("diffusers"),
                  "transformers": work_dirs.dist_version("transformers"), "triton": work_dirs.dist_version("triton"),
                  "nccl": torch["nccl"], "driver": inventory.driver_version},
        gpus=[dict(g.to_json(), leased_by=leased[g.uuid]) for g in inventory.gpus],
        gpus_reason=inventory.reason,
        env={**{name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", *BENCH_ENV_VARS)},
             **{name: os.environ.get(bench_env.source(name) or name) for name in bench_env.VARIABLES}},
        huggingface=hf_info(),
    )
    if import_check is not None and location["installed"]:
        doc["sglang"]["engine_check"] = engine_check(engine_python or sys.executable, import_check)
    doc["problems"] = find_problems(doc, torch)
    doc["ok"] = not any(p["severity"] == "error" for p in doc["problems"])  # an error is something to fix first
    return doc


def _writable(path: Path) -> bool:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return os.access(candidate, os.W_OK)
    return False


def find_problems(doc: dict[str, Any], torch: dict[str, Any]) -> list[dict[str, str]]:
    """Findings an agent must act on before a GPU benchmark; each names its next step."""
    from . import engine_python

    problems: list[dict[str, str]] = []

    def add(code: str, severity: str, message: str, hint: str) -> None:
        problems.append({"code": code, "severity": severity, "message": message, "hint": hint})

    if not doc["sglang"]["installed"]:
        add("sglang.missing", "error", doc["sglang"]["reason"], "make setup (CPU) or install sglang for your GPU stack")
    check = doc["sglang"].get("engine_check")
    if check and not check["import_check"]["ok"]:
        from .engine_python import install_hint

        imported = check["import_check"]
        add("sglang.import_failed", "error", f"importing {imported['module']} with {check['python']} failed: "
            f"{imported['error']}", install_hint(imported["missing_module"], check["python"],
                                                 doc["sglang"]["version"]))
    stale = engine_python.stale_shebang(check["python"]) if check else None
    if stale:
        add("sglang.stale_shebang", "warning", stale, "nothing to do for the benchmark (it runs the script with that "
            "interpreter); reinstall sglang there, or recreate the environment, to run `sglang` by hand")
    if check and check["torch_requirement"] and not check["torch_requirement"]["met"]:
        pin = check["torch_requirement"]
        add("sglang.torch_pin_unmet", "warning", f"sglang {doc['sglang']['version']} declares {pin['declared']}; "
            f"the installed torch is {pin['installed']}", "fine on CPU (torch 2.13.0+cpu runs 0.5.23: README "
            "'Engine install'); on a GPU, install the torch build sglang declares for your CUDA")
    if torch.get("import_error"):
        add("torch.broken", "error", torch["import_error"], "reinstall torch matching your CUDA driver")
    elif torch["version"] is None:
        add("torch.missing", "error", "torch is not installed", "install torch (CPU: pip install torch==2.13.0)")
    for former, name in bench_env.deprecated_in_use().items():
        add("env.deprecated_variable", "warning", f"{former} is the old name of {name} (read for now)",
            f"set {name} instead: sglang claims every SGL_* and SGLANG_* variable as its own")
    if not doc["directories"]["writable"]:
        add("fs.not_writable", "error", f"{doc['directories']['work_root']} is not writable",
            f"set {work_dirs.WORKDIR_ENV} to a writable directory")
    gpus = doc["gpus"]
    if not gpus:
        add("gpu.none", "warning", doc["gpus_reason"] or "no GPUs",
            "GPU presets cannot run here; the tiny-flux-cpu preset runs the real engine on CPU")
    else:
        idle = [g for g in gpus if gpu.is_idle(_as_gpu(g)) and not g["leased_by"]]
        if not idle:
            add("gpu.no_idle", "error", "no idle GPU (each has a process, memory in use, load, or a lease)",
                "wait, or choose GPUs explicitly with CUDA_VISIBLE_DEVICES and accept contention")
        if any(g["mig_mode"] == "enabled" for g in gpus):
            add("gpu.mig_enabled", "warning", "MIG is enabled on some GPUs; memory and processes are per instance",
                "benchmark on GPUs with MIG disabled for comparable numbers")
        if doc["env"]["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" and len(gpus) > 1:
            add("gpu.device_order", "warning", "CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA indices may differ "
                "from NVML indices", "export CUDA_DEVICE_ORDER=PCI_BUS_ID (the benchmark sets it for its runs)")
        if not doc["versions"]["cuda_available"]:
            add("torch.no_cuda", "error", "GPUs are present but torch cannot use CUDA",
                "install a CUDA build of torch that matches the driver")
    if not doc["huggingface"]["token_present"] and not doc["huggingface"]["offline"]:
        add("hf.no_token", "warning", "no Hugging Face token variable set: gated presets (FLUX.*, SD3.5) will fail",
            GATED_HINT)
    return problems


def _as_gpu(doc: dict[str, Any]) -> gpu.Gpu:
    return gpu.Gpu(index=doc["index"], uuid=doc["uuid"], name=doc["name"],
                   memory_used_bytes=doc["memory_used_bytes"], memory_reserved_bytes=doc["memory_reserved_bytes"],
                   memory_total_bytes=doc["memory_total_bytes"],
                   utilization_pct=doc["utilization_pct"], mig_mode=doc["mig_mode"],
                   processes=tuple(gpu.GpuProcess(**p) for p in doc["processes"]))
