"""One request set-up: what every orchestrator does between "the command is built" and "the engine starts".

The no-GPU refusal, the run directory with the preset's config file, the child environment (the invocation's own
changes, an isolated model cache, the leased GPUs, the CPU adapter where there is no GPU, with the patches the caller
switched off) and the log gate from its one factory (``engine_args.log_gate``). The cold cell, a warm engine's start,
the profiled run, the BCG replay and the serving A/B all go through here, so a change to any of these is made once.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any, Mapping

from .. import contract
from ..engine import engine_process
from ..judging import engine_args, log_gates, log_markers
from ..engine.command_builder import Invocation
from ..engine.inside.cpu_adapter import sgl_cpu_adapter

NO_MAPPING: Mapping[str, str] = types.MappingProxyType({})


def adapter_switches_off(caller_env: Mapping[str, str]) -> frozenset[str]:
    """The CPU adapter patches the caller switched off (its DISABLE_ENV variable), checked before anything runs."""
    try:
        return sgl_cpu_adapter.parse_disabled(caller_env.get(sgl_cpu_adapter.DISABLE_ENV))
    except ValueError as exc:
        raise contract.UsageError("usage.bad_adapter_switch", str(exc),
                                  f"set {sgl_cpu_adapter.DISABLE_ENV} to patch ids such as b5,b6") from exc


def require_gpus(name: str, num_gpus: int, inventory: Any, hint: str) -> None:
    """The no-GPU refusal, before anything starts: ``name`` needs ``num_gpus`` and the machine shows none."""
    if num_gpus > 0 and not inventory.gpus:
        raise contract.PreconditionError("gpu.none", f"preset {name!r} needs {num_gpus} GPU(s); {inventory.reason}",
                                         hint)


@dataclasses.dataclass(frozen=True)
class EngineEnv:
    """What every engine process of one run gets on top of its invocation's own environment changes."""

    caller_env: Mapping[str, str]
    use_cpu_adapter: bool = False
    switches_off: frozenset[str] = frozenset()
    cuda_visible_devices: str | None = None
    # the isolated model cache's variables, when the run has one
    cache_env: Mapping[str, str] = dataclasses.field(default_factory=lambda: NO_MAPPING)

    @classmethod
    def of(cls, caller_env: Mapping[str, str], *, use_cpu_adapter: bool, cuda_visible_devices: str | None = None,
           cache_env: Mapping[str, str] = NO_MAPPING) -> EngineEnv:
        """The caller's environment as given (copied), its adapter switches checked now (a usage error)."""
        copied = types.MappingProxyType(dict(caller_env))
        return cls(copied, use_cpu_adapter, adapter_switches_off(copied), cuda_visible_devices,
                   types.MappingProxyType(dict(cache_env)))

    def child_env(self, invocation: Invocation | None = None,
                  extra: Mapping[str, str] = NO_MAPPING) -> dict[str, str]:
        """One engine's environment: the caller's, the invocation's changes, the isolated cache, ``extra`` (e.g.
        the profiler's directories), the leased GPUs and, without a GPU, the CPU adapter."""
        child = invocation.child_env(self.caller_env) if invocation is not None else dict(self.caller_env)
        child.update(self.cache_env)
        child.update(extra)
        if self.cuda_visible_devices is not None:
            child["CUDA_VISIBLE_DEVICES"] = self.cuda_visible_devices
        if self.use_cpu_adapter:
            child = engine_process.cpu_adapter_env(child, self.switches_off)
        return child


def write_config(invocation: Invocation, directory: Path | None = None) -> Path | None:
    """The preset's config file written where this run's engine reads it (its run directory, or ``directory`` for
    an engine or a warm-up request of its own); None when the preset has none."""
    if invocation.config_path is None:
        return None
    path = invocation.config_path if directory is None else directory / invocation.config_path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(invocation.config_content or "", encoding="utf-8")
    return path


def config_argv(argv: tuple[str, ...] | list[str], invocation: Invocation, config: Path | None) -> list[str]:
    """``argv`` naming ``config`` where it named the invocation's own config file."""
    if config is None or invocation.config_path is None:
        return list(argv)
    return [f"--config={config}" if t == f"--config={invocation.config_path}" else t for t in argv]


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    run_dir: Path
    argv: tuple[str, ...]  # the invocation's argv, naming the config file where it was written
    env: Mapping[str, str]
    gate: log_gates.RequestLogGate


def prepare(invocation: Invocation, engine_env: EngineEnv, markers: log_markers.MarkerSet, *,
            run_dir: Path | None = None, extra_env: Mapping[str, str] = NO_MAPPING,
            profiling: bool = False) -> PreparedRequest:
    """The run directory created (never reused), the config file written into it, the child environment and the
    gate at the level the request runs at. ``run_dir`` defaults to the invocation's own; an engine of several
    requests gets a directory (and config copy) of its own."""
    directory = run_dir or invocation.run_dir
    directory.mkdir(parents=True, exist_ok=False)
    config = write_config(invocation, None if run_dir is None else directory)
    gate = engine_args.log_gate(markers, invocation.argv, quality=invocation.quality_level, profiling=profiling)
    return PreparedRequest(directory, tuple(config_argv(invocation.argv, invocation, config)),
                           types.MappingProxyType(engine_env.child_env(invocation, extra_env)), gate)
