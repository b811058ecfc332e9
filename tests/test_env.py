"""Environment discovery, NVML parsing, idle-GPU choice and leases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import HF_TOKEN_CANARY, SCRIPTS, run_main, run_script
from sgl_diffusion_bench import contract, work_dirs
from sgl_diffusion_bench.engine import env, gpu
from sgl_diffusion_bench.engine.fake_nvml import FakeDevice, FakeNvml


class ScriptedNvml(FakeNvml):
    """A fake whose devices change between readings, to test sampling more than once."""

    def __init__(self, readings):
        super().__init__(readings[0])
        self.readings = list(readings)

    def nvmlInit(self):
        self.devices = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_na_fields_mig_and_processes_are_read_without_crashing():
    fake = FakeNvml([FakeDevice("GPU-0", used_mib=None, util=None, mig=None),
                     FakeDevice("GPU-1", used_mib=0, util=0, mig=True, pids=[(77, None)]),
                     FakeDevice("GPU-2", used_mib=10, util=3, pids=[(88, 1 << 62)])])
    inv = gpu.read_inventory(fake)
    assert [g.memory_used_bytes for g in inv.gpus] == [None, 0, 10 << 20]
    assert [g.mig_mode for g in inv.gpus] == [None, "enabled", "disabled"]
    assert inv.gpus[1].processes == (gpu.GpuProcess(77, None),)
    assert inv.gpus[2].processes == (gpu.GpuProcess(88, None),)  # NVML's "not available" sentinel
    # Unknown memory/utilisation is never called idle; neither is a GPU with a process.
    assert [gpu.is_idle(g) for g in inv.gpus] == [False, False, False]


def test_nvml_init_failure_is_an_empty_list_with_a_reason():
    inv = gpu.read_inventory(FakeNvml([], init_error="Driver Not Loaded"))
    assert inv.gpus == () and "Driver Not Loaded" in inv.reason


def test_idle_choice_requires_idle_in_every_sample(tmp_path):
    quiet = [FakeDevice("GPU-a"), FakeDevice("GPU-b"), FakeDevice("GPU-c", used_mib=900)]
    flicker = [FakeDevice("GPU-a"), FakeDevice("GPU-b", util=60), FakeDevice("GPU-c", used_mib=900)]
    fake = ScriptedNvml([quiet, flicker, quiet])
    picked = gpu.pick_idle_gpus(1, samples=3, interval_s=0, lock_dir=tmp_path, nvml=fake)
    assert [g.uuid for g in picked] == ["GPU-a"]
    with pytest.raises(contract.PreconditionError) as info:
        gpu.pick_idle_gpus(2, samples=3, interval_s=0, lock_dir=tmp_path, nvml=ScriptedNvml([quiet, flicker, quiet]))
    assert info.value.code == "gpu.not_enough_idle"
    assert {b["uuid"] for b in info.value.details["busy"]} == {"GPU-b", "GPU-c"}


def test_thresholds_are_flags():
    busyish = FakeDevice("GPU-a", used_mib=100, util=20)
    assert not gpu.is_idle(gpu.read_inventory(FakeNvml([busyish])).gpus[0])
    assert gpu.is_idle(gpu.read_inventory(FakeNvml([busyish])).gpus[0], max_memory_mib=128, max_util_pct=25)


HOLDER = """
import sys, time
sys.path.insert(0, {scripts!r})
from pathlib import Path
from sgl_diffusion_bench.engine import gpu
lease = gpu.GpuLease(["GPU-a"], label="other-agent", lock_dir=Path({lock_dir!r})).acquire()
print("held", flush=True)
time.sleep(60)
"""


def _start_holder(lock_dir):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(scripts=str(SCRIPTS), lock_dir=str(lock_dir))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_leased_gpu_is_skipped_and_a_dead_holder_is_reclaimed(tmp_path):
    fake = FakeNvml([FakeDevice("GPU-a"), FakeDevice("GPU-b")])
    holder = _start_holder(tmp_path)
    try:
        record = gpu.lease_holder("GPU-a", tmp_path)
        assert record["pid"] == holder.pid and record["label"] == "other-agent"
        picked = gpu.pick_idle_gpus(2 - 1, samples=1, lock_dir=tmp_path, nvml=fake)
        assert [g.uuid for g in picked] == ["GPU-b"]
        with pytest.raises(contract.PreconditionError) as info:
            gpu.GpuLease(["GPU-a"], lock_dir=tmp_path).acquire()
        assert info.value.code == "gpu.leased"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert gpu.lease_holder("GPU-a", tmp_path) is None  # the kernel dropped the dead holder's flock
    with gpu.GpuLease(["GPU-a"], lock_dir=tmp_path) as lease:
        assert lease.reclaimed == [{"uuid": "GPU-a", "stale_pid": holder.pid}]
        assert gpu.lease_holder("GPU-a", tmp_path)["pid"] == os.getpid()  # a second open file is locked out too
    assert gpu.lease_holder("GPU-a", tmp_path) is None


def test_leased_gpus_context_and_foreign_processes(tmp_path):
    fake = FakeNvml([FakeDevice("GPU-a"), FakeDevice("GPU-b", used_mib=2048, pids=[(4242, 2 << 30)])])
    with gpu.leased_gpus(1, label="t", lock_dir=tmp_path, nvml=fake, samples=1) as (gpus, lease):
        assert [g.uuid for g in gpus] == ["GPU-a"]
        fake.devices[0].pids = [(999, 1 << 30), (1000, None)]
        found = gpu.foreign_processes(["GPU-a"], own_pids={1000}, nvml=fake)
        assert found == [{"gpu_uuid": "GPU-a", "pid": 999, "used_memory_bytes": 1 << 30}]


def test_problems_name_next_steps_for_gpu_states():
    fake = FakeNvml([FakeDevice("GPU-a", used_mib=5000, pids=[(1, 5 << 30)], mig=True),
                     FakeDevice("GPU-b", util=99)])
    doc = env.inspect(nvml=fake)
    assert contract.validation_errors(doc) == []
    codes = {p["code"] for p in doc["problems"]}
    assert {"gpu.no_idle", "gpu.mig_enabled", "gpu.device_order"} <= codes
    assert all(p["hint"] for p in doc["problems"])


def _inspect_exit_matches(run) -> bool:
    """inspect exits 3 exactly when a problem has severity error (an engine missing in the check lane, say)."""
    errors = [p for p in run.document["problems"] if p["severity"] == "error"]
    return run.document["ok"] is (not errors) and run.returncode == (3 if errors else 0)


# The token and text tests skip the engine's import check (a child importing sglang, 20-40 s on 2 cores): what they
# check is decided before it. The check itself runs once, in test_inspect_checks_that_the_engine_imports.
def test_inspect_cli_validates_and_reports_token_presence_only():
    run = run_main("diffusion_skill_env", "inspect", "--no-engine-check", "--json")
    assert _inspect_exit_matches(run)
    doc = run.document
    assert doc["huggingface"]["token_present"] is True
    assert doc["huggingface"]["token_vars_set"] == ["HF_TOKEN"]
    assert HF_TOKEN_CANARY[:8] not in run.stdout  # not even a prefix
    assert doc["versions"]["python"] == sys.version.split()[0]


def test_inspect_accepts_every_token_variable_huggingface_hub_reads():
    """Issue 24: HUGGING_FACE_HUB_TOKEN set made inspect --json exit 70 (the schema lacked the name)."""
    import os

    run = run_main("diffusion_skill_env", "inspect", "--no-engine-check", "--json",
                     env={**os.environ, "HUGGING_FACE_HUB_TOKEN": HF_TOKEN_CANARY})
    assert _inspect_exit_matches(run) and "HUGGING_FACE_HUB_TOKEN" in run.document["huggingface"]["token_vars_set"]
    assert HF_TOKEN_CANARY[:8] not in run.stdout + run.stderr


@pytest.mark.engine
def test_inspect_checks_that_the_engine_imports():
    """The full inspect: the engine's generate entry point imported in a child, its result in sglang.engine_check."""
    run = run_script("diffusion_skill_env", "inspect", "--json")
    assert _inspect_exit_matches(run), run.stderr
    doc = run.document
    if not doc["sglang"]["installed"]:
        pytest.skip("no sglang in this interpreter")
    check = doc["sglang"]["engine_check"]
    assert check["python"] == sys.executable and check["import_check"]["ok"] is True, check
    assert "sglang.import_failed" not in {p["code"] for p in doc["problems"]}
    assert HF_TOKEN_CANARY[:8] not in run.stdout + run.stderr


@pytest.mark.parametrize("args", [
    ["print-root", "--json"], ["print-assets-dir", "--json"], ["print-output-dir", "--kind", "benchmarks", "--json"],
    ["check-write-access", "--json"], ["inspect", "--no-engine-check"], ["print-root"],
])
def test_every_subcommand_runs_without_leaking_the_token(args, tmp_path):
    run = run_main("diffusion_skill_env", *args, env={work_dirs.WORKDIR_ENV: str(tmp_path)})
    assert run.returncode == (3 if args[0] == "inspect" and "not ready" in run.stdout + run.stderr else 0), run.stderr
    if "--json" in args and args[0] != "check-write-access":
        assert run.document["path"].startswith(str(tmp_path))


def test_print_root_plain_is_one_path_for_shell_substitution(tmp_path):
    run = run_main("diffusion_skill_env", "print-output-dir", "--kind", "profiles", "--mkdir",
                     env={work_dirs.WORKDIR_ENV: str(tmp_path)})
    assert run.stdout.strip() == str(tmp_path / "outputs" / "diffusion_profiles")
    assert (tmp_path / "outputs" / "diffusion_profiles").is_dir()


def test_unwritable_work_root_is_a_precondition_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = run_main("diffusion_skill_env", "check-write-access", "--json", env={work_dirs.WORKDIR_ENV: str(blocker)})
    assert run.returncode == 3 and run.document["error"]["code"] == "fs.not_writable"


def test_no_gpu_machine_gives_error_documents_not_tracebacks():
    if gpu.read_inventory().gpus:
        pytest.skip("this machine has GPUs")
    run = run_main("diffusion_skill_env", "print-idle-gpus", "--count", "1", "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "gpu.none"
    run = run_main("diffusion_skill_env", "lease", "--count", "1", "--json", "--", "true")
    assert run.returncode == 3
    run = run_main("diffusion_skill_env", "lease", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.no_command"


@pytest.mark.gpu
def test_real_nvml_inventory_on_a_gpu_machine(tmp_path):
    inv = gpu.read_inventory()
    if not inv.gpus:
        pytest.skip(inv.reason)
    assert all(g.memory_total_bytes and g.memory_total_bytes > 0 for g in inv.gpus)
    assert all(g.uuid.startswith(("GPU-", "MIG-")) for g in inv.gpus)
    run = run_main("diffusion_skill_env", "inspect", "--json")
    assert len(run.document["gpus"]) == len(inv.gpus) and run.document["versions"]["driver"]
    run = run_main("diffusion_skill_env", "lease", "--count", "1", "--lock-dir", str(tmp_path), "--json", "--",
                     sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    assert run.returncode == 0 and run.document["uuids"][0].startswith("GPU-")


def test_driver_reserved_memory_does_not_make_an_idle_gpu_busy():
    # Seen on a lent H200: 618 MiB "used" in NVML's v1 memory info with no process at all.
    h200_idle = FakeDevice("GPU-a", used_mib=0, reserved_mib=618)
    g = gpu.read_inventory(FakeNvml([h200_idle])).gpus[0]
    assert (g.memory_used_bytes, g.memory_reserved_bytes) == (0, 618 << 20) and gpu.is_idle(g)
    old_driver = FakeDevice("GPU-b", used_mib=10, reserved_mib=None)
    g = gpu.read_inventory(FakeNvml([old_driver])).gpus[0]
    assert g.memory_reserved_bytes is None and g.memory_used_bytes == 10 << 20 and gpu.is_idle(g)


def test_recorded_h200_inspect_document_still_validates():
    """`inspect --json` as printed on a lent H200 (NVML memory v2: 3.25 MiB used, 615 MiB driver-reserved)."""
    from conftest import TEST_FIXTURES

    doc = json.loads((TEST_FIXTURES / "env" / "h200-inspect.json").read_text())
    assert contract.validation_errors(doc) == []
    h200 = doc["gpus"][0]
    assert h200["name"] == "NVIDIA H200" and h200["memory_reserved_bytes"] > 600 << 20
    assert gpu.is_idle(env._as_gpu(h200))
    assert "gpu.no_idle" not in {p["code"] for p in doc["problems"]}


def test_campaign_devices_lease_idle_gpus_or_the_callers_choice(tmp_path):
    fake = FakeNvml([FakeDevice("GPU-a", used_mib=900), FakeDevice("GPU-b"), FakeDevice("GPU-c")])
    inventory = gpu.read_inventory(fake)
    with gpu.campaign_devices(2, "t", inventory, environ={}, lock_dir=tmp_path, nvml=fake) as (visible, uuids):
        assert (visible, uuids) == ("1,2", ["GPU-b", "GPU-c"])
        assert gpu.lease_holder("GPU-b", tmp_path)["label"] == "t"
    assert gpu.lease_holder("GPU-b", tmp_path) is None  # released with the campaign
    with gpu.campaign_devices(1, "t", inventory, environ={"CUDA_VISIBLE_DEVICES": "0"}, lock_dir=tmp_path) as chosen:
        assert chosen == ("0", ["GPU-a"])  # the caller's choice wins, busy or not, and is leased too
        assert gpu.lease_holder("GPU-a", tmp_path) is not None
    with pytest.raises(contract.PreconditionError) as info:
        with gpu.campaign_devices(1, "t", inventory, environ={"CUDA_VISIBLE_DEVICES": "7"}, lock_dir=tmp_path):
            pass
    assert info.value.code == "gpu.visible_devices"


def test_dist_version_matches_the_installed_metadata_and_is_none_when_absent():
    import importlib.metadata

    assert work_dirs.dist_version("jsonschema") == importlib.metadata.version("jsonschema")
    assert work_dirs.dist_version("no-such-distribution-here") is None
    assert work_dirs.sglang_location() is not work_dirs.sglang_location()  # callers get copies of the one lookup


def test_inspect_is_not_ok_when_a_problem_is_an_error(tmp_path):
    """Issue 26: inspect said ok: true while listing a problem of severity error. An engine interpreter without
    sglang (a bare venv) is one: sglang.missing."""
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    run = run_main("diffusion_skill_env", "inspect", "--engine-python", str(tmp_path / "bare" / "bin" / "python"),
                     "--no-engine-check", "--json", env={work_dirs.WORKDIR_ENV: str(tmp_path / "work")})
    errors = [p["code"] for p in run.document["problems"] if p["severity"] == "error"]
    assert "sglang.missing" in errors
    assert run.document["ok"] is False and run.returncode == 3
    human = run_main("diffusion_skill_env", "inspect", "--engine-python", str(tmp_path / "bare" / "bin" / "python"),
                       "--no-engine-check", env={work_dirs.WORKDIR_ENV: str(tmp_path / "work")})
    assert human.returncode == 3 and "not ready" in human.stdout + human.stderr


def test_a_lock_file_of_ours_that_cannot_be_written_is_a_clear_refusal(tmp_path):
    """An immutable lock file (chattr +i, or read-only to a non-root user) is exit 3 naming the path and why."""
    with gpu.GpuLease(["GPU-a"], lock_dir=tmp_path):
        pass  # creates the lock file, ours
    lock = tmp_path / "gpu-GPU-a.lock"
    if os.getuid() == 0:
        if subprocess.run(["chattr", "+i", str(lock)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available on this filesystem")
    else:
        lock.chmod(0o444)
    try:
        with pytest.raises(contract.PreconditionError) as info:
            gpu.GpuLease(["GPU-a"], lock_dir=tmp_path).acquire()
    finally:
        if os.getuid() == 0:
            subprocess.run(["chattr", "-i", str(lock)], check=True)
    assert info.value.code == "gpu.lock_file_unwritable" and info.value.exit_code == contract.ExitCode.PRECONDITION
    assert str(lock) in info.value.message and "cannot be written: " in info.value.message
    assert gpu.lease_holder("GPU-a", tmp_path) is None  # nothing left held


@pytest.mark.parametrize("visible, named", [("0,0", "0 and 0 are GPU-a"), ("1,GPU-b", "1 and GPU-b are GPU-b")])
def test_a_gpu_named_twice_in_cuda_visible_devices_is_a_usage_error(tmp_path, visible, named):
    inventory = gpu.read_inventory(FakeNvml([FakeDevice("GPU-a"), FakeDevice("GPU-b")]))
    with pytest.raises(contract.UsageError) as info:
        with gpu.campaign_devices(1, "t", inventory, environ={"CUDA_VISIBLE_DEVICES": visible}, lock_dir=tmp_path):
            pass
    assert info.value.code == "gpu.duplicate_devices" and named in info.value.message
    assert "another process" not in info.value.message and not list(tmp_path.glob("*.lock"))
