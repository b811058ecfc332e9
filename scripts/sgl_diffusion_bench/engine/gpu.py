"""NVIDIA GPUs through NVML (never nvidia-smi text), idle-GPU choice, and exclusive per-GPU leases.

A lease is an ``flock`` on one lock file per GPU UUID: the kernel drops it when the holder dies, so a lock left
by a dead process is free again (and reported as reclaimed). Two agents on one host never pick the same GPU.

Lock files are opened with ``O_NOFOLLOW`` (a planted symlink is refused, never truncated through) and must be regular
files. The default lock directory is per user (``$XDG_RUNTIME_DIR`` or ``/tmp/sglang-diffusion-gpu-locks-<uid>``,
created 0700 and refused if anyone else could write it). On a host where several users share GPUs, point every user
at one shared directory with ``DIFFUSION_BENCH_GPU_LOCK_DIR`` (an admin creates it once, sticky and world-writable
like /tmp: ``install -d -m 1777 /var/lock/sglang-diffusion-gpu``); there a lock file owned by another user is locked
read-only, and its record is left as it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, Iterator

from .. import bench_env, contract, owner

LOCK_DIR_ENV = bench_env.GPU_LOCK_DIR


def default_lock_dir(environ: dict[str, str] | None = None) -> Path:
    """The shared directory named by DIFFUSION_BENCH_GPU_LOCK_DIR, else a per-user one."""
    env = os.environ if environ is None else environ
    shared = bench_env.get(LOCK_DIR_ENV, env)
    if shared:
        return Path(shared)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "sglang-diffusion-gpu-locks"
    return Path(f"/tmp/sglang-diffusion-gpu-locks-{os.getuid()}")


DEFAULT_LOCK_DIR = default_lock_dir()
IDLE_MAX_MEMORY_MIB = 32
IDLE_MAX_UTILIZATION_PCT = 5
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_used_bytes: int | None  # allocated by processes; driver-reserved memory excluded where NVML can tell
    memory_reserved_bytes: int | None  # held by the driver itself (NVML memory v2); None on older drivers
    memory_total_bytes: int | None
    utilization_pct: int | None
    mig_mode: str | None  # "enabled" | "disabled" | None when the GPU does not support MIG
    processes: tuple[GpuProcess, ...]

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["processes"] = [dataclasses.asdict(p) for p in self.processes]
        return doc


@dataclasses.dataclass(frozen=True)
class Inventory:
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    reason: str | None  # why the list is empty, when it is


def _load_nvml():
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        return None
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _maybe(nvml, fn, *args):
    """One NVML field; a GPU that cannot report it ([N/A], MIG) gives None instead of an exception."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def read_inventory(nvml=None) -> Inventory:
    """Every GPU NVML sees, with memory, utilisation, MIG mode and compute processes."""
    nvml = nvml or _load_nvml()
    if nvml is None:
        return Inventory((), None, "nvidia-ml-py (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Inventory((), None, f"NVML unavailable (no NVIDIA driver on this machine?): {_text(exc)}")
    try:
        driver = _maybe(nvml, nvml.nvmlSystemGetDriverVersion)
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = _memory_info(nvml, handle)
            util = _maybe(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            mig = _maybe(nvml, nvml.nvmlDeviceGetMigMode, handle)
            procs = _maybe(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
            gpus.append(Gpu(
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                name=_text(_maybe(nvml, nvml.nvmlDeviceGetName, handle) or "unknown"),
                memory_used_bytes=int(memory.used) if memory is not None else None,
                memory_reserved_bytes=int(memory.reserved) if getattr(memory, "reserved", None) is not None else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                utilization_pct=int(util.gpu) if util is not None else None,
                mig_mode=None if mig is None else ("enabled" if mig[0] else "disabled"),
                processes=tuple(GpuProcess(int(p.pid), _process_memory(p)) for p in procs),
            ))
        reason = None if gpus else "NVML reports no GPUs"
        return Inventory(tuple(gpus), _text(driver) if driver else None, reason)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _memory_info(nvml, handle):
    """Memory v2 when the driver has it: an idle H200 shows ~620 MiB "used" in v1 that is the driver's own
    reservation, which would make every idle GPU look busy under a 32 MiB threshold."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except (nvml.NVMLError, TypeError):
            pass
    return _maybe(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)


def _process_memory(proc) -> int | None:
    used = getattr(proc, "usedGpuMemory", None)
    # NVML reports "not available" (MIG, some drivers) as None or as a huge sentinel value.
    return int(used) if isinstance(used, int) and 0 <= used < (1 << 62) else None


def is_idle(gpu: Gpu, max_memory_mib: int = IDLE_MAX_MEMORY_MIB, max_util_pct: int = IDLE_MAX_UTILIZATION_PCT) -> bool:
    """Idle: no compute process, memory and utilisation known and under the thresholds."""
    return (not gpu.processes
            and gpu.memory_used_bytes is not None and gpu.memory_used_bytes <= max_memory_mib * MIB
            and gpu.utilization_pct is not None and gpu.utilization_pct <= max_util_pct)


def idle_uuids_over_samples(samples: list[Inventory], max_memory_mib: int, max_util_pct: int) -> set[str]:
    """GPUs idle in every sample: one quiet reading is not enough to call a GPU free."""
    idle: set[str] | None = None
    for inv in samples:
        now = {g.uuid for g in inv.gpus if is_idle(g, max_memory_mib, max_util_pct)}
        idle = now if idle is None else idle & now
    return idle or set()


def sample_inventory(samples: int, interval_s: float, nvml=None) -> list[Inventory]:
    readings = []
    for i in range(max(1, samples)):
        if i:
            time.sleep(interval_s)
        readings.append(read_inventory(nvml))
    return readings


def pick_idle_gpus(count: int, *, samples: int = 3, interval_s: float = 0.2,
                   max_memory_mib: int = IDLE_MAX_MEMORY_MIB, max_util_pct: int = IDLE_MAX_UTILIZATION_PCT,
                   lock_dir: Path = DEFAULT_LOCK_DIR, nvml=None) -> list[Gpu]:
    """The first ``count`` GPUs (NVML/PCI order) idle in every sample and not leased by another process."""
    if count < 1:
        raise contract.UsageError("usage.bad_count", f"--count must be at least 1, got {count}")
    readings = sample_inventory(samples, interval_s, nvml)
    latest = readings[-1]
    if not latest.gpus:
        raise contract.PreconditionError("gpu.none", latest.reason or "no NVIDIA GPU found",
                                         "run on a machine with NVIDIA GPUs, or use a CPU preset such as tiny-flux-cpu")
    idle = idle_uuids_over_samples(readings, max_memory_mib, max_util_pct)
    free = [g for g in latest.gpus if g.uuid in idle and lease_holder(g.uuid, lock_dir) is None]
    if len(free) < count:
        busy = [{"index": g.index, "uuid": g.uuid, "processes": len(g.processes),
                 "memory_used_bytes": g.memory_used_bytes, "utilization_pct": g.utilization_pct,
                 "leased_by": lease_holder(g.uuid, lock_dir)} for g in latest.gpus if g not in free]
        raise contract.PreconditionError(
            "gpu.not_enough_idle", f"needed {count} idle GPU(s), found {len(free)} of {len(latest.gpus)}",
            "wait for the other jobs, lower --count, or raise --max-memory-mib/--max-util-pct deliberately",
            details={"busy": busy})
    return free[:count]


def _lock_path(lock_dir: Path, uuid: str) -> Path:
    return lock_dir / f"gpu-{uuid}.lock"



def lease_holder(uuid: str, lock_dir: Path = DEFAULT_LOCK_DIR) -> dict[str, Any] | None:
    """Who holds the lease on a GPU right now (its lock record), or None when nobody does."""
    try:
        fd = _open_lock(_lock_path(Path(lock_dir), uuid), create=False)
    except (OSError, contract.ToolError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(fd) or {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_record(fd: int) -> dict[str, Any] | None:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "null")
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def ensure_lock_dir(lock_dir: Path) -> Path:
    """Create the lock directory (0700) or check an existing one: a real directory, and either ours and closed to
    others, or a shared sticky one (like /tmp). Anything else is refused before any lock file is opened."""
    try:
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(lock_dir)
    except OSError as exc:
        raise contract.PreconditionError(
            "gpu.lock_dir_unusable", f"GPU lock directory {lock_dir} cannot be created: {exc.strerror}",
            f"set {LOCK_DIR_ENV} to a directory you can write (see the shared-directory note in gpu.py)") from None
    own = st.st_uid == os.getuid()
    shared = bool(st.st_mode & stat.S_ISVTX)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problem = "is a symlink or not a directory"
    elif own and st.st_mode & 0o022 and not shared:
        problem = "is writable by others but not sticky"
    elif not own and not shared:
        problem = f"belongs to uid {st.st_uid} and is not a shared sticky directory"
    elif not os.access(lock_dir, os.W_OK | os.X_OK):
        problem = "is not writable by you"
    else:
        return lock_dir
    raise contract.PreconditionError(
        "gpu.lock_dir_unsafe", f"GPU lock directory {lock_dir} {problem}",
        f"unset {LOCK_DIR_ENV} for a per-user directory, or have an admin create a shared one with "
        "'install -d -m 1777 DIR'")


def _open_lock(path: Path, *, create: bool = True) -> int:
    """An fd on the lock file: never through a symlink, only a regular file; ours read-write, another user's
    (in a shared sticky directory) read-only, which flock accepts."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    while True:
        try:
            fd = os.open(path, flags | os.O_RDWR)
        except PermissionError:
            fd = os.open(path, flags | os.O_RDONLY)
        except FileNotFoundError:
            if not create:
                raise
            try:  # O_EXCL: never adopt a file someone planted between the two opens
                fd = os.open(path, flags | os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: the lock path is a symlink
                raise contract.PreconditionError(
                    "gpu.lock_file_unsafe", f"GPU lock file {path} is a symlink; it was not opened",
                    "remove that symlink; lock files are regular files the tool creates itself") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise contract.PreconditionError("gpu.lock_file_unsafe", f"GPU lock file {path} is not a regular file",
                                             "remove it; lock files are regular files the tool creates itself")
        return fd


def _write_record(fd: int, path: Path, label: str) -> None:
    """Our holder record into our own lock file; a file of ours we cannot write (immutable, read-only filesystem) is
    a clear refusal, not a crash."""
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "label": label,
                         "since": contract.utc_now()}).encode()
    try:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            os.close(os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC))  # raises the reason
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError as exc:
        raise contract.PreconditionError(
            "gpu.lock_file_unwritable", f"GPU lock file {path} is this user's but cannot be written: "
            f"{exc.strerror or 'opened read-only'}",
            f"an immutable attribute or a read-only filesystem? 'lsattr {path}'; remove the attribute (chattr -i) or "
            f"the file, or set {LOCK_DIR_ENV} to a writable directory") from None


class GpuLease:
    """Exclusive hold of a set of GPUs for one process; use as a context manager or call release()."""

    def __init__(self, uuids: list[str], *, label: str = "", lock_dir: Path = DEFAULT_LOCK_DIR):
        self.uuids = list(uuids)
        self.label = label
        self.lock_dir = Path(lock_dir)
        self.reclaimed: list[dict[str, Any]] = []
        self._fds: list[int] = []

    def acquire(self) -> "GpuLease":
        ensure_lock_dir(self.lock_dir)
        try:
            for uuid in self.uuids:
                path = _lock_path(self.lock_dir, uuid)
                fd = _open_lock(path)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    record = _read_record(fd)
                    os.close(fd)
                    raise contract.PreconditionError(
                        "gpu.leased", f"GPU {uuid} is leased by another process: {record}",
                        "pick other GPUs (print-idle-gpus skips leased ones) or wait for that campaign") from None
                self._fds.append(fd)
                previous = _read_record(fd)
                if previous and previous.get("pid") and not owner.pid_alive(int(previous["pid"])):
                    self.reclaimed.append({"uuid": uuid, "stale_pid": previous["pid"]})
                if os.fstat(fd).st_uid == os.getuid():
                    _write_record(fd, path, self.label)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_uid == os.getuid():
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    def __enter__(self) -> "GpuLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def leased_gpus(count: int, label: str = "", lock_dir: Path = DEFAULT_LOCK_DIR, nvml=None,
                **pick_options) -> Iterator[tuple[list[Gpu], GpuLease]]:
    """Pick idle GPUs and lease them; retries once if another process leased one in between."""
    for attempt in range(2):
        gpus = pick_idle_gpus(count, lock_dir=lock_dir, nvml=nvml, **pick_options)
        lease = GpuLease([g.uuid for g in gpus], label=label, lock_dir=lock_dir)
        try:
            lease.acquire()
        except contract.PreconditionError:
            if attempt:
                raise
            continue
        try:
            yield gpus, lease
        finally:
            lease.release()
        return


def foreign_processes(gpu_uuids: list[str], own_pids: set[int], nvml=None) -> list[dict[str, Any]]:
    """Compute processes on the leased GPUs that are not ours: a benchmark cell next to one does not count."""
    inv = read_inventory(nvml)
    found = []
    for gpu in inv.gpus:
        if gpu.uuid in gpu_uuids:
            found += [{"gpu_uuid": gpu.uuid, "pid": p.pid, "used_memory_bytes": p.used_memory_bytes}
                      for p in gpu.processes if p.pid not in own_pids]
    return found


@contextlib.contextmanager
def campaign_devices(count: int, label: str, inventory: Inventory, environ: dict[str, str] | None = None,
                     lock_dir: Path = DEFAULT_LOCK_DIR, nvml=None) -> Iterator[tuple[str, list[str]]]:
    """Hold GPUs for a whole campaign: the caller's CUDA_VISIBLE_DEVICES if set (leased too), else idle ones.

    Yields the CUDA_VISIBLE_DEVICES value for the engine (NVML indices; runs set CUDA_DEVICE_ORDER=PCI_BUS_ID so
    CUDA numbers GPUs the same way) and the leased UUIDs (for the contention check)."""
    wanted = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES", "").strip()
    if not wanted:
        with leased_gpus(count, label=label, lock_dir=lock_dir, nvml=nvml) as (gpus, _lease):
            yield ",".join(str(g.index) for g in gpus), [g.uuid for g in gpus]
        return
    by_key = {**{str(g.index): g for g in inventory.gpus}, **{g.uuid: g for g in inventory.gpus}}
    keys = [k.strip() for k in wanted.split(",")]
    chosen = [by_key.get(k) for k in keys]
    named: dict[str, list[str]] = {}
    for key, gpu in zip(keys, chosen, strict=True):
        if gpu is not None:
            named.setdefault(gpu.uuid, []).append(key)
    repeated = {uuid: ks for uuid, ks in named.items() if len(ks) > 1}
    if repeated:
        raise contract.UsageError(
            "gpu.duplicate_devices", f"CUDA_VISIBLE_DEVICES={wanted} names one GPU more than once: "
            + "; ".join(f"{' and '.join(ks)} are {uuid}" for uuid, ks in repeated.items()),
            "list each GPU once (NVML indices or UUIDs)")
    if any(g is None for g in chosen) or len(chosen) < count:
        raise contract.PreconditionError(
            "gpu.visible_devices", f"CUDA_VISIBLE_DEVICES={wanted} does not name {count} GPU(s) NVML knows",
            "unset it to let the benchmark pick idle GPUs, or list NVML indices/UUIDs")
    with GpuLease([g.uuid for g in chosen], label=label, lock_dir=lock_dir):
        yield wanted, [g.uuid for g in chosen]
