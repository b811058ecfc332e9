"""Room on the device for both serving arms: on a GPU both `sglang serve` processes hold their weights on the same
device at once, so before any server starts the free device memory (NVML) must hold the second server beside the
first. A second server that does not fit fails minutes later, mid-load, with an out-of-memory error in its log; this
says so before anything starts, with the figures.

What a server needs is estimated as a campaign's engines launched together are (engine_overlap.MARGIN_AT_LAUNCH x
the model's weights on disk): nothing has loaded yet, so nothing else is known.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import argv_tokens, contract
from ..engine import engine_overlap, gpu

SERVERS = 2  # arm A and arm B, up together for the whole run


def _devices(inventory: gpu.Inventory, environ: Mapping[str, str], count: int) -> list[gpu.Gpu]:
    """The GPUs the servers land on: the first ``count`` of CUDA_VISIBLE_DEVICES (NVML indices or UUIDs; the runs set
    CUDA_DEVICE_ORDER=PCI_BUS_ID), else the first ``count`` NVML lists."""
    wanted = [k.strip() for k in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if k.strip()]
    if not wanted:
        return list(inventory.gpus[:count])
    by_key = {**{str(g.index): g for g in inventory.gpus}, **{g.uuid: g for g in inventory.gpus}}
    return [by_key[k] for k in wanted[:count] if k in by_key]


def _free(device: gpu.Gpu) -> int | None:
    if device.memory_total_bytes is None or device.memory_used_bytes is None:
        return None
    return device.memory_total_bytes - device.memory_used_bytes - (device.memory_reserved_bytes or 0)


def check(model_path: str, server_args: Sequence[str], inventory: gpu.Inventory,
          environ: Mapping[str, str]) -> dict[str, Any]:
    """What was checked and why it fits (or why it could not be checked: no GPU, a hub model, no NVML figures);
    ``serving.device_memory_short`` when the free memory cannot hold both servers."""
    if not inventory.gpus:
        return {"checked": False, "reason": inventory.reason or "no GPU: the servers run on the CPU"}
    weights = engine_overlap.weights_on_disk(model_path)
    if weights is None:
        return {"checked": False, "reason": f"no weight files below {model_path}: the servers' size is unknown"}
    count = int(argv_tokens.last_value(server_args, "--num-gpus") or 1)
    devices = _devices(inventory, environ, count)
    free = [(d, _free(d)) for d in devices]
    if not devices or any(f is None for _, f in free):
        return {"checked": False, "reason": "NVML reports no memory figures for the servers' GPU(s)"}
    device, least = min(free, key=lambda pair: pair[1])
    need = int(weights * SERVERS * engine_overlap.MARGIN_AT_LAUNCH)
    record = {"checked": True, "gpu": device.index, "uuid": device.uuid, "free_bytes": least, "needed_bytes": need,
              "weights_bytes": weights, "margin": engine_overlap.MARGIN_AT_LAUNCH, "servers": SERVERS}
    if least < need:
        raise contract.PreconditionError(
            "serving.device_memory_short",
            f"GPU {device.index} ({device.name}) has {engine_overlap.gib(least)} free; the second server does not fit "
            f"beside the first: {SERVERS} servers need {engine_overlap.gib(need)} ({engine_overlap.MARGIN_AT_LAUNCH:g}"
            f" x {engine_overlap.gib(weights)} of weights on disk each); nothing was started",
            "free that GPU (other jobs, a leftover server), point CUDA_VISIBLE_DEVICES at a GPU with room, or serve "
            "a smaller model", details=record)
    return record
