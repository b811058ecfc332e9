"""Evidence from the bundle's GPU paths on a real H200 with the real sglang 0.5.10.post1 engine (fixtures recorded
by tests/gpu_harness/run_h200_evidence.sh; see tests/fixtures/gpu-h200-0.5.10/README.md). These tests check the
documents the tools wrote there, and re-run our own analysis and log gate on the engine's real trace and log."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import HF_TOKEN_LIKE, TEST_FIXTURES, run_main
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.judging import log_gates, log_markers, perf_dump

H200 = TEST_FIXTURES / "gpu-h200-0.5.10"
TRACE = next(H200.glob("*-full_stages-global-rank0.trace.json.gz"))


def load(name: str) -> dict[str, Any]:
    return json.loads((H200 / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, schema", [
    ("bench-report.json", "bench-report.v1"), ("profile-run.json", "profile-run.v1"),
    ("hotspots.json", "trace-hotspots.v1"), ("classify.json", "trace-classify.v1"),
    ("engine-probe.json", "engine.v1"), ("env-inspect.json", "env.v1")])
def test_documents_validate_against_their_schemas(name, schema):
    doc = load(name)
    assert doc["schema"] == schema and doc["ok"] is True
    assert contract.validation_errors(doc) == []


def test_environment_was_one_h200_with_the_real_engine():
    env = load("env-inspect.json")
    assert [g["name"] for g in env["gpus"]] == ["NVIDIA H200"] and env["gpus"][0]["processes"] == []
    assert env["versions"]["cuda_available"] is True and env["versions"]["torch_cuda_build"] == "13.0"
    assert env["sglang"]["version"] == env["versions"]["sglang"] == "0.5.10.post1"
    probe = load("engine-probe.json")["engine"]
    assert probe["version"] == "0.5.10.post1" and probe["method"] != "recent"
    assert "--generator-device" in probe["choices"] and "cuda" in probe["choices"]["--generator-device"]


def test_every_cell_is_valid_with_device_memory_and_checked_contention():
    doc = load("bench-report.json")
    assert doc["ok"] is True and doc["campaign"]["mode"] == "aa" and doc["campaign"]["preset"] == "tiny-flux-gpu"
    assert len(doc["cells"]) == 4 and [c["arm"] for c in doc["cells"]] == ["a", "a-again", "a-again", "a"]
    assert doc["engine"]["version"] == "0.5.10.post1" and doc["engine"]["adapter"] is None  # no CPU adapter
    assert [g["name"] for g in doc["environment"]["gpus"]] == ["NVIDIA H200"]
    for cell in doc["cells"]:
        assert cell["status"] == "valid" and cell["reasons"] == [] and cell["returncode"] == 0
        perf = cell["perf"]
        assert perf["memory_kind"] == "device" and perf["peak_memory_source"] == "max_checkpoint_peak_reserved"
        assert 0 < perf["denoise_ms"] < perf["e2e_ms"] and len(perf["denoise_steps_ms"]) == 2
        assert cell["gates"]["contention"] == {"checked": True, "before": [], "after": []}
        assert cell["gates"]["log"]["valid"] and cell["gates"]["log"]["native_evidence"]
    assert {inv["num_gpus"] for inv in doc["plan"]["invocations"]} == {1}
    leased = doc["environment"]["gpus"][0]["uuid"]  # the campaign's GPU lease named the one H200
    assert doc["plan"]["gpus"] == {"cuda_visible_devices": "0", "leased_uuids": [leased], "contention_checked": True}
    log = (H200 / "cell-a-r01p01.engine.log").read_text(encoding="utf-8")  # the preset's flags reached the engine
    for setting in ('"num_gpus": 1', '"dit_cpu_offload": false', '"text_encoder_cpu_offload": false'):
        assert setting in log
    summary = doc["summary"]
    assert summary["arms"]["a"]["memory_kind"] == "device" and summary["arms"]["a"]["n_valid"] == 2
    assert summary["comparison"]["verdict"] == "insufficient_data"  # one round cannot support a verdict


def test_outputs_are_byte_identical_across_the_four_cells():
    doc = load("bench-report.json")
    digests = {o["sha256"] for c in doc["cells"] for o in c["outputs"]}
    assert len(digests) == 1 and sum(len(c["outputs"]) for c in doc["cells"]) == 4
    check = doc["summary"]["output_quality"]["checks"][0]
    assert check["kind"] == "byte_identity" and check["identical"] and check["groups"][0]["cells"] == [0, 1, 2, 3]


def test_cell_perf_dump_parses_to_the_reported_row():
    cell = load("bench-report.json")["cells"][0]
    parsed = perf_dump.load_perf_dump(H200 / "cell-a-r01p01.perf.json", "device").to_json()
    # Recorded before the parser kept scheduler-internal steps apart; this engine's dump has none.
    assert parsed.pop("internal_steps") == {} and parsed == cell["perf"]
    raw = load("cell-a-r01p01.perf.json")
    peak = max(cp["peak_reserved_mb"] for cp in raw["memory_checkpoints"].values())
    assert parsed["peak_memory_mb"] == peak and parsed["e2e_ms"] == raw["total_duration_ms"]


def test_log_gate_rejudges_the_real_engine_log():
    log = (H200 / "cell-a-r01p01.engine.log").read_text(encoding="utf-8")
    gate = log_gates.RequestLogGate(log_markers.markers_for_version("0.5.10.post1"), bcg_expected=False,
                                    require_native=True)
    for line in log.splitlines():
        assert gate.feed(line) is None
    verdict = gate.verdict().to_json()
    # the stand-ins were named by the gate only after this was recorded: what it adds, and nothing else differs
    assert verdict.pop("standin_modules") == ["av", "sgl_kernel"]
    standin_warning = [w for w in verdict["warnings"] if w["code"] == "engine.standin_kernels"]
    assert len(standin_warning) == 1 and "av, sgl_kernel" in standin_warning[0]["message"]
    verdict["warnings"].remove(standin_warning[0])
    assert verdict == load("bench-report.json")["cells"][0]["gates"]["log"]
    assert {w["code"] for w in verdict["warnings"]} >= {"engine.attention_fallback", "engine.jit_kernel_unsupported"}
    # The harness's stand-ins are what the engine imported, and attention fell back to torch SDPA by itself.
    for needle in ("[gpu-harness] no real 'sgl_kernel' importable", "[gpu-harness] hiding namespace-only sphinx",
                   "[gpu-harness] no real 'av' importable", "Using Torch SDPA backend"):
        assert needle in log


def test_profile_run_lists_the_engine_trace_it_wrote():
    doc = load("profile-run.json")
    assert doc["status"] == "valid" and doc["reasons"] == [] and doc["timings_are_benchmark_numbers"] is False
    assert "--profile" in doc["argv"] and "--profile-all-stages" in doc["argv"]
    (trace,) = doc["traces"]
    assert Path(trace["path"]).name == TRACE.name and trace["rank"] == 0
    assert trace["bytes"] == TRACE.stat().st_size and trace["sha256"] == hashlib.sha256(TRACE.read_bytes()).hexdigest()
    assert doc["gate"]["profiler_traces"] == [trace["path"]]
    log = (H200 / "profile.engine.log").read_text(encoding="utf-8").splitlines()  # the engine colours the path
    assert any(f"Saved profiler traces to: {trace['path']}" in log_gates.clean_line(line) for line in log)


def test_trace_holds_cuda_kernels_with_host_launches():
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 606 and all(e["args"].get("device") == 0 for e in kernels)
    assert not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events)  # all-stages: no step ranges


def test_hotspots_on_the_real_trace(tmp_path):
    run = run_main("analyze_trace", "hotspots", str(TRACE), "--output", str(tmp_path / "full.json"), "--json")
    assert run.returncode == 0
    doc = run.document
    recorded = load("hotspots.json")
    for key in ("kernels_total", "launches", "host_launches", "graph_launches", "stages", "runtime_calls"):
        assert doc[key] == recorded[key], key
    assert doc["kernels_total"]["count"] == doc["host_launches"] == sum(doc["launches"].values()) == 606
    assert doc["graph_launches"] == 0 and doc["unresolved_calls"] == 0
    assert doc["trace"]["stage_source"] == "python_frames" and doc["trace"]["step_source"] == "none"
    stages = doc["stages"]
    assert stages["DenoisingStage"]["host_launches"] == stages["DenoisingStage"]["kernels"] > 0
    names = [k["name"] for k in json.loads((tmp_path / "full.json").read_text())["kernels"]]
    assert len(names) == doc["kernels_total"]["distinct"] == 92
    for fragment in ("timestep_embedding_kernel<true, __nv_bfloat16>", "_rotary_embedding_kernel",
                     "pytorch_flash::flash_fwd_splitkv_kernel", "nvjet_sm90_", "_rms_norm_tiled_onepass"):
        assert any(fragment in n for n in names), fragment


def test_classify_labels_the_engine_jit_and_triton_kernels():
    run = run_main("analyze_trace", "classify", str(TRACE), "--json")
    assert run.returncode == 0
    doc = run.document
    families = doc["families"]
    recorded = load("classify.json")["families"]  # as classified on the H200, before family 7 knew this kernel
    assert {k: v for k, v in families.items() if k != "7"} == {k: v for k, v in recorded.items() if k != "7"}
    # _rms_norm_tiled_onepass
    assert families["7"]["family_name"] == "One-pass RMSNorm" and families["7"]["kernels"] == 17
    assert families["T1"]["family_name"] == "Timestep embedding (JIT)" and families["T1"]["kernels"] == 4
    assert families["8"]["family_name"] == "Triton RoPE" and families["K2"]["kernels"] > 0
    chains = {c["family"]: c for c in doc["chains"]}
    # head_dim 16 is outside the fused QK-norm+RoPE kernel's guard: the engine logged it and ran the parts unfused.
    assert chains["Q2"]["fused_kernel_seen"] is False
    assert "Unsupported head_dim=16 for JIT fused QKNorm+RoPE" in (H200 / "cell-a-r01p01.engine.log").read_text()


def test_no_hf_token_anywhere():
    assert load("env-inspect.json")["huggingface"]["token_present"] is False
    for path in sorted(H200.iterdir()):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        if path.suffix == ".png":
            continue
        assert not HF_TOKEN_LIKE.search(data.decode("utf-8", "replace")), path.name
