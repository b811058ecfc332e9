"""Fill the CPU gaps of sglang 0.5.10.post1's diffusion runtime so `sglang generate` runs natively without a GPU.

Loaded by the sibling ``sitecustomize.py`` in every process that has this directory on PYTHONPATH (the CLI and the
spawned worker alike). It only registers post-import hooks; nothing is patched, and torch is not imported, until one
of the named modules is imported. The first hook to fire decides once per process: with an accelerator present it
does nothing; without one it applies the enabled patches and prints one line on stderr:

    [sgl-cpu-adapter] active: b0,b1,b2,b2a,b3,b4,b5,b6 (pid 123) disabled: none; memory figures are process RSS (b5)

Patches (ids as in the CPU-engine reference; switch any off with SGL_CPU_ADAPTER_DISABLE=b5,b6 or =all):
  b0  define torchvision::nms/qnms schemas when torchvision's C ops failed to load (CUDA wheel beside CPU torch)
  b1  torch.cpu.get_device_properties (Triton autotune configs are built at import)
  b2  CpuPlatform.get_local_torch_device -> cpu
  b2a CpuPlatform.get_attn_backend_cls_str -> torch SDPA backend
  b3  CpuPlatform.get_torch_distributed_backend_str -> gloo
  b4  drop a CPU device_id passed to torch.distributed.init_process_group
  b5  torch.cpu memory API (reset_peak_memory_stats, max_memory_*, ...): reports process RSS, not device memory
  b6  point the Triton diffusion kernels at sglang's own pure-torch fallbacks
"""

from __future__ import annotations

import importlib.abc
import os
import re
import sys
from typing import Any, Callable

PATCHES = ("b0", "b1", "b2", "b2a", "b3", "b4", "b5", "b6")
DISABLE_ENV = "SGL_CPU_ADAPTER_DISABLE"
TAG = "[sgl-cpu-adapter]"
MEMORY_NOTE = "memory figures are process RSS (b5)"
ANNOUNCEMENT = re.compile(r"\[sgl-cpu-adapter\] (?P<state>active|inactive): (?P<patches>[\w,]+) \(pid (?P<pid>\d+)\)"
                          r"(?: disabled: (?P<disabled>[\w,]+))?")
_TRITON = "sglang.jit_kernel.diffusion.triton."
_SDPA = "sglang.multimodal_gen.runtime.layers.attention.backends.sdpa.SDPABackend"


def parse_disabled(value: str | None) -> frozenset[str]:
    """Patch ids named in SGL_CPU_ADAPTER_DISABLE ("b5,b6", "all"); unknown names raise ValueError."""
    names = {part.strip().lower() for part in (value or "").split(",") if part.strip()}
    if "all" in names:
        return frozenset(PATCHES)
    unknown = sorted(names - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown CPU adapter patch id(s) {unknown}; known: {', '.join(PATCHES)} or 'all'")
    return frozenset(names)


def parse_announcement(line: str) -> dict[str, Any] | None:
    """The adapter state a log line announces, for runners recording engine.adapter; None for other lines."""
    match = ANNOUNCEMENT.search(line)
    if not match:
        return None
    split = lambda text: [] if text in (None, "none") else text.split(",")  # noqa: E731
    return {"active": match["state"] == "active", "patches": split(match["patches"]) if match["state"] == "active"
            else [], "disabled": split(match["disabled"]), "pid": int(match["pid"]),
            "memory_source": "process_rss" if "b5" in split(match["patches"]) else None}


def adapter_info(disable_value: str | None = None) -> dict[str, Any]:
    """What the adapter would patch under this switch value, and what its memory figures mean."""
    disabled = parse_disabled(os.environ.get(DISABLE_ENV) if disable_value is None else disable_value)
    enabled = [p for p in PATCHES if p not in disabled]
    return {"patches": enabled, "disabled": sorted(disabled, key=PATCHES.index), "disable_env": DISABLE_ENV,
            "memory_source": "process_rss" if "b5" in enabled else None,
            "memory_note": "torch.cpu memory API stand-in returns this process's RSS, not device memory"
            if "b5" in enabled else None}


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Rss:
    """torch.cpu memory API stand-in (b5): current and peak RSS of this process, the peak resettable like CUDA's."""
    peak = 0

    @classmethod
    def current(cls, device: Any = None) -> int:
        rss = _rss()
        cls.peak = max(cls.peak, rss)
        return rss

    @classmethod
    def max(cls, device: Any = None) -> int:
        cls.current()
        return cls.peak

    @classmethod
    def reset(cls, device: Any = None) -> None:
        cls.peak = _rss()


def _patch_torch_cpu(which: str) -> None:
    import torch
    if which == "b1":
        props = type("CpuDeviceProperties", (), {"warp_size": 32, "name": "cpu", "multi_processor_count": os.cpu_count()})
        torch.cpu.get_device_properties = lambda device=None: props()
        return
    api = {"reset_peak_memory_stats": _Rss.reset, "max_memory_reserved": _Rss.max, "max_memory_allocated": _Rss.max,
           "memory_allocated": _Rss.current, "memory_reserved": _Rss.current, "empty_cache": lambda: None,
           "manual_seed_all": torch.manual_seed, "is_bf16_supported": lambda including_emulation=True: True}
    for name, function in api.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, function)


def _patch_torchvision_ops(extension: Any) -> None:
    if extension._has_ops():
        return
    import torch
    library = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _Hooks.keep.append(library)  # the definitions live as long as the Library object


def _patch_platform(cpu_module: Any, which: str) -> None:
    import torch
    platform = cpu_module.CpuPlatform
    if which == "b2":
        platform.get_local_torch_device = classmethod(lambda cls: torch.device("cpu"))
    elif which == "b2a":
        platform.get_attn_backend_cls_str = classmethod(lambda cls, selected_backend, head_size, dtype: _SDPA)
    else:
        platform.get_torch_distributed_backend_str = lambda self: "gloo"


def _patch_init_process_group(parallel_state: Any) -> None:
    import torch.distributed as dist
    original = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device_id")
        if device is not None and getattr(device, "type", device) == "cpu":
            kwargs.pop("device_id")
        return original(*args, **kwargs)
    dist.init_process_group = init_process_group


def _patch_triton(module: Any) -> None:
    from sglang.jit_kernel.diffusion.triton import mps_fallback as native
    swaps = {"rotary": {"apply_rotary_embedding": native.apply_rotary_embedding_native},
             "norm": {"norm_infer": native.norm_infer_native, "rms_norm_fn": native.rms_norm_fn_native},
             "rmsnorm_onepass": {"triton_one_pass_rms_norm": native.triton_one_pass_rms_norm_native},
             "scale_shift": {"fuse_scale_shift_kernel": native.fuse_scale_shift_kernel_native}}
    for name, function in swaps[module.__name__.rsplit(".", 1)[1]].items():
        setattr(module, name, function)


# (module, "pre"|"post" its execution, patch id, action(module))
HOOKS: list[tuple[str, str, str, Callable[[Any], None]]] = [
    ("torchvision.extension", "post", "b0", _patch_torchvision_ops),
    (_TRITON + "norm", "pre", "b1", lambda module: _patch_torch_cpu("b1")),
    ("sglang.multimodal_gen.runtime.platforms.cpu", "post", "b2", lambda module: _patch_platform(module, "b2")),
    ("sglang.multimodal_gen.runtime.platforms.cpu", "post", "b2a", lambda module: _patch_platform(module, "b2a")),
    ("sglang.multimodal_gen.runtime.platforms.cpu", "post", "b3", lambda module: _patch_platform(module, "b3")),
    ("sglang.multimodal_gen.runtime.platforms.cpu", "post", "b5", lambda module: _patch_torch_cpu("b5")),
    ("sglang.multimodal_gen.runtime.distributed.parallel_state", "post", "b4", _patch_init_process_group),
    *[(_TRITON + name, "post", "b6", _patch_triton) for name in ("rotary", "norm", "rmsnorm_onepass", "scale_shift")],
]


class _Hooks(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loader of each hooked module to run patches around its execution."""
    keep: list[Any] = []

    def __init__(self, disabled: frozenset[str]) -> None:
        self.disabled = disabled
        self.active: bool | None = None
        self.by_module: dict[str, list[tuple[str, str, Callable[[Any], None]]]] = {}
        for module, when, patch, action in HOOKS:
            if patch not in disabled:
                self.by_module.setdefault(module, []).append((when, patch, action))

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.by_module:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader, self, name)
                return spec
        return None

    def decide(self) -> bool:
        """Once per process: patch only when torch sees no accelerator, and say so on stderr."""
        if self.active is None:
            import torch
            accelerator = getattr(torch, "accelerator", None)
            self.active = not (accelerator.is_available() if accelerator else torch.cuda.is_available())
            enabled = ",".join(p for p in PATCHES if p not in self.disabled) or "none"
            disabled = ",".join(p for p in PATCHES if p in self.disabled) or "none"
            state = f"active: {enabled} (pid {os.getpid()}) disabled: {disabled}; {MEMORY_NOTE}" if self.active \
                else f"inactive: accelerator_present (pid {os.getpid()})"
            print(f"{TAG} {state}", file=sys.stderr, flush=True)
        return self.active

    def run(self, name: str, when: str, module: Any) -> None:
        for hook_when, _patch, action in self.by_module[name]:
            if hook_when == when and self.decide():
                action(module)


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, hooks: _Hooks, name: str) -> None:
        self._loader, self._hooks, self._name = loader, hooks, name

    def __getattr__(self, attribute: str) -> Any:  # get_source, get_filename, ... for inspect/linecache users
        return getattr(self._loader, attribute)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        self._hooks.run(self._name, "pre", module)
        self._loader.exec_module(module)
        self._hooks.run(self._name, "post", module)


def install() -> None:
    """Register the hooks (idempotent); a bad switch value is reported once and disables nothing silently."""
    if any(isinstance(finder, _Hooks) for finder in sys.meta_path):
        return
    try:
        disabled = parse_disabled(os.environ.get(DISABLE_ENV))
    except ValueError as error:
        print(f"{TAG} error: {DISABLE_ENV}: {error}; adapter not installed", file=sys.stderr, flush=True)
        return
    if len(disabled) < len(PATCHES):
        sys.meta_path.insert(0, _Hooks(disabled))
