"""Run built campaigns: check the machine, record the environment, build local models, lease GPUs, and keep a valid
partial report on Ctrl-C. The CLI builds the runners (every refusal happens there, before anything heavy), calls
``run`` and renders what comes back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from ..engine import env, gpu
from . import bench_runner, request_setup
from .campaign_context import Lease, Site
from ..presets import Preset


@dataclasses.dataclass
class Outcome:
    documents: list[dict[str, Any]]
    interrupted: bool = False  # the last document is the partial report of the campaign Ctrl-C stopped


def environment_record() -> dict[str, Any]:
    """The report's environment block, without importing torch (seconds a campaign record must not cost)."""
    doc = env.inspect(import_torch=False)
    return {k: v for k, v in doc.items() if k not in ("schema", "ok", "tool", "created_at")}


def run(runners: Sequence[tuple[Preset, bench_runner.CampaignRunner]], label: str,
        build_model: Callable[[Preset], Any]) -> Outcome:
    """Each campaign in turn, GPUs leased for its duration; stops at Ctrl-C with that campaign's partial report."""
    inventory = gpu.read_inventory()
    for preset, _ in runners:
        request_setup.require_gpus(preset.name, preset.num_gpus, inventory,
                                   "run it on a GPU machine, or use tiny-flux-cpu")
    site = Site(environment_record(), use_cpu_adapter=not inventory.gpus)
    for preset, _ in runners:
        build_model(preset)  # a local model is built once, on first use
    outcome = Outcome([])
    for preset, runner in runners:
        try:
            if preset.num_gpus > 0:
                with gpu.campaign_devices(preset.num_gpus, f"{preset.name}:{label}", inventory) as (visible, uuids):
                    outcome.documents.append(runner.run(dataclasses.replace(site, lease=Lease.of(visible, uuids))))
            else:
                outcome.documents.append(runner.run(site))
        except KeyboardInterrupt:
            outcome.documents.append(runner.last_document or runner.write_report())
            outcome.interrupted = True
            break
    return outcome
