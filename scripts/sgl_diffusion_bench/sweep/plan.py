"""A sweep's plan: per shard its bench command, a hash of what it runs, the GPUs it needs and its estimated cost.

The estimate is a model, not a measurement, and says so: engine loads and cells per campaign times a per-task cell
time (CPU presets: the tiny model's), replaced by the measured wall time of an earlier run of the same preset where
the sweep folder has one (``source: earlier_run``).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from . import spec as sweep_spec

BENCH_MODULE = "sgl_diffusion_bench.cli.bench"
# Seconds per engine load and per measured cell by where the preset runs and what it makes: a cost model for the plan
# and the Slurm time limit, refined by earlier runs (benchmarks/sweep_cost_model.py documents the figures).
LOAD_S = {"cpu": 60.0, "gpu": 150.0}
CELL_S = {"cpu": 2.0, "t2i": 15.0, "i2i": 15.0, "ti2i": 15.0, "t2v": 120.0, "i2v": 120.0, "ti2v": 120.0}
DEFAULT_CELL_S = 30.0
MATRIX_LEVELS = 3  # the quality/BCG matrix runs one A/B/B/A campaign per quality level (0.5.23: three)
TIME_LIMIT_FACTOR, TIME_LIMIT_MARGIN_MIN = 2.0, 5


def bench_args(shard: sweep_spec.Shard) -> list[str]:
    """The bench_diffusion_denoise arguments of a shard, output folder aside (the folder decides that)."""
    c = shard.campaign
    args = ["--model", shard.preset.name, "--campaign", c["mode"], "--label", shard.id, "--engine", c["engine"]]
    if "until_verdict" in c:
        args.append("--until-verdict")
        budget = c["until_verdict"]
        if "budget_rounds" in budget:
            args += ["--budget-rounds", str(budget["budget_rounds"])]
        if "budget_minutes" in budget:
            args += ["--budget-minutes", str(budget["budget_minutes"])]
    elif "rounds" in c and c["mode"] != "single":
        args += ["--rounds", str(c["rounds"])]
    for key, flag in (("quality", "--quality"), ("arm_a_args", "--arm-a-args"), ("arm_b_args", "--arm-b-args"),
                      ("threshold_pct", "--threshold-pct"), ("samples", "--samples"),
                      ("cell_timeout_s", "--cell-timeout-s"), ("extra_args", "--extra-args")):
        if key in c:
            args += [flag, str(c[key])]
    for field, value in shard.overrides.items():
        args += ["--override", f"{field}={value}"]
    return args + ["--json"]


def command(shard: sweep_spec.Shard, output_dir: Path | str, python: str | None = None) -> list[str]:
    """The shard's command; the executors pass "{python}" and "{output_dir}", filled in where the shard runs."""
    return [python or sys.executable, "-m", BENCH_MODULE, *bench_args(shard), "--output-dir", str(output_dir)]


def shard_hash(shard: sweep_spec.Shard) -> str:
    """What decides a shard's result: its bench arguments and its preset as the catalog defines it now."""
    preset = {k: v for k, v in shard.preset.to_json().items() if k != "position"}
    text = json.dumps({"bench_args": bench_args(shard), "preset": preset}, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def cells_of(campaign: dict[str, Any]) -> int:
    if campaign["mode"] == "single":
        return 1
    rounds = campaign.get("until_verdict", {}).get("budget_rounds", 8) if "until_verdict" in campaign \
        else campaign.get("rounds", 2)
    return 4 * rounds * (MATRIX_LEVELS if campaign["mode"] == "matrix" else 1) * campaign.get("samples", 1)


def estimate(shard: sweep_spec.Shard, earlier_wall_s: dict[str, float]) -> dict[str, Any]:
    """Minutes and GPU-minutes one shard should take; an earlier run of the same hash or preset beats the model."""
    cells = cells_of(shard.campaign)
    measured = earlier_wall_s.get(shard.preset.name)
    if measured is not None:
        seconds, source = measured, "earlier_run"
    else:
        where = "cpu" if shard.num_gpus == 0 else "gpu"
        cell_s = CELL_S["cpu"] if where == "cpu" else CELL_S.get(shard.preset.task, DEFAULT_CELL_S)
        loads = cells if shard.campaign["engine"] == "cold" else (2 if shard.campaign["mode"] != "aa" else 1)
        if shard.campaign["mode"] == "single":
            loads = 1
        seconds, source = loads * LOAD_S[where] + cells * cell_s, "model"
    minutes = round(seconds / 60, 2)
    return {"minutes": minutes, "gpu_minutes": round(minutes * shard.num_gpus, 2), "cells": cells, "source": source,
            "time_limit_min": int(math.ceil(minutes * TIME_LIMIT_FACTOR)) + TIME_LIMIT_MARGIN_MIN}


def plan_document(spec: sweep_spec.Spec, folder: Path, earlier_wall_s: dict[str, float] | None = None,
                  python: str | None = None) -> dict[str, Any]:
    """The sweep-plan.v1 payload (without the envelope)."""
    from . import state  # the folder layout

    rows = []
    for shard in spec.shards:
        argv = command(shard, state.attempt_dir(folder, shard.id, 1), python)
        rows.append({"id": shard.id, "preset": shard.preset.name, "task": shard.preset.task,
                     "overrides": shard.overrides, "repeat": shard.repeat, "gpus": shard.num_gpus,
                     "hash": shard_hash(shard), "argv": argv, "command": shlex.join(argv),
                     "estimate": estimate(shard, earlier_wall_s or {})})
    total_min = round(sum(r["estimate"]["minutes"] for r in rows), 2)
    return {"name": spec.name, "spec": spec.source, "folder": str(folder), "campaign": spec.shards[0].campaign,
            "shards": rows, "totals": {"shards": len(rows), "minutes": total_min,
                                        "gpu_minutes": round(sum(r["estimate"]["gpu_minutes"] for r in rows), 2),
                                        "max_gpus": max(r["gpus"] for r in rows)}}
