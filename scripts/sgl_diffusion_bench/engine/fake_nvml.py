"""A stand-in for the pynvml module with scripted GPUs, for self-tests and for tests of branches a machine
without NVIDIA GPUs cannot reach (busy GPUs, [N/A] fields, MIG). Same call names and error type as pynvml."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace


class NVMLError(Exception):
    pass


@dataclasses.dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H200"
    used_mib: int | None = 0  # None: NVML reports "not supported" ([N/A] in nvidia-smi)
    reserved_mib: int | None = None  # driver-reserved memory; None: the driver has no memory v2 API
    total_mib: int = 143771
    util: int | None = 0
    mig: bool | None = False  # None: the GPU does not support MIG
    pids: list[tuple[int, int | None]] = dataclasses.field(default_factory=list)


class FakeNvml:
    NVMLError = NVMLError

    def __init__(self, devices: list[FakeDevice], driver: str = "580.159.04", init_error: str | None = None):
        self.devices = devices
        self.driver = driver
        self.init_error = init_error

    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.devices[index]

    def nvmlDeviceGetUUID(self, dev):
        return dev.uuid

    def nvmlDeviceGetName(self, dev):
        return dev.name

    nvmlMemory_v2 = 0x02000028

    def nvmlDeviceGetMemoryInfo(self, dev, version=None):
        if dev.used_mib is None:
            raise NVMLError("Not Supported")
        if version is not None:
            if dev.reserved_mib is None:
                raise NVMLError("Function Not Found")
            return SimpleNamespace(used=dev.used_mib << 20, reserved=dev.reserved_mib << 20, total=dev.total_mib << 20,
                                   free=(dev.total_mib - dev.used_mib - dev.reserved_mib) << 20)
        # v1 counts the driver's reservation as used, as real NVML does.
        used = dev.used_mib + (dev.reserved_mib or 0)
        return SimpleNamespace(used=used << 20, total=dev.total_mib << 20, free=(dev.total_mib - used) << 20)

    def nvmlDeviceGetUtilizationRates(self, dev):
        if dev.util is None:
            raise NVMLError("Not Supported")
        return SimpleNamespace(gpu=dev.util, memory=0)

    def nvmlDeviceGetMigMode(self, dev):
        if dev.mig is None:
            raise NVMLError("Not Supported")
        return (int(dev.mig), int(dev.mig))

    def nvmlDeviceGetComputeRunningProcesses(self, dev):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in dev.pids]
