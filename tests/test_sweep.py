"""sweep_diffusion without an engine (issue 27): specs expanded into shards (one whole campaign each), plans with
commands, hashes and estimates, and every bad input refused with its error.v1 before anything is created or
submitted. The executors against the real engine and real Slurm and Ray clusters: tests/test_sweep_executors.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import REPO, TEST_FIXTURES, run_main
from sgl_diffusion_bench import presets
from sgl_diffusion_bench.sweep import driver as sweep_driver
from sgl_diffusion_bench.sweep import plan as sweep_plan
from sgl_diffusion_bench.sweep import spec as sweep_spec
from sgl_diffusion_bench.sweep import state as sweep_state


REPO_DATA = REPO / "scripts" / "sgl_diffusion_bench" / "data"


def write_spec(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


def test_a_filter_spec_plans_one_shard_per_preset_override_and_repeat(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {"schema": "sweep-spec.v1", "name": "nightly",
                                             "presets": {"names": ["tiny-flux-cpu"],
                                                         "filter": {"tags": ["nightly"], "max_gpus": 2}},
                                             "campaign": {"mode": "abba", "rounds": 3, "quality": "lossless"},
                                             "overrides": [{"num_inference_steps": 4}, {"width": 512, "height": 512}],
                                             "repeats": 2})
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"), "--json")
    doc = run.document
    expected = ["tiny-flux-cpu"] + [p.name for p in presets.filter_presets(presets.load_presets(), tags=["nightly"],
                                                                          max_gpus=2) if p.name != "tiny-flux-cpu"]
    assert doc["schema"] == "sweep-plan.v1" and doc["where"]["executor"] == "local"
    gpus_here = doc["where"]["gpus"]
    assert all(s["runnable"] == (s["gpus"] <= gpus_here) for s in doc["shards"])
    assert doc["ok"] == all(s["runnable"] for s in doc["shards"]) and run.returncode == (0 if doc["ok"] else 1)
    assert len(expected) > 2 and doc["totals"]["shards"] == len(expected) * 2 * 2 == len(doc["shards"])
    assert list(dict.fromkeys(s["preset"] for s in doc["shards"])) == expected
    assert len({s["id"] for s in doc["shards"]}) == len({s["hash"] for s in doc["shards"]}) == len(doc["shards"])
    for shard in doc["shards"]:
        argv = shard["argv"]
        # one whole campaign per shard: every round of the A/B/B/A pairs is in this one command
        assert argv[1:3] == ["-m", "sgl_diffusion_bench.cli.bench"] and shlex.split(shard["command"]) == argv
        assert argv[argv.index("--campaign") + 1] == "abba" and argv[argv.index("--rounds") + 1] == "3"
        assert argv[argv.index("--model") + 1] == shard["preset"] and "--quality" in argv
        assert argv[-1] == str(tmp_path / "sw" / "shards" / shard["id"] / "attempt-1")
        assert shard["estimate"]["cells"] == 12 and shard["estimate"]["source"] == "model"
        assert shard["estimate"]["gpu_minutes"] == pytest.approx(shard["estimate"]["minutes"] * shard["gpus"], abs=0.02)
    small, large = (s for s in doc["shards"] if s["preset"] == expected[1] and s["repeat"] == 1)
    assert "num_inference_steps=4" in small["argv"] and "width=512" in large["argv"]
    assert doc["totals"]["max_gpus"] == max(p.num_gpus for p in presets.load_presets() if p.name in expected)
    assert not (tmp_path / "sw").exists()  # a plan writes nothing


def test_the_hash_follows_what_the_shard_runs_and_an_earlier_run_replaces_the_estimate(tmp_path):
    document = {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}, "campaign": {"mode": "aa"}}
    one = sweep_spec.expand(document, "a.yaml").shards[0]
    same = sweep_spec.expand(json.loads(json.dumps(document)), "b.yaml").shards[0]
    other = sweep_spec.expand({**document, "campaign": {"mode": "aa", "rounds": 3}}, "a.yaml").shards[0]
    assert sweep_plan.shard_hash(one) == sweep_plan.shard_hash(same) != sweep_plan.shard_hash(other)
    assert sweep_plan.estimate(one, {})["source"] == "model"
    measured = sweep_plan.estimate(one, {"tiny-flux-cpu": 90.0})
    assert measured["source"] == "earlier_run" and measured["minutes"] == 1.5 and measured["time_limit_min"] == 8


def test_the_plan_marks_shards_this_host_cannot_run_and_says_how_to_drop_them(tmp_path):
    """What `run` would refuse (a GPU shard on a GPU-less host) is seen in the plan, with exit 1 and the way out."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has GPUs")
    spec = REPO_DATA / "sample_sweep.yaml"
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"), "--json")
    doc = run.document
    blocked = [s for s in doc["shards"] if not s["runnable"]]
    assert run.returncode == 1 and not doc["ok"] and doc["where"] == {**doc["where"], "executor": "local", "gpus": 0,
                                                                       "problem": None}
    assert blocked and all(s["gpus"] >= 1 and "this host has at most 0" in s["not_runnable_reason"] for s in blocked)
    assert all(s["runnable"] and s["not_runnable_reason"] is None for s in doc["shards"] if s["gpus"] == 0)
    assert all(s["preset"] in doc["where"]["hint"] for s in blocked) and "presets.filter.max_gpus: 0" in \
        doc["where"]["hint"]
    text = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"))
    assert text.returncode == 1 and "not runnable with --executor local" in text.stderr + text.stdout
    # the named GPU preset is not dropped by the filter: `run` says to take it out of presets.names
    named = write_spec(tmp_path / "named.yaml", {"schema": "sweep-spec.v1", "presets": {
        "names": ["flux"], "filter": {"tags": ["cpu"], "max_gpus": 0}}})
    refused = run_main("sweep_diffusion", "run", str(named), "--folder", str(tmp_path / "sw"), "--json")
    assert refused.returncode == 3 and "flux" in refused.document["error"]["hint"]
    assert "presets.names" in refused.document["error"]["hint"]


def test_a_plan_for_an_executor_missing_here_marks_every_shard_with_the_reason(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}})
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"), "--executor", "ray",
                   "--ray-address", "127.0.0.1:1", "--json")
    doc = run.document
    assert run.returncode == 1 and doc["where"]["gpus"] is None and doc["where"]["problem"]
    assert all(not s["runnable"] and s["not_runnable_reason"] == doc["where"]["problem"] for s in doc["shards"])
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("document, code, exit_code", [
    ({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu", "no-such-preset"]}},
     "sweep.unknown_preset", 2),
    ({"schema": "sweep-spec.v1", "presets": {"filter": {"tags": ["no-such-tag"]}}}, "sweep.no_presets", 2),
    ({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}, "campaign": {"mode": "abab"}},
     "input.schema_mismatch", 2),
    ({"schema": "sweep-spec.v1", "presets": {"names": ["flux"]}}, "sweep.shard_too_big", 3),  # this host: no GPU
])
def test_bad_specs_are_refused_before_anything_is_created(tmp_path, document, code, exit_code):
    if code == "sweep.shard_too_big" and shutil.which("nvidia-smi"):
        pytest.skip("this host has GPUs: a one-GPU preset fits")
    spec = write_spec(tmp_path / "s.yaml", document)
    run = run_main("sweep_diffusion", "run", str(spec), "--folder", str(tmp_path / "sw"), "--json")
    assert run.returncode == exit_code and run.document["error"]["code"] == code, run.document
    assert not (tmp_path / "sw").exists()


def test_no_slurm_on_path_and_no_ray_cluster_are_clear_errors_before_submission(tmp_path, monkeypatch):
    spec = write_spec(tmp_path / "s.yaml", {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}})
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    run = run_main("sweep_diffusion", "run", str(spec), "--folder", str(tmp_path / "sw"), "--executor", "slurm",
                   "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "sweep.no_slurm"
    assert "sbatch" in run.document["error"]["message"]
    run = run_main("sweep_diffusion", "run", str(spec), "--folder", str(tmp_path / "sw"), "--executor", "ray",
                   "--ray-address", "127.0.0.1:1", "--json")
    try:
        import ray  # noqa: F401
        expected = "sweep.no_ray_cluster"
    except ImportError:
        expected = "sweep.executor_missing"
    assert run.returncode == 3 and run.document["error"]["code"] == expected, run.document
    assert not (tmp_path / "sw").exists()


def test_a_folder_another_tool_made_is_refused_and_status_needs_a_sweep_folder(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}})
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("not ours")
    run = run_main("sweep_diffusion", "run", str(spec), "--folder", str(tmp_path / "busy"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "sweep.folder_not_ours"
    assert (tmp_path / "busy" / "keep.txt").read_text() == "not ours"
    run = run_main("sweep_diffusion", "status", "--folder", str(tmp_path / "busy"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "sweep.not_a_sweep_folder"


def test_a_shard_whose_worker_is_gone_is_failed_and_an_altered_result_is_pending(tmp_path):
    """What status reads from the files: a 'running' record whose worker process no longer exists, and a done shard
    whose result file no longer matches its recorded hash."""
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]},
                              "overrides": [{"seed": 1}, {"seed": 2}]}, "s.yaml")
    folder = tmp_path / "sw"
    sweep_state.prepare(folder, spec.name, spec.document)
    gone, done = spec.shards
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    import socket
    sweep_state.write_state(folder, gone.id, {"status": "running", "pid": dead, "host": socket.gethostname(),
                                              "attempt": 1, "hash": sweep_plan.shard_hash(gone)})
    _done_shard(folder, done, json.loads((TEST_FIXTURES / "bench-report" / "cpu-tiny-0.5.23.json").read_text()))
    run = run_main("sweep_diffusion", "status", "--folder", str(folder), "--json")
    rows = {r["id"]: r for r in run.document["shards"]}
    assert run.returncode == 1 and rows[gone.id]["status"] == "failed" and "gone" in rows[gone.id]["reason"]
    assert rows[done.id]["status"] == "done"
    result = sweep_state.shard_dir(folder, done.id) / "result.json"
    result.write_text('{"edited": true}')
    again = run_main("sweep_diffusion", "status", "--folder", str(folder), "--json")
    rows = {r["id"]: r for r in again.document["shards"]}
    assert rows[done.id]["status"] == "pending" and "altered" in rows[done.id]["reason"]


@pytest.mark.parametrize("state, words", [
    ({"status": "running", "pid": "abc"}, ["damaged", "pid"]),
    ({"status": "running", "pid": 10**20}, ["damaged", "pid"]),
    ({"status": "running", "pid": 10**30}, ["damaged", "31 digits"]),
    ({"status": "done", "attempt": 1.5}, ["damaged", "attempt"]),
    ({"status": "finished"}, ["damaged", "status"]),
    ([{"status": "done"}], ["damaged"]),
    ({"status": "running", "pid": 1, "exit_code": float("nan")}, ["damaged", "NaN"]),
])
def test_a_damaged_state_file_fails_its_shard_with_the_reason_on_status_merge_and_resume(tmp_path, state, words):
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}}, "s.yaml")
    folder = tmp_path / "sw"
    sweep_state.prepare(folder, spec.name, spec.document)
    directory = sweep_state.shard_dir(folder, spec.shards[0].id)
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps(state))  # json.dumps writes NaN: the tampered file has it
    status = run_main("sweep_diffusion", "status", "--folder", str(folder), "--json")
    row = status.document["shards"][0]
    assert status.returncode == 1 and row["status"] == "failed", status.document
    assert all(w in row["reason"] for w in words), row["reason"]
    merged = run_main("sweep_diffusion", "merge", "--folder", str(folder), "--json")
    assert merged.returncode == 1 and merged.document["failures"][0]["reason"] == row["reason"]
    todo, skipped = sweep_driver.jobs_to_run(folder, spec)  # resume runs it again
    assert [j.shard_id for j in todo] == [spec.shards[0].id] and not skipped


def test_a_result_that_is_no_bench_report_is_a_failed_shard_even_when_its_hash_matches(tmp_path):
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}}, "s.yaml")
    folder = tmp_path / "sw"
    sweep_state.prepare(folder, spec.name, spec.document)
    _done_shard(folder, spec.shards[0], {"schema": "bench-report.v1", "ok": True})  # no verdict, no numbers
    merged = run_main("sweep_diffusion", "merge", "--folder", str(folder), "--json")
    row = merged.document["shards"][0]
    assert merged.returncode == 1 and not merged.document["ok"]
    assert row["status"] == "failed" and "not a valid bench report" in row["reason"] and row["verdict"] is None


def test_a_folder_whose_kept_spec_is_damaged_is_refused_not_expanded(tmp_path):
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps({"made_by": "sweep_diffusion", "name": "x",
                                                   "spec": {"presets": {"names": ["tiny-flux-cpu"]}, "repeats": -3}}))
    for command in ("status", "merge"):
        run = run_main("sweep_diffusion", command, "--folder", str(folder), "--json")
        assert run.returncode == 2 and run.document["error"]["code"] == "sweep.not_a_sweep_folder"
        assert "damaged" in run.document["error"]["message"]


def _done_shard(folder: Path, shard, report: dict) -> None:
    """The shard finished: its result is this bench report, recorded with its hash as the worker records it."""
    from sgl_diffusion_bench import fileio
    result = sweep_state.shard_dir(folder, shard.id) / "result.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(report))
    sweep_state.write_state(folder, shard.id, {"status": "done", "attempt": 1, "hash": sweep_plan.shard_hash(shard),
                                               "result_sha256": "sha256:" + fileio.sha256_file(result)})


MINI_ENGINE = TEST_FIXTURES / "engine-baselines-mini" / "sglang"


def _nightly_engine(tmp_path: Path) -> Path:
    """An engine folder whose h100.json has a scenario the H200 campaign matches: built from the installed engine
    when it ships perf baselines, else the small copy of it kept under tests/fixtures."""
    from test_engine_baselines import _engine_with_a_28_step_flux_scenario, _installed_engine
    installed = _installed_engine()
    return _engine_with_a_28_step_flux_scenario(tmp_path, installed) if installed else MINI_ENGINE


def test_the_kept_mini_engine_is_what_the_installed_engine_gives(tmp_path):
    from test_engine_baselines import _engine_with_a_28_step_flux_scenario, _installed_engine
    from sgl_diffusion_bench.engine import engine_scenarios
    from sgl_diffusion_bench.judging import engine_baselines
    if _installed_engine() is None:
        pytest.skip("no installed engine with perf baselines to check the kept copy against")
    built = _engine_with_a_28_step_flux_scenario(tmp_path, _installed_engine())
    kept, made = (engine_baselines.load_baselines(r, "h100") for r in (MINI_ENGINE, built))
    assert kept["scenarios"]["flux_image_t2i_28_steps"] == made["scenarios"]["flux_image_t2i_28_steps"]
    assert kept["tolerances"] == made["tolerances"]
    case = "flux_image_t2i_28_steps"
    assert engine_scenarios.read_scenarios(MINI_ENGINE)[case] == engine_scenarios.read_scenarios(built)[case]
    assert engine_baselines.checker_constants(MINI_ENGINE).items() <= engine_baselines.checker_constants(built).items()
    assert len(engine_baselines.checker_constants(MINI_ENGINE)) == 4


def test_merge_compares_each_shard_with_the_nightly_baseline_of_its_scenario_and_gpu_class(tmp_path):
    """Three done shards: the real H200 campaign (an H200 has no engine baseline class), the same request on a GPU
    named H100 (judged against the one scenario that measured it, exactly as compare_engine_baseline judges the same
    report), and the real CPU tiny run (no GPU class): only the H100 one is compared, the others say why not."""
    root = _nightly_engine(tmp_path)
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]},
                              "overrides": [{"seed": 1}, {"seed": 2}, {"seed": 3}]}, "s.yaml")
    folder = tmp_path / "sw"
    sweep_state.prepare(folder, spec.name, spec.document)
    h200, h100, cpu = spec.shards
    from test_engine_baselines import CPU_TINY_REPORT, H200_CAMPAIGN
    campaign = json.loads(H200_CAMPAIGN.read_text())
    _done_shard(folder, h200, campaign)
    renamed = json.loads(H200_CAMPAIGN.read_text())
    for gpu in renamed["environment"]["gpus"]:
        gpu["name"] = "NVIDIA H100 80GB HBM3"
    _done_shard(folder, h100, renamed)
    _done_shard(folder, cpu, json.loads(CPU_TINY_REPORT.read_text()))
    run = run_main("sweep_diffusion", "merge", "--folder", str(folder), "--engine-dir", str(root), "--json")
    rows = {r["id"]: r for r in run.document["shards"]}
    assert set(rows[h200.id]["nightly"]) == {"eager", "bcg"}
    for found in rows[h200.id]["nightly"].values():
        assert found["status"] == "no_baseline" and "NVIDIA H200" in found["reason"] and found["e2e_ms"] is None
    assert all(c["status"] == "no_baseline" and "a CPU run" in c["reason"] for c in rows[cpu.id]["nightly"].values())
    judged = rows[h100.id]["nightly"]["eager"]
    assert judged["gpu_class"] == "h100" and judged["scenario"] == "flux_image_t2i_28_steps"
    path = tmp_path / "h100-named.json"
    path.write_text(json.dumps(renamed))
    single = run_main("compare_engine_baseline", "--report", str(path), "--engine-dir", str(root), "--json").document
    e2e = next(r for r in single["result"]["rows"] if r["metric"] == "e2e_ms")
    assert judged["status"] == {"within_baseline": "pass", "over_baseline": "fail"}[single["result"]["verdict"]]
    assert (judged["baseline_e2e_ms"], judged["e2e_ms"], judged["change_pct"], judged["limit_ms"]) == \
        (e2e["expected"], e2e["actual"], e2e["change_pct"], e2e["limit"]) and judged["over"] == single["result"]["over"]
    baselines = json.loads((root / "multimodal_gen/test/server/perf_baselines/h100.json").read_text())
    assert judged["baseline_e2e_ms"] == baselines["scenarios"]["flux_image_t2i_28_steps"]["expected_e2e_ms"]
    markdown = (folder / "sweep-report.md").read_text()
    assert "## Nightly baseline" in markdown and f"e2e {judged['e2e_ms']:.1f} ms vs baseline" in markdown
    assert f"{h200.id} eager: no_baseline: no baseline for this GPU" in markdown
    # the shard's one change and interval are its campaign's, named by preset and override, with its host load
    from sgl_diffusion_bench.sweep import merge_render
    row, comparison = rows[h200.id], campaign["summary"]["comparison"]
    figures = comparison["metrics"][comparison["primary_metric"]]
    assert (row["change_pct"], row["ci_low_pct"], row["ci_high_pct"], row["confidence"]) == \
        (figures["change_pct"], figures["ci_low_pct"], figures["ci_high_pct"], comparison["bootstrap"]["confidence"])
    assert f"| {h200.id} (seed=1) | done | {row['verdict']} | {merge_render.change_cell(row)} |" in markdown
    assert merge_render.change_cell(row) == (f"{figures['change_pct']:+.2f}% (95% interval "
                                             f"[{figures['ci_low_pct']:+.2f}%, {figures['ci_high_pct']:+.2f}%])")
    assert row["arms"]["eager"]["e2e_ms"] == campaign["summary"]["arms"]["eager"]["e2e_ms"]["mean"]
    host = campaign["summary"]["host_contention"]
    assert row["host"] == {"sampled_cells": host["sampled_cells"], "contended_cells": host["contended_cells"]}
    assert f"| {cpu.id} (seed=3) | done |" in markdown and "| 0/1 contended |" in markdown
    assert set(run.document["artifacts"]["plots"]) == {"eager", "bcg"}  # the H200 shards measured memory
    assert set(run.document["artifacts"]["plots_absent"]) == {"run"}  # the CPU shard's arm: no empty plot
    assert "No plot for arm run: no shard measured allocated memory for it (a CPU run records none)." in markdown


def test_an_arm_over_its_nightly_baseline_fails_the_sweep(tmp_path):
    """A sweep used as a nightly check: the same H100-named campaign against a baseline that expects half its e2e
    is a regression, listed in baseline_regressions and in the Markdown, and merge exits 1 with ok false."""
    import shutil
    root = tmp_path / "engine"
    shutil.copytree(_nightly_engine(tmp_path / "built"), root)
    baseline_file = root / "multimodal_gen/test/server/perf_baselines/h100.json"
    baselines = json.loads(baseline_file.read_text())
    scenario = baselines["scenarios"]["flux_image_t2i_28_steps"]
    scenario["expected_e2e_ms"] = scenario["expected_e2e_ms"] / 2
    baseline_file.write_text(json.dumps(baselines))
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}}, "s.yaml")
    folder = tmp_path / "sw"
    sweep_state.prepare(folder, spec.name, spec.document)
    from test_engine_baselines import H200_CAMPAIGN
    renamed = json.loads(H200_CAMPAIGN.read_text())
    for gpu in renamed["environment"]["gpus"]:
        gpu["name"] = "NVIDIA H100 80GB HBM3"
    _done_shard(folder, spec.shards[0], renamed)
    run = run_main("sweep_diffusion", "merge", "--folder", str(folder), "--engine-dir", str(root), "--json")
    assert run.returncode == 1 and run.document["ok"] is False and run.document["failures"] == []
    row = run.document["shards"][0]
    failed = sorted(arm for arm, c in row["nightly"].items() if c["status"] == "fail")
    assert failed and sorted(r["arm"] for r in run.document["baseline_regressions"]) == failed
    assert all(r["id"] == row["id"] and r["scenario"] == "flux_image_t2i_28_steps" and r["change_pct"] > 0
               for r in run.document["baseline_regressions"])
    markdown = (folder / "sweep-report.md").read_text()
    assert "## Over the nightly baseline (the sweep fails)" in markdown and f"- {row['id']} {failed[0]}:" in markdown
