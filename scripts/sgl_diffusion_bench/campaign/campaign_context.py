"""What one campaign is, built before anything runs: the preset, its plan, the settings, the engine's capabilities,
the caller's environment and where it runs (the environment record, the CPU adapter, the GPU lease). Frozen: every
module of a campaign (the runner, warm engines, the report's records) reads the same typed context instead of
reaching into the runner.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import contract, model_cache
from ..engine import engine_process
from . import design, request_setup, sequential
from ..judging import log_markers
from ..engine.capabilities import EngineCapabilities
from ..presets import Preset

DEFAULT_CELL_TIMEOUT_S = 3600.0
REPORT_SUFFIX = ".bench-report.json"


@dataclasses.dataclass(frozen=True)
class CampaignSettings:
    label: str
    output_root: Path
    threshold_pct: float = 1.5
    primary_metric: str = "e2e_ms"
    discard_outliers: bool = False
    warmup: bool = True
    warmup_mode: str | None = None
    warmup_steps: int | None = None
    component_residency: tuple[str, ...] = ()
    performance_mode: str | None = None
    torch_compile: bool = False
    bcg_text_buckets: tuple[int, ...] = ()
    extra_args: tuple[str, ...] = ()
    cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S
    model_cache_root: Path | None = None
    seed_caches: tuple[Path, ...] = ()
    cleanup_model_cache: bool = False
    cleanup_ledger: Path | None = None
    write_report: bool = False
    echo_engine: bool = False
    engine_mode: str | None = None  # cold: a process per cell; warm: resident engines; None: engine_mode's default
    warmup_requests: int = 1  # warm mode: uncounted requests each engine serves before its measured ones
    warm_schedule: str = "auto"  # warm mode with several engines: auto | interleaved | alternating_blocks
    engine_overlap: str = "auto"  # warm mode: load the next engine beside the first's warm-up (engine_overlap.py)
    stopping: sequential.StoppingRule | None = None  # --until-verdict: rounds run until the change is known
    time_budget_s: float | None = None  # --until-verdict: no further round once this many seconds have passed
    request: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # model_path, overrides, extra_args asked for

    @property
    def ledger_path(self) -> Path:
        """Where model-cache cleanups are ledgered: the caller's ledger, else beside the reports."""
        return self.cleanup_ledger or self.output_root / "cleanup.jsonl"


def port_args_for(engine: EngineCapabilities) -> list[str]:
    """Fresh free ports where the engine takes them: its defaults collide between concurrent runs."""
    args = engine_process.port_args()
    return args if all(engine.accepts_flag(f) for f in args[::2]) else []


@dataclasses.dataclass(frozen=True)
class Lease:
    """The GPUs a campaign holds while it runs (none on CPU or in a plan) and how contention on them is checked."""

    cuda_visible_devices: str | None = None
    uuids: tuple[str, ...] = ()
    foreign_check: Callable[[], list[dict[str, Any]]] | None = None

    @classmethod
    def of(cls, visible: str, uuids: list[str]) -> Lease:
        """The lease ``gpu.campaign_devices`` granted, with its contention check."""
        from ..engine import gpu

        return cls(visible, tuple(uuids), lambda: gpu.foreign_processes(uuids, own_pids=set()))

    @property
    def on_gpu(self) -> bool:
        return self.cuda_visible_devices is not None

    def foreign_now(self, own_pids: set[int]) -> list[dict[str, Any]]:
        """Processes on the leased GPUs that are neither earlier neighbours we ignore nor our own engines."""
        if self.foreign_check is None:
            return []
        return [p for p in self.foreign_check() if p["pid"] not in own_pids]

    def gpu_processes(self) -> list[dict[str, Any]]:
        """Every compute process on the leased GPUs, ours included (a warm engine's footprint)."""
        from ..engine import gpu

        return gpu.foreign_processes(list(self.uuids), own_pids=set()) if self.uuids else []

    def gpu_memory_used(self) -> dict[str, int]:
        """Used memory per leased GPU (uuid -> bytes), where NVML can tell."""
        from ..engine import gpu

        return {g.uuid: g.memory_used_bytes for g in gpu.read_inventory().gpus
                if g.uuid in self.uuids and g.memory_used_bytes is not None}

    def gpu_free_bytes(self) -> int | None:
        """The least free memory over the leased GPUs, None where NVML cannot tell."""
        from ..engine import gpu

        free = [g.memory_total_bytes - g.memory_used_bytes for g in gpu.read_inventory().gpus
                if g.uuid in self.uuids and g.memory_total_bytes is not None and g.memory_used_bytes is not None]
        return min(free) if free else None

    def to_json(self) -> dict[str, Any]:
        return {"cuda_visible_devices": self.cuda_visible_devices, "leased_uuids": list(self.uuids),
                "contention_checked": self.foreign_check is not None}


@dataclasses.dataclass(frozen=True)
class Site:
    """Where a campaign runs, known once the machine is checked: the report's environment block, whether the CPU
    adapter goes into every engine (no GPU), and the GPU lease."""

    environment: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    use_cpu_adapter: bool = False
    lease: Lease = Lease()


@dataclasses.dataclass(frozen=True)
class CampaignContext:
    preset: Preset
    plan: design.Campaign
    settings: CampaignSettings
    engine: EngineCapabilities
    caller_env: Mapping[str, str]
    model_path: str | None
    adapter_switches_off: frozenset[str]
    site: Site = Site()

    @classmethod
    def build(cls, preset: Preset, plan: design.Campaign, settings: CampaignSettings,
              engine: EngineCapabilities, *, model_path: str | None, caller_env: Mapping[str, str] | None = None,
              site: Site = Site()) -> CampaignContext:
        """The context, or a UsageError for what cannot run at all (before any GPU is held)."""
        if settings.stopping is not None and (plan.baseline_arm is None or plan.mode == "matrix"):
            raise contract.UsageError("usage.until_verdict_needs_ab", f"--until-verdict needs one A/B/B/A "
                                      f"comparison; --campaign {plan.mode} has none or several",
                                      "use --campaign abba, aa or ab")
        env = types.MappingProxyType(dict(os.environ if caller_env is None else caller_env))
        return cls(preset, plan, settings, engine, env, model_path, request_setup.adapter_switches_off(env), site)

    def at(self, site: Site) -> CampaignContext:
        """This campaign where it runs."""
        return dataclasses.replace(self, site=site)

    @property
    def lease(self) -> Lease:
        return self.site.lease

    @functools.cached_property
    def markers(self) -> log_markers.MarkerSet:
        return log_markers.markers_for_version(self.engine.version)

    @functools.cached_property
    def cli_prefix(self) -> tuple[str, ...]:
        return (*engine_process.sglang_cli(self.engine.python), "generate")

    @property
    def engine_python(self) -> str:
        """The engine's interpreter (the warm driver runs under it)."""
        return self.engine.python or sys.executable

    @property
    def report_path(self) -> Path:
        return self.settings.output_root / f"{self.preset.name}__{self.settings.label}{REPORT_SUFFIX}"

    def engine_env(self, prepared: model_cache.PreparedCache | None) -> request_setup.EngineEnv:
        """What every engine of this campaign gets: the caller's environment, the isolated cache, the leased GPUs
        and, without a GPU, the CPU adapter (request_setup builds each one's environment from it)."""
        return request_setup.EngineEnv(self.caller_env, self.site.use_cpu_adapter, self.adapter_switches_off,
                                       self.lease.cuda_visible_devices,
                                       prepared.env if prepared is not None else request_setup.NO_MAPPING)
