"""The real sglang 0.5.10.post1 engine on CPU (tiny FLUX.1, the CPU adapter): native path, determinism, the
diffusers fallback and how fast a runner can stop on it, the unresolved-model error, and the rc-0 failure a runner
must catch. Every engine call costs ~20 s, so each runs once per module and feeds several assertions."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES
from engine_release import FLUX_GAPS_0510, OLDER_RELEASE, expects
from sgl_diffusion_bench.engine import engine_process, tiny_model
from sgl_diffusion_bench.engine import adapter_record
from sgl_diffusion_bench.engine.inside.cpu_adapter import sgl_cpu_adapter

pytestmark = [pytest.mark.engine, expects(OLDER_RELEASE)]  # 0.5.23: tests/test_engine_cpu_0523.py

_spec = importlib.util.spec_from_file_location("engine_fixture_record",
                                               TEST_FIXTURES / "engine-cpu-0.5.10" / "record.py")
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

STAGES = ["InputValidationStage", "TextEncodingStage", "TimestepPreparationStage", "LatentPreparationStage",
          "DenoisingStage", "DecodingStage"]
FALLBACK_MARKERS = ("Falling back to diffusers backend", "Using diffusers backend", "Loaded diffusers pipeline")


@pytest.fixture(scope="module")
def models() -> dict[str, Path]:
    cache = tiny_model.default_cache_dir()
    return {name: tiny_model.ensure_local_model(cache_dir=cache, name=name) for name in (tiny_model.NATIVE_NAME,
                                                                        tiny_model.UNRESOLVED_NAME)}


@pytest.fixture(scope="module")
def engine(models, tmp_path_factory):
    """engine(key, model name, backend, seed, disable, on_line) -> (EngineRun, run dir); each key runs once."""
    runs: dict[str, tuple[engine_process.EngineRun, Path]] = {}

    def run(key: str, model: str = tiny_model.NATIVE_NAME, backend: str = "sglang", seed: int = 42,
            disable: tuple[str, ...] = (), on_line=None) -> tuple[engine_process.EngineRun, Path]:
        if key not in runs:
            run_dir = tmp_path_factory.mktemp(key)
            argv = record.generate_argv(models[model], run_dir, backend, seed)
            env = engine_process.cpu_adapter_env(dict(os.environ), disable)
            runs[key] = (engine_process.run_engine(argv, env, run_dir / "log.txt", on_line=on_line, timeout_s=300,
                                                   cwd=run_dir), run_dir)
        return runs[key]
    return run


def test_native_run_takes_the_sglang_path_with_the_adapter_in_both_processes(engine):
    run, run_dir = engine("native-42")
    log = run.log_path.read_text()
    assert run.returncode == 0 and run.stop_reason is None
    for component in ("text_encoder: CLIPTextModel", "text_encoder_2: T5EncoderModel", "vae: AutoencoderKL",
                      "transformer: FluxTransformer2DModel", "scheduler: FlowMatchEulerDiscreteScheduler"):
        assert f"Loaded {component} (sgl-diffusion version)" in log
    assert not any(marker in log for marker in FALLBACK_MARKERS)
    assert "Generated 1 outputs" in log
    assert (run_dir / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    perf = json.loads((run_dir / "perf.json").read_text())
    assert perf["tag"] == "cli_generate" and [step["name"] for step in perf["steps"]] == STAGES
    assert [step["step"] for step in perf["denoise_steps_ms"]] == [0, 1]
    assert perf["memory_checkpoints"]["after_forward"]["peak_reserved_mb"] > 0  # b5: process RSS
    adapter = adapter_record.summarize(log.splitlines())
    assert len(adapter["pids"]) == 2  # CLI and spawned worker
    assert [p for p in adapter["applied"] if p in sgl_cpu_adapter.GAPS] == FLUX_GAPS_0510
    assert adapter["memory_source"] == "process_rss"


def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(engine):
    first = (engine("native-42")[1] / "out.png").read_bytes()
    again = (engine("native-42-again")[1] / "out.png").read_bytes()
    other = (engine("native-43", seed=43)[1] / "out.png").read_bytes()
    assert first == again and first != other


def test_runner_stops_on_the_real_fallback_line_within_seconds(engine):
    run, run_dir = engine("fallback-stopped", model=tiny_model.UNRESOLVED_NAME, backend="auto",
                          on_line=lambda line: "diffusers-fallback" if FALLBACK_MARKERS[0] in line else None)
    assert run.stop_reason == "diffusers-fallback"
    assert run.stop_line.endswith("/tinyflux'. Falling back to diffusers backend.")
    assert "Could not resolve native configuration for model" in run.stop_line
    assert run.wall_s - run.stopped_after_s < engine_process.STOP_GRACE_S + 1
    log = run.log_path.read_text()
    assert len(adapter_record.summarize(log.splitlines())["pids"]) == 1  # no worker was spawned
    assert "Pipeline instantiated" not in log and log.splitlines()[-1].startswith("[run_engine] stopped after")
    assert run.returncode != 0 and not (run_dir / "out.png").exists() and not (run_dir / "perf.json").exists()


def test_backend_sglang_on_an_unresolved_dir_fails_with_the_engines_error(engine):
    run, run_dir = engine("unresolved-sglang", model=tiny_model.UNRESOLVED_NAME, backend="sglang")
    log = run.log_path.read_text()
    assert run.returncode == 1
    assert "/tinyflux'. It is not a registered model path or detected by any registered model family detectors. " \
           "Known model paths: [" in log
    assert "/tinyflux'. If using a safetensors file, please specify pipeline_class_name" in log
    assert "ValueError: Could not get model info for '" in log
    assert not (run_dir / "out.png").exists()


def test_failed_generation_exits_zero_without_an_output(engine):
    run, run_dir = engine("b5-off", disable=("b5",))
    log = run.log_path.read_text()
    assert run.returncode == 0  # the engine's own exit status says nothing about the request
    assert "Generated 0 outputs" in log and "Generation failed for prompt 1/1" in log
    assert "module 'torch.cpu' has no attribute 'reset_peak_memory_stats'" in log
    assert not (run_dir / "out.png").exists() and not (run_dir / "perf.json").exists()
