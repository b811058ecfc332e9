"""Fill the CPU gaps of sglang's diffusion runtime, and only those the installed engine has, so that
`sglang generate` runs natively without a GPU.

Loaded by the sibling ``sitecustomize.py`` in every process that has this directory on PYTHONPATH (the CLI and the
spawned worker alike). It registers import hooks and turns the garbage collector off (patch gc, below); nothing is
patched, and torch is not imported, until one of the named modules is imported. The first hook to fire decides once
per process: with an accelerator present it turns the collector back on and does nothing else; without one it says
which patches it will check, and each patch then checks its gap when its module
loads (or when the engine first reaches for the missing API) and says what it did, one line each on stderr:

    [sgl-cpu-adapter] active (pid 123): checking b0,b2,b2a,b3,b4,b5; absent: b1,b6; disabled: none
    [sgl-cpu-adapter] b0 applied (pid 123): torchvision's C ops did not load; defined torchvision::nms/qnms
    [sgl-cpu-adapter] b2 not-needed (pid 123): CpuPlatform defines get_local_torch_device itself

sglang 0.5.10.post1 needs b0-b6; 0.5.23 brings its own CPU platform and needs b0 (a CUDA-built torchvision beside CPU
torch), and b7 for the Wan blocks. Patches (ids as in the CPU-engine reference; switch any off with
DIFFUSION_BENCH_CPU_ADAPTER_DISABLE=b5,b6 or =all; sglang claims every SGL_* and SGLANG_* variable as its own):
  b0  define torchvision::nms/qnms schemas when torchvision's C ops failed to load (CUDA wheel beside CPU torch)
  b1  torch.cpu.get_device_properties, when the engine asks torch.cpu for it (Triton autotune configs at import)
  b2  CpuPlatform.get_local_torch_device -> cpu, when CpuPlatform inherits the base class's NotImplementedError
  b2a CpuPlatform.get_attn_backend_cls_str -> torch SDPA backend, likewise
  b3  CpuPlatform.get_torch_distributed_backend_str -> gloo, likewise
  b4  drop a CPU device_id the engine passes to torch.distributed.init_process_group
  b5  torch.cpu memory API (reset_peak_memory_stats, max_memory_*, ...), when the engine asks torch.cpu for it:
      its figures are process RSS, not device memory
  b6  point the Triton diffusion kernels at sglang's own pure-torch fallbacks, when the engine has no CPU fallback
  b7  sgl-kernel's CPU ops (torch.ops.sgl_kernel.*_cpu) the scale-shift modulation and norm-scale-shift layers call,
      when no sgl-kernel is installed: the engine's own torch fallback / native code instead, uncompiled (Wan's blocks)
Two patches fill no gap; they save CPU time, on CPU only (a GPU forbids forking once CUDA is up):
  fork  the scheduler worker forks from the CLI (``sglang generate`` or ``sglang serve``), which has already imported
        sglang, instead of spawning a fresh interpreter that imports it again (about 40 % of an engine start's CPU
        time); the worker runs the same code.
  gc    the cyclic garbage collector stays off while sglang imports, until its entry module has loaded (about a
        quarter of the import's CPU time; _pause_gc says what it costs)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import gc
import importlib.util
import os
import sys
import threading
import time
from typing import Any, Callable

GAPS = ("b0", "b1", "b2", "b2a", "b3", "b4", "b5", "b6", "b7")
PATCHES = (*GAPS, "fork", "gc")
# Not SGL_*/SGLANG_*: sglang rewrites every SGL_* variable to SGLANG_* with a deprecation warning in each process.
DISABLE_ENV = "DIFFUSION_BENCH_CPU_ADAPTER_DISABLE"
TAG = "[sgl-cpu-adapter]"
MEMORY_NOTE = "torch.cpu memory API stand-in returns this process's RSS, not device memory"
_TRITON = "sglang.jit_kernel.diffusion.triton."
_SDPA = "sglang.multimodal_gen.runtime.layers.attention.backends.sdpa.SDPABackend"
_MEMORY_API = ("reset_peak_memory_stats", "max_memory_reserved", "max_memory_allocated", "memory_allocated",
               "memory_reserved", "empty_cache", "manual_seed_all", "is_bf16_supported")
_PLATFORM_METHODS = {"b2": "get_local_torch_device", "b2a": "get_attn_backend_cls_str",
                     "b3": "get_torch_distributed_backend_str"}


def parse_disabled(value: str | None) -> frozenset[str]:
    """Patch ids named in the switch-off variable ("b5,b6", "all"); unknown names raise ValueError."""
    names = {part.strip().lower() for part in (value or "").split(",") if part.strip()}
    if "all" in names:
        return frozenset(PATCHES)
    unknown = sorted(names - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown CPU adapter patch id(s) {unknown}; known: {', '.join(PATCHES)} or 'all'")
    return frozenset(names)


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


def _report(patch: str, outcome: str, reason: str) -> None:
    print(f"{TAG} {patch} {outcome} (pid {os.getpid()}): {reason}", file=sys.stderr, flush=True)


def _lazy_torch_cpu(hooks: "_Hooks") -> None:
    """b1/b5: answer for the attributes torch.cpu lacks only when the engine asks for one (PEP 562 ``__getattr__``),
    so a patch is applied exactly when the engine reaches its gap."""
    import torch
    cpu = torch.cpu
    if getattr(cpu, "__getattr__", None) is not None:
        return
    stand_ins: dict[str, tuple[str, Any]] = {}
    if "b1" not in hooks.disabled:
        props = type("CpuDeviceProperties", (), {"warp_size": 32, "name": "cpu",
                                                 "multi_processor_count": os.cpu_count()})
        stand_ins["get_device_properties"] = ("b1", lambda device=None: props())
    if "b5" not in hooks.disabled:
        api = {"reset_peak_memory_stats": _Rss.reset, "max_memory_reserved": _Rss.max,
               "max_memory_allocated": _Rss.max, "memory_allocated": _Rss.current, "memory_reserved": _Rss.current,
               "empty_cache": lambda: None, "manual_seed_all": torch.manual_seed,
               "is_bf16_supported": lambda including_emulation=True: True}
        stand_ins.update({name: ("b5", function) for name, function in api.items()})

    def __getattr__(name: str) -> Any:
        if name not in stand_ins:
            raise AttributeError(f"module 'torch.cpu' has no attribute '{name}'")
        patch, function = stand_ins[name]
        if patch not in hooks.applied:
            hooks.applied.add(patch)
            note = f"; {MEMORY_NOTE}" if patch == "b5" else ""
            _report(patch, "applied", f"the engine asked torch.cpu for {name}, which torch lacks{note}")
        setattr(cpu, name, function)
        return function
    cpu.__getattr__ = __getattr__


def _patch_torchvision_ops() -> None:
    import torch
    if hasattr(torch.ops.torchvision, "nms"):  # what torchvision.extension's C library registers when it loads
        _report("b0", "not-needed", "torchvision's C ops loaded")
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _Hooks.keep.append(library)  # the definitions live as long as the Library object
    _report("b0", "applied", "torchvision's C ops did not load (a CUDA build beside CPU torch); defined "
                             "torchvision::nms/qnms schemas")


def _defining_class(cls: type, name: str) -> type | None:
    return next((klass for klass in cls.__mro__ if name in vars(klass)), None)


def _patch_platform(cpu_module: Any, which: str) -> None:
    import torch
    platform, method = cpu_module.CpuPlatform, _PLATFORM_METHODS[which]
    owner = _defining_class(platform, method)
    if owner is not None and owner.__name__ != "Platform":  # CpuPlatform (or a CPU base of it) has its own
        _report(which, "not-needed", f"{owner.__name__} defines {method} itself")
        return
    if which == "b2":
        platform.get_local_torch_device = classmethod(lambda cls: torch.device("cpu"))
    elif which == "b2a":
        platform.get_attn_backend_cls_str = classmethod(lambda cls, selected_backend, head_size, dtype: _SDPA)
    else:
        platform.get_torch_distributed_backend_str = lambda self: "gloo"
    _report(which, "applied", f"CpuPlatform inherits {method} from the base Platform, which raises or returns "
                              "nothing on CPU")


def _patch_init_process_group(parallel_state: Any) -> None:
    import torch.distributed as dist
    original = dist.init_process_group
    decided: list[bool] = []

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device_id")
        if device is not None and getattr(device, "type", device) == "cpu":
            kwargs.pop("device_id")
            if not decided:
                _report("b4", "applied", "the engine passed device_id=cpu to init_process_group, which torch rejects")
            decided.append(True)
        elif not decided:
            decided.append(False)
            _report("b4", "not-needed", "the engine passed no CPU device_id to init_process_group")
        return original(*args, **kwargs)
    dist.init_process_group = init_process_group


def _patch_triton(module: Any) -> None:
    if getattr(module, "__file__", None) and os.path.exists(os.path.join(os.path.dirname(module.__file__),
                                                                          "torch_fallback.py")):
        _report("b6", "not-needed", f"{module.__name__} has the engine's own torch fallback")
        return
    from sglang.jit_kernel.diffusion.triton import mps_fallback as native
    swaps = {"rotary": {"apply_rotary_embedding": native.apply_rotary_embedding_native},
             "norm": {"norm_infer": native.norm_infer_native, "rms_norm_fn": native.rms_norm_fn_native},
             "rmsnorm_onepass": {"triton_one_pass_rms_norm": native.triton_one_pass_rms_norm_native},
             "scale_shift": {"fuse_scale_shift_kernel": native.fuse_scale_shift_kernel_native}}
    for name, function in swaps[module.__name__.rsplit(".", 1)[1]].items():
        setattr(module, name, function)
    _report("b6", "applied", f"{module.__name__} launches Triton on CPU tensors; pointed it at sglang's pure-torch "
                             "fallbacks")


def _applied_once(hooks: "_Hooks", patch: str, reason: str) -> None:
    if patch not in hooks.applied:
        hooks.applied.add(patch)
        _report(patch, "applied", reason)


def _lazy_scale_shift(hooks: "_Hooks", module: Any) -> None:
    """b7: the modulation's CPU op without sgl-kernel: the engine's torch fallback (as on MPS), from the first call."""
    cpu_impl = getattr(module, "_fuse_scale_shift_kernel_cpu", None)
    if importlib.util.find_spec("sgl_kernel") or cpu_impl is None or module.fuse_scale_shift_kernel is not cpu_impl:
        return
    from sglang.kernels.ops.diffusion.common.platform import lazy_fallback
    fallback = lazy_fallback("torch", "fuse_scale_shift_kernel_native")

    def fuse_scale_shift_kernel(*args: Any, **kwargs: Any) -> Any:
        _applied_once(hooks, "b7", "the engine called the scale-shift modulation's CPU op, which no installed "
                                   "sgl-kernel registers; it runs the engine's torch fallback")
        return fallback(*args, **kwargs)
    module.fuse_scale_shift_kernel = fuse_scale_shift_kernel


def _lazy_norm_layers(hooks: "_Hooks", module: Any) -> None:
    """b7: these layers' CPU ops without sgl-kernel: their native code, uncompiled (torch.compile would build C++)."""
    if importlib.util.find_spec("sgl_kernel"):
        return
    for name in ("_NormScaleShift", "_ScaleResidualNormScaleShift"):
        cls = getattr(module, name, None)
        if cls is None or "forward_cpu" not in vars(cls):
            continue
        native = cls.forward_native
        eager = getattr(native, "_torchdynamo_orig_callable", native)

        def forward_cpu(self: Any, *args: Any, _eager: Any = eager, _name: str = name, **kwargs: Any) -> Any:
            _applied_once(hooks, "b7", f"the engine called {_name}'s CPU path, whose op no installed sgl-kernel "
                                       "registers; it runs the layer's native torch code, uncompiled")
            return _eager(self, *args, **kwargs)
        cls.forward_cpu = forward_cpu


def _fork_workers(module: Any, hooks: "_Hooks") -> None:
    """``launch_server`` starts the scheduler workers with ``mp.get_context("spawn")``: while it runs, its ``mp``
    becomes multiprocessing with spawn read as fork, for offline generation (``sglang generate``, ``DiffGenerator``)
    and for a server (``sglang serve``) alike. The workers start before the server's HTTP side and before any
    request, so the child copies an interpreter that has imported sglang and started nothing else."""
    import multiprocessing
    import types
    launch = getattr(module, "launch_server", None)
    if launch is None or getattr(module, "mp", None) is not multiprocessing:
        _report("fork", "not-needed", "this engine does not start its workers through launch_server's multiprocessing")
        return

    def get_context(method: str | None = None) -> Any:
        return multiprocessing.get_context("fork" if method == "spawn" else method)
    forking = types.SimpleNamespace(**{**vars(multiprocessing), "get_context": get_context})

    def launch_server(server_args: Any, launch_http_server: bool = True) -> Any:
        if "fork" not in hooks.applied:
            hooks.applied.add("fork")
            _report("fork", "applied", "the scheduler worker forks from this process, which has imported sglang, "
                                       "instead of spawning an interpreter that imports it again")
        module.mp = forking  # read by the worker start when it runs: only this call forks
        try:
            return launch(server_args, launch_http_server)
        finally:
            module.mp = multiprocessing
    module.launch_server = launch_server
    # A forked worker inherits the decision; it says so itself, so each process of the run is on record.
    os.register_at_fork(after_in_child=hooks.announce)


_PLATFORMS_CPU = "sglang.multimodal_gen.runtime.platforms.cpu"
# (module, "pre"|"post" its execution, patch id, action(hooks, module))
HOOKS: list[tuple[str, str, str, Callable[[Any, Any], None]]] = [
    ("torchvision.extension", "post", "b0", lambda hooks, module: _patch_torchvision_ops()),
    (_TRITON + "norm", "pre", "b1", lambda hooks, module: _lazy_torch_cpu(hooks)),
    (_PLATFORMS_CPU, "post", "b2", lambda hooks, module: _patch_platform(module, "b2")),
    (_PLATFORMS_CPU, "post", "b2a", lambda hooks, module: _patch_platform(module, "b2a")),
    (_PLATFORMS_CPU, "post", "b3", lambda hooks, module: _patch_platform(module, "b3")),
    (_PLATFORMS_CPU, "post", "b5", lambda hooks, module: _lazy_torch_cpu(hooks)),
    ("sglang.multimodal_gen.runtime.distributed.parallel_state", "post", "b4",
     lambda hooks, module: _patch_init_process_group(module)),
    *[(_TRITON + name, "post", "b6", lambda hooks, module: _patch_triton(module))
      for name in ("rotary", "norm", "rmsnorm_onepass", "scale_shift")],
    ("sglang.kernels.ops.diffusion.modulate.scale_shift_triton", "post", "b7", _lazy_scale_shift),
    ("sglang.multimodal_gen.runtime.layers.layernorm", "post", "b7", _lazy_norm_layers),
    ("sglang.multimodal_gen.runtime.launch_server", "post", "fork", lambda hooks, module: _fork_workers(module, hooks)),
    *[(f"sglang.multimodal_gen.runtime.{name}", "post", "gc", lambda hooks, module: _resume_gc())
      for name in ("entrypoints.cli.generate", "entrypoints.cli.serve", "launch_server",
                   "managers.worker_bootstrap", "managers.gpu_worker")],  # a spawned worker's module: 0.5.23, 0.5.10
]


GC_SAFETY_S = 120.0
_gc_paused_at: list[float] = []  # when this process turned the collector off (empty: it did not, or it is on again)
_gc_lock = threading.Lock()


def _pause_gc() -> None:
    """gc: Importing the engine creates hundreds of thousands of long-lived objects (and its model registry parses
    about a hundred source files into syntax trees), and the collector keeps walking them while they pile up: about
    a quarter of the import's CPU time on a 2-core host. The collector is on again once the engine's entry module has
    loaded, with everything imported so far frozen (kept out of its walks; it lives as long as the process), or after
    GC_SAFETY_S in a process that never loads one. The cost: cyclic garbage made during the import is never freed
    (the import's peak RSS grew by 13 MB of 635 MB when measured); what is made later is collected as usual."""
    if not gc.isenabled():  # the caller's choice: left alone
        return
    gc.disable()
    _gc_paused_at.append(time.perf_counter())
    timer = threading.Timer(GC_SAFETY_S, _gc_back_on)
    timer.daemon = True
    timer.start()


def _gc_back_on() -> float | None:
    """Collector on, what exists now frozen; the seconds it was off, or None when this process had not paused it."""
    with _gc_lock:
        if not _gc_paused_at:
            return None
        paused = time.perf_counter() - _gc_paused_at.pop()
        gc.freeze()
        gc.enable()
        return paused


def _resume_gc() -> None:
    paused = _gc_back_on()
    if paused is not None:
        _report("gc", "applied", f"the garbage collector was off while sglang imported ({paused:.1f} s); on again, "
                                 "with the imported objects frozen")


def _module_file_exists(name: str) -> bool:
    """Whether a sglang/torchvision module exists, without importing anything (not even its parent packages)."""
    top, *rest = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        base = os.path.join(location, *rest)
        if os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py")):
            return True
    return False


class _Hooks(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loader of each hooked module to run patches around its execution."""
    keep: list[Any] = []

    def __init__(self, disabled: frozenset[str]) -> None:
        self.disabled = disabled
        self.active: bool | None = None
        self.applied: set[str] = set()
        self.by_module: dict[str, list[tuple[str, str, Callable[[Any, Any], None]]]] = {}
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
        """Once per process: patch only when torch sees no accelerator, and say what will be checked on stderr."""
        if self.active is None:
            import torch
            accelerator = getattr(torch, "accelerator", None)
            self.active = not (accelerator.is_available() if accelerator else torch.cuda.is_available())
            if not self.active:
                _gc_back_on()
            self.announce()
        return self.active

    def announce(self) -> None:
        if self.active:
            present = {patch for module, _, patch, _ in HOOKS if _module_file_exists(module)}
            enabled = [p for p in PATCHES if p not in self.disabled]
            checking = ",".join(p for p in enabled if p in present) or "none"
            absent = ",".join(p for p in enabled if p not in present) or "none"
            disabled = ",".join(p for p in PATCHES if p in self.disabled) or "none"
            state = f"active (pid {os.getpid()}): checking {checking}; absent: {absent}; disabled: {disabled}"
        else:
            state = f"inactive: accelerator_present (pid {os.getpid()})"
        print(f"{TAG} {state}", file=sys.stderr, flush=True)

    def run(self, name: str, when: str, module: Any) -> None:
        for hook_when, _patch, action in self.by_module[name]:
            if hook_when == when and self.decide():
                action(self, module)


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
    if "gc" not in disabled:
        _pause_gc()
