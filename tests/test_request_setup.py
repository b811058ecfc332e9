"""The one request set-up every orchestrator uses: the no-GPU refusal, the run directory and config file, the child
environment and the gate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import capabilities, command_builder, engine_process, gpu
from sgl_diffusion_bench.campaign import request_setup
from sgl_diffusion_bench.judging import log_markers
from sgl_diffusion_bench.engine.inside.cpu_adapter import sgl_cpu_adapter

RECENT = capabilities.recent_engine_capabilities()
MARKERS = log_markers.markers_for_version(RECENT.version)


def _invocation(tmp_path: Path, **options) -> command_builder.Invocation:
    preset = dataclasses.replace(presets.get_preset("tiny-flux-cpu"), config_overrides={"guidance_scale": 3.5})
    return command_builder.build_invocation(
        preset, command_builder.RunOptions(label="setup", **options), RECENT, sglang_cli=["sglang", "generate"],
        output_root=tmp_path, assets_dir=tmp_path, caller_env={}, model_path=str(tmp_path / "model"))


def test_the_no_gpu_refusal_names_the_preset_and_the_hint():
    none = gpu.Inventory(gpus=(), driver_version=None, reason="NVML Shared Library Not Found")
    with pytest.raises(contract.PreconditionError) as info:
        request_setup.require_gpus("flux-1gpu", 1, none, "run it on a GPU machine")
    assert info.value.code == "gpu.none" and "flux-1gpu" in info.value.message and "NVML" in info.value.message
    assert info.value.hint == "run it on a GPU machine"
    request_setup.require_gpus("tiny-flux-cpu", 0, none, "unused")  # a CPU preset needs none


def test_a_typo_in_the_adapter_switch_is_a_usage_error():
    with pytest.raises(contract.UsageError) as info:
        request_setup.EngineEnv.of({sgl_cpu_adapter.DISABLE_ENV: "b5,zz"}, use_cpu_adapter=True)
    assert info.value.code == "usage.bad_adapter_switch"


def test_the_child_environment_layers_invocation_cache_lease_and_adapter(tmp_path):
    invocation = _invocation(tmp_path)
    caller = {"PATH": "/bin", sgl_cpu_adapter.DISABLE_ENV: "b5", **{n: "x" for n in invocation.env_unset}}
    on_cpu = request_setup.EngineEnv.of(caller, use_cpu_adapter=True, cache_env={"HF_HOME": "/iso"})
    child = on_cpu.child_env(invocation, {"PROFILE_DIR": "/t"})
    assert child["PYTHONPATH"].split(":")[0] == str(engine_process.ADAPTER_DIR) and child["HF_HUB_OFFLINE"] == "1"
    assert child[sgl_cpu_adapter.DISABLE_ENV] == "b5" and child["HF_HOME"] == "/iso" and child["PROFILE_DIR"] == "/t"
    assert all(child.get(k) == v for k, v in invocation.env_set.items() if k != "PYTHONPATH")
    assert not set(invocation.env_unset) & set(child)
    on_gpu = request_setup.EngineEnv.of(caller, use_cpu_adapter=False, cuda_visible_devices="2")
    child = on_gpu.child_env(invocation)
    assert child["CUDA_VISIBLE_DEVICES"] == "2" and str(engine_process.ADAPTER_DIR) not in child.get("PYTHONPATH", "")
    caller["PATH"] = "/changed"  # the caller's environment was copied when the set-up was made
    assert on_gpu.child_env()["PATH"] == "/bin"


def test_prepare_makes_the_run_dir_writes_the_config_and_gates_at_the_level_run(tmp_path):
    invocation = _invocation(tmp_path, quality="lossless")
    env = request_setup.EngineEnv.of({}, use_cpu_adapter=False)
    prepared = request_setup.prepare(invocation, env, MARKERS, profiling=True)
    assert prepared.run_dir == invocation.run_dir and prepared.argv == tuple(invocation.argv)
    assert json.loads(invocation.config_path.read_text()) == {"guidance_scale": 3.5}
    assert prepared.gate.quality == invocation.quality_level and prepared.gate.profiling
    with pytest.raises(FileExistsError):  # a run directory is never reused
        request_setup.prepare(invocation, env, MARKERS)
    engine_dir = tmp_path / "engine-e1"  # an engine of several requests: its own directory and config copy
    own = request_setup.prepare(invocation, env, MARKERS, run_dir=engine_dir)
    assert f"--config={engine_dir / invocation.config_path.name}" in own.argv
    assert f"--config={invocation.config_path}" not in own.argv
    assert (engine_dir / invocation.config_path.name).read_text() == invocation.config_content
