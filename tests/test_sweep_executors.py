"""sweep_diffusion's executors against real things (issue 27): a 4-shard sweep of the tiny CPU model run here
(--executor local), the same sweep through submitit on a real single-node Slurm cluster started for the tests
(tests/slurm_cluster.py), and the same sweep on a local Ray cluster (`ray start --head` on 127.0.0.1): the merged
reports match shard for shard (same cells valid, same output hashes). On Slurm and on Ray one shard is cancelled
while it runs: it is a failed shard with the reason, and `run` again completes it without re-running the others.

Each shard is the cheapest campaign the bench accepts (`single`: one engine, one cell of 2 steps at 64x64)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ray_cluster as ray_cluster_helper
import slurm_cluster
from conftest import SCRIPTS, assert_announced_and_summarised, run_script
from sgl_diffusion_bench import presets
from sgl_diffusion_bench.engine import tiny_model

pytestmark = [pytest.mark.engine, pytest.mark.torch]

SPEC = {"schema": "sweep-spec.v1", "name": "tiny4", "presets": {"names": ["tiny-flux-cpu"]},
        "campaign": {"mode": "single"}, "overrides": [{"seed": 1}, {"seed": 2}], "repeats": 2}
SHARDS = ["tiny-flux-cpu-o1-r1", "tiny-flux-cpu-o1-r2", "tiny-flux-cpu-o2-r1", "tiny-flux-cpu-o2-r2"]
# Slurm and Ray run one repeat of each seed: the executor is under test there, and the local sweep's shards of the
# same ids are what they must match (a repeat's bytes are checked locally).
CLUSTER_SPEC = {**SPEC, "repeats": 1}
CLUSTER_SHARDS = ["tiny-flux-cpu-o1-r1", "tiny-flux-cpu-o2-r1"]
TIMEOUT_S = 1500


def sweep(*args: str, env: dict[str, str] | None = None, stderr: list[str] | None = None) -> dict:
    run = run_script("sweep_diffusion", *args, "--json", env=env, timeout=TIMEOUT_S)
    assert run.document["schema"] != "error.v1", run.document
    if stderr is not None:
        stderr += run.stderr.splitlines()
    return run.document


def write_spec(root: Path, document: dict) -> Path:
    path = root / "spec.yaml"
    path.write_text(json.dumps(document))
    return path


def by_id(report: dict) -> dict[str, dict]:
    return {row["id"]: row for row in report["shards"]}


def cell_key(row: dict) -> list:
    return [(c["arm"], c["status"], c["outputs_sha256"]) for c in row["cells"]]


def wait_until_running(folder: Path, shard_ids: list[str], timeout_s: float = 600) -> str:
    """The first of these shards whose bench has started (its worker wrote 'running' and the bench its first line)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for shard_id in shard_ids:
            directory = folder / "shards" / shard_id
            try:
                state = json.loads((directory / "state.json").read_text())
            except (OSError, ValueError):
                continue
            log = directory / f"attempt-{state.get('attempt')}.stderr.log"
            if state.get("status") == "running" and log.is_file() and log.stat().st_size:
                return shard_id
        time.sleep(0.5)
    pytest.fail(f"no shard of {shard_ids} started within {timeout_s} s")


@pytest.fixture(scope="module")
def tiny_env() -> dict[str, str]:
    """One tiny model for every executor (Ray's tasks run in a copy of the bundle: the same model, not a rebuild)."""
    return {"DIFFUSION_BENCH_TINY_MODEL_DIR": str(tiny_model.default_cache_dir())}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory, tiny_env):
    root = tmp_path_factory.mktemp("sweep-local")
    spec, folder = write_spec(root, SPEC), root / "sweep"
    started, said, merge_said = time.monotonic(), [], []
    ran = sweep("run", str(spec), "--folder", str(folder), "--parallel", "2", env=tiny_env, stderr=said)
    elapsed = time.monotonic() - started
    again = sweep("run", str(spec), "--folder", str(folder), env=tiny_env)
    return {"spec": spec, "folder": folder, "run": ran, "again": again, "run_s": elapsed, "stderr": said,
            "report": sweep("merge", "--folder", str(folder), stderr=merge_said), "merge_stderr": merge_said}


def failures(folder: Path, document: dict) -> str:
    """Each shard not done, with its reason and the end of its bench's stderr: what a red CI run needs to say."""
    lines = []
    for row in document["shards"]:
        if row["status"] != "done":
            log = folder / "shards" / row["id"] / f"attempt-{row['attempts']}.stderr.log"
            tail = log.read_text(errors="replace").splitlines()[-25:] if log.is_file() else ["(no stderr log)"]
            lines += [f"{row['id']}: {row['status']}: {row['reason']}", *(f"    {t}" for t in tail)]
    return "\n".join(lines)


def test_a_local_sweep_runs_every_shard_and_merges_one_report(local_sweep):
    ran, report = local_sweep["run"], local_sweep["report"]
    assert ran["ok"] and ran["counts"] == {"done": 4, "running": 0, "failed": 0, "pending": 0}, \
        failures(local_sweep["folder"], ran)
    assert sorted(ran["run"]["submitted"]) == SHARDS and ran["run"]["executor"] == "local"
    assert report["schema"] == "sweep-report.v1" and report["ok"] and report["failures"] == []
    rows = by_id(report)
    assert sorted(rows) == SHARDS and all(r["valid"] and r["status"] == "done" for r in rows.values())
    hashes = {i: {h for c in r["cells"] for h in c["outputs_sha256"]} for i, r in rows.items()}
    assert all(len(h) == 1 for h in hashes.values())
    # same seed, same bytes (a repeat); another seed, other bytes
    assert hashes[SHARDS[0]] == hashes[SHARDS[1]] != hashes[SHARDS[2]] == hashes[SHARDS[3]]
    assert all(r["arms"]["run"]["e2e_ms"] > 0 and r["arms"]["run"]["peak_memory_mb"] is None for r in rows.values())
    folder = local_sweep["folder"]
    markdown = Path(report["artifacts"]["markdown"]).read_text()
    assert all(f"| {s} (" in markdown for s in SHARDS) and markdown.count("| done |") == len(SHARDS)
    # a CPU run records no allocated memory: no empty plot, and one line says why
    assert report["artifacts"]["plots"] == {} and "CPU" in report["artifacts"]["plots_absent"]["run"]
    assert "No plot for arm run: no shard measured allocated memory" in markdown
    assert json.loads((folder / "sweep-report.json").read_text())["shards"] == report["shards"]


def test_the_run_says_each_shard_event_in_order_and_ends_with_its_summary(local_sweep):
    said = assert_announced_and_summarised("\n".join(local_sweep["stderr"]), "sweep_diffusion")
    first = said.index(next(line for line in said if line.startswith("[sweep] tiny4: 4 shard(s) to run")))
    assert not any(line.startswith("[progress] [") for line in said)  # one tag per line
    for shard_id in SHARDS:
        events = [i for word in ("started (attempt 1)", "cell 1/1 run: VALID", "done in ")
                  for i, line in enumerate(said) if f"[sweep] {shard_id}: {word}" in line]
        assert len(events) == 3 and first < events[0] < events[1] < events[2], (shard_id, said)
        assert all("ETA ~" in said[i] and "elapsed" in said[i] for i in events)
    assert said[-1].startswith("[sweep_diffusion] tiny4: 4 shard(s) run, 0 skipped in ") and "4 done" in said[-1]
    assert "sweep_diffusion.py merge --folder" in said[-1]
    assert local_sweep["merge_stderr"][-1].startswith("[sweep_diffusion] tiny4: 4 shard(s) merged, 0 not done")
    assert local_sweep["merge_stderr"][-1].endswith("sweep-report.md")


def test_running_a_finished_sweep_again_runs_nothing(local_sweep):
    again = local_sweep["again"]
    assert again["ok"] and again["run"]["submitted"] == [] and sorted(again["run"]["skipped"]) == SHARDS
    assert all(r["attempts"] == 1 for r in again["shards"])


def _same_as_local(report: dict, local: dict, shard_ids: list[str]) -> None:
    rows, reference = by_id(report), by_id(local)
    assert sorted(rows) == sorted(shard_ids)
    for shard_id in shard_ids:
        assert rows[shard_id]["valid"] == reference[shard_id]["valid"] is True
        assert cell_key(rows[shard_id]) == cell_key(reference[shard_id]), shard_id


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_cluster.cluster(Path(tmp_path_factory.mktemp("slurm")), cpus=os.cpu_count() or 2) as env:
        yield env


def test_the_same_sweep_through_slurm_matches_and_a_cancelled_shard_is_completed_by_a_second_run(
        slurm, local_sweep, tiny_env, tmp_path):
    env = {**slurm, **tiny_env}
    spec, folder = write_spec(tmp_path, CLUSTER_SPEC), tmp_path / "sweep"
    submitted = sweep("run", str(spec), "--folder", str(folder), "--executor", "slurm", "--no-wait",
                      "--max-parallel", "2", env=env)
    job_ids = submitted["run"]["job_ids"]
    assert sorted(job_ids) == CLUSTER_SHARDS
    assert len({j.split("_")[0] for j in job_ids.values()}) == 1  # one job array
    victim = wait_until_running(folder, CLUSTER_SHARDS)
    cancelled = sweep("cancel", "--folder", str(folder), "--shard", victim, env=env)
    assert cancelled["cancelled"] == [victim]
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        status = sweep("status", "--folder", str(folder), env=env)
        if not status["counts"]["running"] and not status["counts"]["pending"]:
            break
        time.sleep(2)
    rows = by_id(status)
    assert rows[victim]["status"] == "failed" and rows[victim]["reason"].startswith("cancelled"), rows[victim]
    assert all(rows[s]["status"] == "done" for s in CLUSTER_SHARDS if s != victim), rows
    again = sweep("run", str(spec), "--folder", str(folder), "--executor", "slurm", env=env)
    assert again["ok"] and again["run"]["submitted"] == [victim], again["run"]
    assert by_id(again)[victim]["attempts"] == 2
    assert all(by_id(again)[s]["attempts"] == 1 for s in CLUSTER_SHARDS if s != victim)
    report = sweep("merge", "--folder", str(folder), env=env)
    assert report["ok"]
    _same_as_local(report, local_sweep["report"], CLUSTER_SHARDS)


@pytest.fixture(scope="module")
def ray_cluster():
    if not ray_cluster_helper.ray_bin().is_file():
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (requirements/tools.txt installs it)")
        pytest.skip("ray is not installed: pip install '.[ray]' (make setup installs it)")
    with ray_cluster_helper.head() as address:
        yield address


def test_the_same_sweep_on_ray_matches_and_a_cancelled_task_is_completed_by_a_second_run(
        ray_cluster, local_sweep, tiny_env, tmp_path):
    spec = write_spec(tmp_path, CLUSTER_SPEC)
    folder, shards = tmp_path / "sweep", CLUSTER_SHARDS
    argv = [sys.executable, str(SCRIPTS / "sweep_diffusion.py"), "run", str(spec), "--folder", str(folder),
            "--executor", "ray", "--ray-address", ray_cluster, "--json"]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **tiny_env})
    victim = wait_until_running(folder, shards)
    assert sweep("cancel", "--folder", str(folder), "--shard", victim)["cancelled"] == [victim]
    out, err = driver.communicate(timeout=TIMEOUT_S)
    first = json.loads(out)
    assert driver.returncode == 1 and first["schema"] == "sweep-status.v1", err[-3000:]
    rows = by_id(first)
    assert rows[victim]["status"] == "failed" and "cancel" in rows[victim]["reason"].lower(), rows[victim]
    assert all(rows[s]["status"] == "done" for s in shards if s != victim), rows
    again = sweep("run", str(spec), "--folder", str(folder), "--executor", "ray", "--ray-address", ray_cluster,
                  env=tiny_env)
    assert again["ok"] and again["run"]["submitted"] == [victim], again["run"]
    report = sweep("merge", "--folder", str(folder))
    assert report["ok"]
    _same_as_local(report, local_sweep["report"], shards)


@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_a_shard_needing_more_gpus_than_any_node_has_is_refused_before_submission(executor, request, tmp_path):
    """The test clusters' nodes have no GPU: a GPU preset fits on none, and nothing reaches the scheduler."""
    spec = write_spec(tmp_path, {"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu", "flux"]}})
    if executor == "slurm":
        env, extra = request.getfixturevalue("slurm"), []
        before = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], capture_output=True, text=True,
                                env={**os.environ, **env}).stdout
    else:
        env, extra = {}, ["--ray-address", request.getfixturevalue("ray_cluster")]
    run = run_script("sweep_diffusion", "run", str(spec), "--folder", str(tmp_path / "sw"), "--executor", executor,
                     *extra, "--json", env=env)
    assert run.returncode == 3 and run.document["error"]["code"] == "sweep.shard_too_big", run.document
    needs = presets.get_preset("flux").num_gpus
    assert needs >= 1 and f"flux-o1-r1 ({needs})" in run.document["error"]["message"]
    assert "tiny-flux-cpu" not in run.document["error"]["message"] and not (tmp_path / "sw").exists()
    if executor == "slurm":
        assert subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], capture_output=True, text=True,
                              env={**os.environ, **env}).stdout == before
