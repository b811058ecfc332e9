"""The probe's interpreter kept for the first warm engine: the real warm driver in probe mode (stdlib code in place of
sglang's parser), kept only after it answered, handed over only when the environment differs in run-time variables,
and never left running."""

from __future__ import annotations

import json
import sys

from sgl_diffusion_bench import progress
from sgl_diffusion_bench.engine import engine_probe, probe_interpreter

ANSWER = f"print({engine_probe.PROBE_MARK!r} + {json.dumps(json.dumps({'actions': []}))})"


def _probe(tmp_path, code: str, env: dict[str, str]):
    return probe_interpreter.probe_and_keep(sys.executable, env, code, tmp_path / "probe.log", 60,
                                            progress.Ticker("probe"), engine_probe.PROBE_MARK)


def test_an_answered_probe_is_kept_and_a_foreign_environment_closes_it(tmp_path):
    env = {"PYTHONPATH": "/adapter", "HF_HUB_OFFLINE": "1"}
    out, rest, how = _probe(tmp_path, ANSWER, env)
    assert [json.loads(line[len(engine_probe.PROBE_MARK):]) for line in out] == [{"actions": []}] and rest == []
    assert how == "ok"
    kept, _ = probe_interpreter._kept[sys.executable]
    assert kept.alive and "PROBED" in (tmp_path / "probe.log").read_text()
    # the adapter's switches (read at interpreter start) differ: not taken over, and the process is gone
    assert probe_interpreter.adopt(sys.executable, "e1", [], {**env, "DIFFUSION_BENCH_CPU_ADAPTER_DISABLE": "b0"},
                                   tmp_path / "engine.log") is None
    assert kept.process.poll() == 0 and sys.executable not in probe_interpreter._kept


def test_only_run_time_variables_may_differ_and_release_leaves_nothing_running(tmp_path):
    probe_env = {"PYTHONPATH": "/adapter"}
    assert probe_interpreter.adoptable(probe_env, {**probe_env, "SGLANG_DIFFUSION_SYNC_STAGE_PROFILING": "1",
                                                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert not probe_interpreter.adoptable(probe_env, {"PYTHONPATH": "/elsewhere"})
    assert not probe_interpreter.adoptable(probe_env, {**probe_env, "HF_HUB_CACHE": "/cache"})
    _probe(tmp_path, ANSWER, probe_env)
    kept, _ = probe_interpreter._kept[sys.executable]
    probe_interpreter.release_all()
    assert kept.process.poll() == 0 and probe_interpreter._kept == {}


def test_a_probe_that_fails_to_import_is_not_kept_and_names_the_module(tmp_path):
    out, rest, how = _probe(tmp_path, "raise ModuleNotFoundError(\"No module named 'tvm_ffi'\")", {})
    assert sys.executable not in probe_interpreter._kept
    assert how.startswith("the engine exited (code 1)") and rest == out
    assert rest[-1] == "ModuleNotFoundError: No module named 'tvm_ffi'"
