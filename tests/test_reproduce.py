"""The Markdown report's Reproduce block runs as written on the machine that produced it (real engine, tiny CPU
model) and gives the same bytes, and the report records its cache roots without cleanup being asked for. The block is
the engine run directly, without the runner, so on 0.5.23 it also shows the native path the recorded run in
tests/fixtures/engine-cpu-0.5.23 has: only the b0 gap filled, scheduler steps apart from stages, no memory on CPU."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import run_script
from engine_release import DEFAULT_RELEASE, INSTALLED
from sgl_diffusion_bench.campaign import run_record
from sgl_diffusion_bench.engine import adapter_record
from test_engine_cpu_0523 import STAGES

pytestmark = pytest.mark.engine
RUN = ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--report")  # the docs' CPU single run (test_docs.py)


def test_the_reproduce_block_reruns_the_cell(tmp_path):
    run = run_script(*RUN, "--label", "repro", "--output-dir", str(tmp_path), "--json", timeout=1800)
    doc = run.document
    assert run.returncode == 0, run.stderr[-3000:]
    caches = doc["plan"]["caches"]
    assert caches["hf_hub_cache"] and caches["local_model_dir"] and caches["model_cache_root"] is None
    markdown = Path(doc["artifacts"]["report_md"]).read_text()
    assert "- caches: " in markdown
    block = re.search(r"### Reproduce\n\n.*?```bash\n(.*?)\n```", markdown, re.S).group(1)
    assert "PYTHONPATH=" in block  # the CPU adapter the cell ran with (its absence broke the block before)
    cell = doc["cells"][0]
    perf = Path(cell["perf_dump_path"])
    perf.unlink()
    (output,) = cell["outputs"]
    Path(output["path"]).unlink()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    rerun = subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=1800, env=env,
                           cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    dump = json.loads(perf.read_text())
    assert dump["total_duration_ms"] > 0  # the rerun wrote the cell's perf dump again
    assert hashlib.sha256(Path(output["path"]).read_bytes()).hexdigest() == output["sha256"]  # and the same bytes
    if INSTALLED == DEFAULT_RELEASE:
        log = rerun.stdout + rerun.stderr
        assert "Loaded transformer: FluxTransformer2DModel (sgl-diffusion version)" in log
        adapter = adapter_record.summarize(log.splitlines())
        assert adapter["applied"] == ["b0", "fork", "gc"] and len(adapter["pids"]) == 2  # the CLI, its forked worker
        assert [s["name"] for s in dump["steps"] if "." not in s["name"]] == STAGES
        assert dump["memory_checkpoints"] == {}


def test_reproduce_names_secrets_never_values():
    env_set, unset = run_record.child_env_changes({"HF_TOKEN": "s3cret", "A": "1", "GONE": "x"},
                                                  {"HF_TOKEN": "s3cret", "HUGGINGFACE_HUB_TOKEN": "s3cret", "A": "2"})
    assert env_set == {"A": "2"} and unset == ["GONE"]
    command = run_record.reproduce_command(["sglang", "generate"], env_set, {"HUGGINGFACE_HUB_TOKEN": "HF_TOKEN"},
                                           unset)
    assert "s3cret" not in command and command.startswith("env \\\n  -u GONE")
    assert 'HUGGINGFACE_HUB_TOKEN="$HF_TOKEN"' in command
