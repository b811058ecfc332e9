"""plan / run / status / cancel of a sweep: the spec expanded, the folder read, the executor called."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .. import contract, fileio, inputs, progress
from . import executors, plan as sweep_plan, spec as sweep_spec, state as sweep_state, watch

PLACEHOLDER_DIR = "{output_dir}"


def _earlier_wall_s(folder: Path, spec: sweep_spec.Spec) -> dict[str, float]:
    walls: dict[str, float] = {}
    for shard in spec.shards:
        recorded = sweep_state.read_state(folder, shard.id) or {}
        if recorded.get("status") == "done" and recorded.get("wall_s"):
            walls.setdefault(shard.preset.name, float(recorded["wall_s"]))
    return walls


def plan(spec_path: str, folder: Path, executor: str, options: executors.Options) -> dict[str, Any]:
    """The plan, each shard marked runnable or not where `run` with this executor would put it (this host's GPUs, the
    scheduler's largest node), with the reason: what `run` would refuse is seen before anything starts."""
    spec = sweep_spec.load(spec_path)
    document = sweep_plan.plan_document(spec, folder, _earlier_wall_s(folder, spec))
    module = executors.get(executor)
    try:
        found, problem = module.capacity(options), None
    except contract.PreconditionError as exc:  # no scheduler, no cluster: run would refuse every shard
        found, problem = {"gpus": None}, f"{exc.message} ({exc.hint})" if exc.hint else exc.message
    too_big = []
    for row in document["shards"]:
        reason = problem or executors.not_runnable(row["gpus"], found["gpus"], module.WHERE)
        row["runnable"], row["not_runnable_reason"] = reason is None, reason
        if reason and not problem:
            too_big.append(row["preset"])
    document["where"] = {"executor": executor, "gpus": found["gpus"], "problem": problem,
                         "hint": executors.drop_hint(too_big, found["gpus"]) if too_big else None}
    return document


def spec_of_folder(folder: Path) -> sweep_spec.Spec:
    mark = folder / sweep_state.MARK
    recorded = inputs.load_object_or_none(mark)
    if recorded is None or not isinstance(recorded.get("spec"), dict):
        raise contract.UsageError("sweep.not_a_sweep_folder", f"{folder} has no readable {sweep_state.MARK} with "
                                  "the sweep's spec", "give the --folder of an earlier `sweep_diffusion run`")
    try:
        document = sweep_spec.checked(recorded["spec"], f"{mark} (its spec)")
    except contract.InputError as exc:
        raise contract.UsageError("sweep.not_a_sweep_folder", f"{folder}: the spec it keeps is damaged: "
                                  f"{exc.message}", "run the sweep again into a new --folder from its spec file"
                                  ) from None
    return sweep_spec.expand(document, str(mark))


def _reconcile(folder: Path) -> None:
    """Ask Slurm about shards it was given, where it can be asked (a task that vanished is a failed shard)."""
    jobs = executors.get("slurm").recorded_jobs(folder)
    if jobs and shutil.which("squeue"):
        try:
            executors.get("slurm").reconcile(folder, jobs)
        except contract.ToolError:
            pass  # slurmctld unreachable now: the files say what they say


def status(folder: Path, spec: sweep_spec.Spec | None = None) -> dict[str, Any]:
    spec = spec or spec_of_folder(folder)
    _reconcile(folder)
    rows = []
    for shard in spec.shards:
        found = sweep_state.shard_status(folder, shard.id, sweep_plan.shard_hash(shard))
        recorded = found["state"] or {}
        rows.append({"id": shard.id, "preset": shard.preset.name, "gpus": shard.num_gpus, "status": found["status"],
                     "reason": found["reason"], "attempts": found["attempts"],
                     "executor": recorded.get("executor"), "job_id": recorded.get("job_id"),
                     "wall_s": recorded.get("wall_s"), "exit_code": recorded.get("exit_code")})
    counts = {s: sum(r["status"] == s for r in rows) for s in sweep_state.STATUSES}
    return {"name": spec.name, "folder": str(folder), "shards": rows, "counts": counts}


def jobs_to_run(folder: Path, spec: sweep_spec.Spec) -> tuple[list[executors.Job], list[str]]:
    """The shards to (re)run now: pending and failed; done ones (same hash, intact result) and running ones stay."""
    estimates = _earlier_wall_s(folder, spec)
    todo, skipped = [], []
    for shard in spec.shards:
        digest = sweep_plan.shard_hash(shard)
        found = sweep_state.shard_status(folder, shard.id, digest) if folder.exists() else {"status": "pending"}
        if found["status"] in ("done", "running"):
            skipped.append(shard.id)
            continue
        argv = sweep_plan.command(shard, PLACEHOLDER_DIR, "{python}")
        estimate = sweep_plan.estimate(shard, estimates)
        todo.append(executors.Job(shard.id, shard.preset.name, tuple(argv), digest, shard.num_gpus,
                                  estimate["time_limit_min"], estimate["minutes"] * 60))
    return todo, skipped


def run(spec_path: str, folder: Path, executor: str, options: executors.Options) -> dict[str, Any]:
    spec = sweep_spec.load(spec_path)
    todo, skipped = jobs_to_run(folder, spec)
    capacity = executors.preflight(executor, todo, options) if todo else {}  # before the folder or any job
    sweep_state.prepare(folder, spec.name, spec.document)
    if todo:
        shard_time = watch.clock_text(sum(j.estimate_s for j in todo))
        progress.say(f"{spec.name}: {len(todo)} shard(s) to run with --executor {executor}, "
                     f"{len(skipped)} done or running already; about {shard_time} of shard time estimated",
                     source="sweep")
        outcome = _submit(folder, todo, executor, options)
    else:
        outcome = {"executor": executor, "submitted": [], "job_ids": {}}
    document = status(folder, spec)
    document["run"] = {**outcome, "skipped": skipped, "capacity": capacity, "waited": options.wait}
    return document


def _submit(folder: Path, todo: list[executors.Job], executor: str, options: executors.Options) -> dict[str, Any]:
    """The executor's submit, with a watcher saying each shard event while it waits (none for --no-wait)."""
    def work() -> dict[str, Any]:
        return executors.get(executor).submit(folder, todo, options)

    if not options.wait:
        return work()
    slots = options.parallel if executor == "local" else (options.max_parallel or len(todo))
    return watch.watching(watch.Watcher(folder, {j.shard_id: j.estimate_s for j in todo}, slots), work)


def cancel(folder: Path, shard_ids: list[str]) -> dict[str, Any]:
    """Ask for shards to stop: scancel for Slurm tasks, a request file the Ray driver acts on (ray.cancel)."""
    spec = spec_of_folder(folder)
    known = {s.id for s in spec.shards}
    unknown = sorted(set(shard_ids) - known)
    if unknown:
        raise contract.UsageError("sweep.unknown_shard", f"no shard {', '.join(unknown)} in {folder}",
                                  "see the shard ids with: sweep_diffusion status --folder FOLDER")
    asked = []
    for shard_id in shard_ids:
        recorded = sweep_state.read_state(folder, shard_id) or {}
        if recorded.get("status") not in ("pending", "running"):
            continue
        if recorded.get("executor") == "slurm" and recorded.get("job_id"):
            executors.get("slurm").cancel(recorded["job_id"])
        else:
            fileio.atomic_write_text(sweep_state.shard_dir(folder, shard_id) / "cancel", contract.utc_now())
        asked.append(shard_id)
    document = status(folder, spec)
    document["cancelled"] = asked
    return document
