"""The benchmark runner against the real sglang engine on CPU (tiny-flux-cpu preset): 0.5.23 by default, 0.5.10.post1
through `make test-engine ENGINE=0.5.10.post1`; release-specific expectations say which release they are for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from conftest import HF_TOKEN_CANARY, SCRIPTS, TEST_FIXTURES, assert_announced_and_summarised, run_script
from engine_release import FLUX_GAPS_0510, INSTALLED, OLDER_RELEASE, expects
from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import command_builder, engine_probe, tiny_model
from sgl_diffusion_bench.campaign import bench_runner, campaign_context, design
from sgl_diffusion_bench.judging.cell import Report
from sgl_diffusion_bench.engine.inside.cpu_adapter import sgl_cpu_adapter

pytestmark = pytest.mark.engine


def test_cold_aa_campaign_is_valid_with_identical_outputs(tmp_path):
    """One cold round (four engine processes); the warm A/A (test_warm.py) and the plan tests cover more rounds."""
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--rounds", "1",
                     "--engine", "cold", "--label", "aa", "--output-dir", str(tmp_path), "--report", "--json",
                     timeout=1800)
    doc = run.document
    assert run.returncode == 0 and doc["schema"] == "bench-report.v1" and doc["ok"], run.stderr[-3000:]
    cells = doc["cells"]
    assert len(cells) == 4 and all(c["status"] == "valid" for c in cells)
    assert [c["position"] for c in cells] == ["A1", "B1", "B2", "A2"]
    assert doc["engines"]["mode"] == "cold" and doc["engines"]["engine_starts"] == 4
    hashes = {o["sha256"] for c in cells for o in c["outputs"]}
    assert len(hashes) == 1  # same seed, same config: byte-identical in both arms
    identity = doc["summary"]["output_quality"]["checks"][0]
    assert identity["kind"] == "byte_identity" and identity["identical"] and identity["passed"]
    adapter = doc["engine"]["adapter"]
    if INSTALLED == OLDER_RELEASE:  # every gap filled; memory is the b5 stand-in's process RSS
        assert [p for p in adapter["applied"] if p in sgl_cpu_adapter.GAPS] == FLUX_GAPS_0510
        assert all(c["perf"]["memory_kind"] == "process_rss" for c in cells)
    else:  # 0.5.23: only the b0 gap (and the forked worker), and the engine records no memory on CPU
        assert adapter["active"] and adapter["applied"] == ["b0", "fork", "gc"] and adapter["memory_source"] is None
        assert all(c["perf"]["peak_memory_mb"] is None and c["perf"]["memory_kind"] is None for c in cells)
    assert doc["summary"]["comparison"]["verdict"] in (
        "improved", "regressed", "no_significant_change", "insufficient_data")
    # One status line per cell on stderr, every phase announced before it ran, and one closing line.
    assert run.stderr.count("VALID after") == 4
    last = assert_announced_and_summarised(run.stderr, "bench_diffusion_denoise")[-1]
    assert "tiny-flux-cpu [aa] aa: OK; 4/4 cells valid; verdict " in last and f"Markdown {doc['artifacts']['report_md']}" in last
    on_disk = json.loads(Path(doc["plan"]["report_path"]).read_text())
    assert on_disk["cells"] == cells
    plot = Path(doc["artifacts"]["plot_png"])
    assert Image.open(plot).size[0] > 300 and Path(doc["artifacts"]["report_md"]).read_text().count("|") > 20
    # A second campaign with the same label never overwrites the first.
    again = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "aa",
                       "--output-dir", str(tmp_path), "--json")
    assert again.returncode == 3 and again.document["error"]["code"] == "run.label_taken"


def _runner(tmp_path: Path, label: str, model_path: Path, extra_args=(), caller_env=None):
    preset = presets.get_preset("tiny-flux-cpu")
    caps = engine_probe.probe_engine().capabilities
    settings = campaign_context.CampaignSettings(label=label, output_root=tmp_path, extra_args=tuple(extra_args),
                                                 engine_mode="cold")  # these watch one engine process start to exit
    ctx = campaign_context.CampaignContext.build(preset, design.plan("single"), settings, caps,
                                                 model_path=str(model_path), caller_env=caller_env,
                                                 site=campaign_context.Site(use_cpu_adapter=True))
    return bench_runner.CampaignRunner(ctx, asset_filenames={})


def test_a_fallback_run_is_stopped_within_seconds_of_the_fallback_line(tmp_path, monkeypatch):
    full_run_s = json.loads((TEST_FIXTURES / "engine-cpu-0.5.10" / "fallback-auto" / "run.json").read_text())["wall_s"]
    unresolved = tiny_model.ensure_local_model(name=tiny_model.UNRESOLVED_NAME)
    # The runner pins the native backend and refuses a second --backend; only an auto backend can fall back, so the
    # pin itself is swapped to reach the engine's real fallback line.
    monkeypatch.setattr(command_builder, "BACKEND_PIN", "--backend=auto")
    runner = _runner(tmp_path, "fallback", unresolved)
    doc = runner.run()
    cell = doc["cells"][0]
    stop = cell["gates"]["stop"]
    assert cell["status"] == "invalid" and not doc["ok"]
    assert stop["reason"] == "backend.diffusers_fallback" and "Falling back to diffusers backend" in stop["line"]
    assert cell["wall_s"] - stop["after_s"] < 7  # stopped within seconds of the line
    log = Path(cell["log_path"]).read_text()
    assert "Loaded diffusers pipeline" not in log and "Generated" not in log  # the fallback never got to run
    assert cell["outputs"] == [] and cell["perf"] is None
    print(f"fallback stopped {stop['after_s']:.1f} s after start, wall {cell['wall_s']:.1f} s "
          f"(full fallback run recorded at {full_run_s:.1f} s)")


@expects(OLDER_RELEASE)  # 0.5.23 fills b6 itself: switching the patch off breaks nothing there
def test_exit_code_zero_without_output_is_an_invalid_cell(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "nooutput", "--engine", "cold",
                     "--output-dir", str(tmp_path), "--json", env={sgl_cpu_adapter.DISABLE_ENV: "b6"}, timeout=900)
    doc = run.document
    cell = doc["cells"][0]
    assert run.returncode == 1 and not doc["ok"]
    assert cell["returncode"] == 0 and cell["status"] == "invalid"  # the engine itself said nothing was wrong
    assert any(r.startswith("artifacts.no_output") for r in cell["reasons"])


@pytest.mark.parametrize("mode, interrupt_after, statuses", [
    ("cold", "[cell 2/4]", ["valid", "interrupted", "skipped", "skipped"]),  # while the second engine process starts
    ("warm", "[engine e1] starting", ["interrupted", "skipped", "skipped", "skipped"]),  # while the engine loads
])
def test_sigint_mid_campaign_leaves_a_partial_valid_report(tmp_path, mode, interrupt_after, statuses):
    env = dict(os.environ, HF_TOKEN=HF_TOKEN_CANARY)
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "bench_diffusion_denoise.py"), "--model", "tiny-flux-cpu",
                             "--campaign", "aa", "--rounds", "1", "--engine", mode, "--label", "sigint", "--output-dir",
                             str(tmp_path), "--model-cache-root", str(tmp_path / "cache"), "--cleanup-model-cache",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stderr_lines = []
    try:
        for line in proc.stderr:
            stderr_lines.append(line)
            if line.startswith(interrupt_after) and "starting" in line:
                time.sleep(3)  # let the engine start
                proc.send_signal(signal.SIGINT)
                break
        stdout, rest = proc.communicate(timeout=120)
    finally:  # a CLI that did not hear the signal must not run on through the lane
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == contract.ExitCode.INTERRUPTED, "".join(stderr_lines) + rest
    doc = json.loads(stdout)
    assert contract.validation_errors(doc) == [] and doc["schema"] == "bench-report.v1" and not doc["ok"]
    assert [c["status"] for c in doc["cells"]] == statuses and doc["engines"]["mode"] == mode
    assert Report.from_json(doc).to_json() == doc  # the typed model reads a real partial report losslessly
    assert [c["status"] for c in json.loads(Path(doc["plan"]["report_path"]).read_text())["cells"]] == statuses
    assert HF_TOKEN_CANARY not in stdout + rest
    # The isolated cache was removed in the runner's finally block, ledgered as interrupted and re-scanned.
    assert doc["cleanup"]["exit_reason"] == "interrupted" and doc["cleanup"]["residual"]["clean"]
    assert not Path(doc["cleanup"]["cache_dir"]).exists()
    ledger = [json.loads(line) for line in (tmp_path / "cleanup.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["exit_reason"]) for e in ledger] == [("started", "interrupted"), ("finished", "interrupted")]
    # No engine process of this campaign is left behind.
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


PROFILE = ("profile_diffusion", "--model", "tiny-flux-cpu", "--all-stages")  # the docs' CPU profile (test_docs.py)


def test_profile_run_on_the_real_engine_lists_its_trace_and_no_timings(tmp_path):
    run = run_script(*PROFILE, "--label", "prof", "--output-dir", str(tmp_path), "--json", timeout=900)
    doc = run.document
    assert run.returncode == 0 and doc["status"] == "valid", doc["reasons"]
    assert doc["timings_are_benchmark_numbers"] is False and "e2e_ms" not in json.dumps(doc)
    # The directory variables each release's profiler reads (0.5.23 added its own, read first).
    expected_env = (["SGLANG_TORCH_PROFILER_DIR"] if INSTALLED == OLDER_RELEASE
                    else ["SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR"])
    assert list(doc["profiler_env"]) == expected_env
    (trace,) = doc["traces"]
    assert trace["rank"] == 0 and Path(trace["path"]).is_file() and trace["path"].startswith(doc["trace_dir"])
    hot = run_script("analyze_trace", "hotspots", trace["path"], "--json")
    assert hot.returncode == 0 and hot.document["ok"]
