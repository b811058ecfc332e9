"""analyze_trace as a user runs it: real traces in, one valid document out; broken inputs are error.v1, exit 2."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import TEST_FIXTURES, run_main

H200 = TEST_FIXTURES / "traces-h200"
TP2 = TEST_FIXTURES / "traces-h200-tp2"
EAGER = H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz"
GRAPH = H200 / "flux-graph-2_steps-full_stages-global-rank0.trace.json.gz"


def test_hotspots_bounded_on_stdout_full_table_in_output_file(tmp_path):
    out = tmp_path / "full.json"
    run = run_main("analyze_trace", "hotspots", str(EAGER), "--top", "3", "--output", str(out), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["schema"] == "trace-hotspots.v1" and len(doc["kernels"]) == 3 and doc["output"] == str(out)
    assert {"name", "count", "total_us"} <= set(doc["kernels"][0])
    assert doc["launches"]["cudaLaunchKernel"] == 5776 and doc["graph_launches"] == 0
    assert set(doc["stages"]["DenoisingStage"]) >= {"gpu_us", "kernels", "host_launches", "cpu_us"}
    full = json.loads(out.read_text())
    assert len(full["kernels"]) == full["kernels_total"]["distinct"] == doc["kernels_total"]["distinct"] > 3
    assert sum(r["count"] for r in full["kernels"]) == 7234


def test_two_traces_are_analysed_as_ranks():
    run = run_main("analyze_trace", "hotspots", *(str(TP2 / f"flux-tp2-eager-2_steps-full_stages-global-rank{r}"
                                                         ".trace.json.gz") for r in (0, 1)), "--top", "2", "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["schema"] == "trace-ranks.v1" and [t["trace"]["rank"] for t in doc["traces"]] == [0, 1]
    assert all(r["communication"]["kernels"] == 304 for r in doc["ranks"])
    assert doc["skew"]["compute_total_us"]["spread_us"] >= 0 and len(doc["per_step"]) == 2


def test_compare_writes_markdown_and_json(tmp_path):
    md = tmp_path / "table.md"
    run = run_main("analyze_trace", "compare", str(EAGER), str(GRAPH), "--label-a", "eager", "--label-b", "graph",
                   "--markdown", str(md), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["markdown"] == md.read_text() and "| cudaGraphLaunch calls | 0 | 2 |" in doc["markdown"]
    assert "| Host per-kernel launches, CUDA runtime + driver | 5,668 | 6 |" in doc["markdown"]


def test_classify_labels_engine_kernels():
    trace = next((TEST_FIXTURES / "sglang-0.5.10-h200" / "full_profile").glob("*.trace.json.gz"))
    run = run_main("analyze_trace", "classify", str(trace), "--top", "60", "--json")
    assert run.returncode == 0, run.stderr
    families = {row["name"]: row["family"] for row in run.document["hot"]}
    assert any(f == "Q2" and "fused_qknorm_rope_warp" in n for n, f in families.items())
    assert any(f == "T1" and "timestep_embedding_kernel" in n for n, f in families.items())


def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case,expected_code", [
    ("empty", "input.trace_empty"),
    ("no_events", "input.trace_empty"),
    ("truncated_json", "input.trace_truncated"),
    ("truncated_gzip", "input.trace_truncated"),
    ("garbage", "input.trace_corrupt"),
    ("not_a_trace", "input.not_a_trace"),
    ("missing", "input.trace_not_found"),
])
def test_bad_inputs_are_error_documents_with_exit_2(tmp_path, case, expected_code):
    valid = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]}).encode()
    path = {
        "empty": lambda: _write(tmp_path / "e.json", b""),
        "no_events": lambda: _write(tmp_path / "n.json", b'{"traceEvents": []}'),
        "truncated_json": lambda: _write(tmp_path / "t.json", valid[:-20]),
        "truncated_gzip": lambda: _write(tmp_path / "t.json.gz", gzip.compress(valid)[:-8]),
        "garbage": lambda: _write(tmp_path / "g.json", b"\x00\x01not json at all"),
        "not_a_trace": lambda: _write(tmp_path / "x.json", b'{"schema": "bench-report.v1", "rows": []}'),
        "missing": lambda: str(tmp_path / "absent.json.gz"),
    }[case]()
    for command in (["hotspots", path], ["classify", path], ["compare", path, path]):
        run = run_main("analyze_trace", *command, "--json")
        assert run.returncode == 2
        assert run.document["schema"] == "error.v1" and run.document["error"]["code"] == expected_code
        assert run.document["error"]["hint"]


def test_bad_top_is_a_usage_error(tmp_path):
    run = run_main("analyze_trace", "hotspots", "x.json", "--top", "0", "--json")
    assert run.returncode == 2 and run.document["error"]["code"].startswith("usage.")


def test_self_test_runs_the_bundled_trace():
    run = run_main("analyze_trace", "--self-test", "--json")
    assert run.returncode == 0
    names = {c["name"] for c in run.document["checks"]}
    assert {"sample-hotspots", "fast-path-registry", "corrupt-trace", "schema:fast-paths.v1"} <= names
