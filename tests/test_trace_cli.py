"""analyze_trace as a user runs it: real traces in, one valid document out; broken inputs are error.v1, exit 2."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.trace import summary

H200 = TEST_FIXTURES / "traces-h200"
TP2 = TEST_FIXTURES / "traces-h200-tp2"
EAGER = H200 / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz"
GRAPH = H200 / "flux-graph-2_steps-full_stages-global-rank0.trace.json.gz"
CPU_PROFILES = TEST_FIXTURES / "engine-cpu-0.5.23" / "profile-contended"  # two real CPU profiles, busy host
CPU_A = next((CPU_PROFILES / "a").glob("*.trace.json.gz"))
CPU_B = next((CPU_PROFILES / "b").glob("*.trace.json.gz"))


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


def test_ranks_read_in_worker_processes_give_what_one_by_one_gives():
    paths = [str(TP2 / f"flux-tp2-eager-2_steps-full_stages-global-rank{r}.trace.json.gz") for r in (0, 1)]
    assert summary.rank_summaries(paths) == [summary.rank_summary(p) for p in paths]


def test_a_damaged_rank_among_several_is_named_in_its_error(tmp_path):
    damaged = tmp_path / "rank1.trace.json.gz"
    damaged.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na')[:-12])
    run = run_main("analyze_trace", "hotspots", str(TP2 / "flux-tp2-eager-2_steps-full_stages-global-rank0"
                                                         ".trace.json.gz"), str(damaged), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.trace_truncated", run.document
    assert str(damaged) in run.document["error"]["message"] and run.document["error"]["hint"]


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


def _op_union_us(trace_path) -> float:
    """Host time inside any CPU op, read straight from the raw events: per thread, the op intervals unioned."""
    events = json.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]
    by_thread: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator"):
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    total = 0.0
    for intervals in by_thread.values():
        end = None
        for s, e in sorted(intervals):
            if end is None or s > end:
                total += e - s
                end = e
            elif e > end:
                total += e - end
                end = e
    return total


def test_real_cpu_profile_hotspots_are_cpu_ops_by_self_time(tmp_path):
    """The engine's own CPU trace: a table of CPU ops whose self times add up to the host time inside ops (nothing
    counted under two nested names), not '0 kernels'."""
    out = tmp_path / "full.json"
    run = run_main("analyze_trace", "hotspots", str(CPU_A), "--output", str(out), "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["kernels"] == [] and doc["kernels_total"]["count"] == 0 and doc["cpu_ops"]
    full = json.loads(out.read_text())
    rows = full["cpu_ops"]
    assert len(rows) == full["cpu_ops_total"]["distinct"]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-4)
    assert sum(r["share"] for r in rows[:10]) <= 1.0
    assert full["cpu_ops_total"]["self_us"] == pytest.approx(_op_union_us(CPU_A), rel=1e-6)
    assert all(r["self_us"] <= r["inclusive_us"] + 1e-3 for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["aten::linear"]["self_us"] < 0.1 * by_name["aten::linear"]["inclusive_us"]  # its addmm is apart
    assert rows[0]["name"] == "aten::addmm"
    text = run_main("analyze_trace", "hotspots", str(CPU_A)).stdout
    assert "no device kernels (a CPU-only trace)" in text and "aten::addmm" in text and " 0 kernels" not in text


def test_h200_hotspots_keep_the_kernel_table():
    text = run_main("analyze_trace", "hotspots", str(EAGER)).stdout
    assert "7,234 kernels" in text and "no device kernels" not in text


def test_classify_says_when_there_are_no_device_kernels():
    run = run_main("analyze_trace", "classify", str(CPU_A), "--json")
    assert run.returncode == 0, run.stderr
    assert run.document["no_device_kernels"] is True and run.document["hot"] == []
    assert "no device kernels" in run.document["note"]
    assert "nothing to classify" in run_main("analyze_trace", "classify", str(CPU_A)).stdout
    gpu = run_main("analyze_trace", "classify", str(EAGER), "--json").document
    assert gpu["no_device_kernels"] is False and gpu["note"] is None and gpu["hot"]


def test_compare_of_a_contended_cpu_pair_withholds_its_verdict(tmp_path):
    md = tmp_path / "table.md"
    run = run_main("analyze_trace", "compare", str(CPU_A), str(CPU_B), "--markdown", str(md), "--json")
    assert run.returncode == 1, run.stderr
    doc = run.document
    assert doc["ok"] is False and doc["verdict"]["status"] == "withheld_contended"
    for side in ("a", "b"):
        record = doc["host_load"][side]
        assert record["recorded"] is True and record["contended"] is True
        assert record["source"].endswith(".host-load.json") and "another process:" in record["reason"]
    assert "pid 12042" in doc["verdict"]["reason"] and "pid 14274" in doc["verdict"]["reason"]
    assert md.read_text().startswith("**Verdict withheld (host contended)**")
    metrics = {m["key"]: m for m in doc["metrics"]}
    assert metrics["cpu_stage_ms"]["a"] == 417.834 and metrics["cpu_stage_ms"]["b"] == 664.802  # measured, shown


def _copy(trace, folder):
    folder.mkdir()
    return shutil.copy(trace, folder / trace.name)


def test_compare_without_host_load_records_says_unknown(tmp_path):
    a, b = _copy(CPU_A, tmp_path / "a"), _copy(CPU_B, tmp_path / "b")  # the traces without their records
    run = run_main("analyze_trace", "compare", str(a), str(b), "--label-a", "one", "--label-b", "two", "--json")
    assert run.returncode == 0, run.stderr
    doc = run.document
    assert doc["verdict"]["status"] == "host_load_unknown" and "one and two" in doc["verdict"]["reason"]
    assert all(doc["host_load"][s]["recorded"] is False and doc["host_load"][s]["contended"] is None for s in "ab")
    assert doc["markdown"].startswith("**Host load unknown**")
    # H200 traces recorded before profile_diffusion wrote records: unknown too, never assumed quiet
    gpu = run_main("analyze_trace", "compare", str(EAGER), str(GRAPH), "--json").document
    assert gpu["verdict"]["status"] == "host_load_unknown" and gpu["ok"] is True


def test_a_record_of_another_trace_is_not_taken_for_this_one(tmp_path):
    record_b = next((CPU_PROFILES / "b").glob("*.host-load.json"))
    a = _copy(CPU_A, tmp_path / "a")
    run = run_main("analyze_trace", "compare", str(a), str(CPU_B), "--host-load-a", str(record_b), "--json")
    record = run.document["host_load"]["a"]
    assert record["recorded"] is False and "sha256 differs" in record["note"]
    assert run.returncode == 1  # B's own record is still contended


def test_a_pair_with_quiet_records_is_comparable(tmp_path):
    """Records shaped as profile_diffusion writes them, with the busy processes taken out (constructed input: the
    shared development host had none quiet to record)."""
    paths = []
    for side, trace in (("a", CPU_A), ("b", CPU_B)):
        copy = _copy(trace, tmp_path / side)
        record = json.loads(next((CPU_PROFILES / side).glob("*.host-load.json")).read_text())
        for sample in (record["host"]["before"], record["host"]["after"]):
            sample.update(busy_processes=[], busy_process_count=0)
        record["host"] = {"before": record["host"]["before"], "after": record["host"]["after"], "contended": False}
        (tmp_path / side / (trace.name + ".host-load.json")).write_text(json.dumps(record))
        paths.append(str(copy))
    run = run_main("analyze_trace", "compare", *paths, "--json")
    assert run.returncode == 0, run.stderr
    assert run.document["verdict"]["status"] == "comparable" and run.document["ok"] is True
    assert run.document["markdown"].startswith("Scope:")


def test_a_malformed_host_load_record_is_an_input_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "trace-host-load.v1"}')
    run = run_main("analyze_trace", "compare", str(CPU_A), str(CPU_B), "--host-load-a", str(bad), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.schema_mismatch"
    run = run_main("analyze_trace", "compare", str(CPU_A), str(CPU_B), "--host-load-b", str(tmp_path / "no"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.unreadable"


@pytest.mark.parametrize("side", ["a", "b"])
def test_the_real_profile_run_wrote_its_host_load_beside_its_trace(side):
    """What profile_diffusion wrote on the real engine: the profile-run.v1 document names the record beside the
    trace, and the record carries the same host samples, tied to the trace by its sha256."""
    from sgl_diffusion_bench import contract, fileio

    run = json.loads((CPU_PROFILES / side / "profile-run.json").read_text())
    assert contract.validation_errors(run) == [] and run["status"] == "valid"
    (trace,) = run["traces"]
    assert trace["host_load_path"] == trace["path"] + ".host-load.json"
    local = CPU_PROFILES / side / Path(trace["host_load_path"]).name
    record = json.loads(local.read_text())
    assert contract.validation_errors(record) == [] and record["schema"] == "trace-host-load.v1"
    assert record["host"] == run["host_load"] and record["host"]["contended"] is True
    assert record["trace"]["sha256"] == trace["sha256"] == fileio.sha256_file(CPU_PROFILES / side /
                                                                               Path(trace["path"]).name)


def test_a_cpu_pair_leaves_out_device_rows_with_no_data():
    """Two real CPU profiles: no device kernel on either side, so the GPU rows (all zero) are named once and left
    out of the table; the JSON keeps every figure. An H200 pair keeps its zero rows (graph launches of an eager run)."""
    doc = run_main("analyze_trace", "compare", str(CPU_A), str(CPU_B), "--json").document
    zero = [m["label"] for m in doc["metrics"] if not m["a"] and not m["b"]]
    assert "GPU kernels" in zero and len(zero) >= 4 and len(doc["metrics"]) > len(zero)
    table = [line for line in doc["markdown"].splitlines() if line.startswith("| ")]
    assert not any(line.startswith(f"| {label} |") for label in zero for line in table)
    assert f"{len(zero)} device rows with no data left out" in doc["markdown"]
    gpu = run_main("analyze_trace", "compare", str(EAGER), str(GRAPH), "--json").document
    assert "| cudaGraphLaunch calls | 0 |" in gpu["markdown"] and "left out" not in gpu["markdown"]
