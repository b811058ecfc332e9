"""Room on the GPU for both serving arms, checked before any server starts (serving/device_room.py), on the
project's fake NVML: a GPU without room for the second server beside the first is refused with the figures."""

from __future__ import annotations

import pytest

from conftest import run_main
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.engine import fake_nvml, gpu
from sgl_diffusion_bench.serving import device_room

MIB = 1 << 20


def _model(tmp_path, weights_mib: int):
    """A model folder whose weight files add up to ``weights_mib`` (sparse: the size is what counts)."""
    root = tmp_path / "tiny-FLUX.1-dev"
    (root / "transformer").mkdir(parents=True, exist_ok=True)
    with open(root / "transformer" / "model.safetensors", "wb") as f:
        f.truncate(weights_mib * MIB)
    (root / "model_index.json").write_text("{}")
    return str(root)


def _inventory(*devices: fake_nvml.FakeDevice) -> gpu.Inventory:
    return gpu.read_inventory(fake_nvml.FakeNvml(list(devices)))


def test_two_servers_that_fit_are_recorded_with_the_figures(tmp_path):
    record = device_room.check(_model(tmp_path, 200), [], _inventory(
        fake_nvml.FakeDevice("GPU-a", used_mib=100, reserved_mib=0, total_mib=1000)), {})
    assert record == {"checked": True, "gpu": 0, "uuid": "GPU-a", "free_bytes": 900 * MIB, "needed_bytes": 600 * MIB,
                      "weights_bytes": 200 * MIB, "margin": 1.5, "servers": 2}


def test_a_gpu_without_room_for_the_second_server_is_refused(tmp_path):
    inventory = _inventory(fake_nvml.FakeDevice("GPU-a", used_mib=300, reserved_mib=150, total_mib=1000))
    with pytest.raises(contract.PreconditionError) as caught:
        device_room.check(_model(tmp_path, 200), [], inventory, {})
    error = caught.value
    assert error.code == "serving.device_memory_short" and error.exit_code == contract.ExitCode.PRECONDITION
    assert error.details["free_bytes"] == 550 * MIB and error.details["needed_bytes"] == 600 * MIB  # reserved counts
    assert "0.54 GiB free" in error.message and "nothing was started" in error.message


def test_the_servers_gpu_is_the_first_one_cuda_visible_devices_names(tmp_path):
    inventory = _inventory(fake_nvml.FakeDevice("GPU-idle", used_mib=0, reserved_mib=0, total_mib=1000),
                           fake_nvml.FakeDevice("GPU-busy", used_mib=900, reserved_mib=0, total_mib=1000))
    model = _model(tmp_path, 200)
    assert device_room.check(model, [], inventory, {})["uuid"] == "GPU-idle"
    for visible in ("1", "GPU-busy", "GPU-busy,GPU-idle"):
        with pytest.raises(contract.PreconditionError, match="GPU 1 "):
            device_room.check(model, [], inventory, {"CUDA_VISIBLE_DEVICES": visible})
    with pytest.raises(contract.PreconditionError):  # tensor parallel over both: the busier one decides
        device_room.check(model, ["--num-gpus", "2"], inventory, {})


def test_what_cannot_be_checked_says_why_and_refuses_nothing(tmp_path):
    assert device_room.check(_model(tmp_path, 200), [], _inventory(), {})["checked"] is False  # CPU
    no_figures = _inventory(fake_nvml.FakeDevice("GPU-a", used_mib=None))
    assert "no memory figures" in device_room.check(_model(tmp_path, 200), [], no_figures, {})["reason"]
    hub = _inventory(fake_nvml.FakeDevice("GPU-a", used_mib=990, total_mib=1000))
    assert "no weight files" in device_room.check("black-forest-labs/FLUX.1-dev", [], hub, {})["reason"]


@pytest.mark.torch
def test_the_cli_refuses_before_any_server_starts(tmp_path, monkeypatch):
    """bench_diffusion_serving on a (fake) GPU with no memory free: error.v1, exit 3, no output folder, no server."""
    busy = fake_nvml.FakeNvml([fake_nvml.FakeDevice("GPU-a", used_mib=143771, reserved_mib=0)])
    monkeypatch.setattr(gpu, "_load_nvml", lambda: busy)
    run = run_main("bench_diffusion_serving", "--model", "tiny-flux-cpu", "--request-rate", "1", "--output-dir",
                   str(tmp_path / "run"), "--json")
    assert run.returncode == 3, run.stderr[-2000:]
    error = run.document["error"]
    assert error["code"] == "serving.device_memory_short" and error["details"]["free_bytes"] == 0
    assert not (tmp_path / "run").exists()
