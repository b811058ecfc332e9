"""What a report records so a run can be repeated and its files found: the Reproduce commands (with every
environment change the campaign made: the CPU adapter's PYTHONPATH, the isolated cache, offline switches), the
cache roots the run read and wrote, recorded whether or not cleanup was asked for, and what ran (each arm's BCG as its
commands asked for it, the preset and what the caller changed in it, per-arm effective settings and warm-up cost)."""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from .. import contract, hf_settings
from ..judging import engine_args
from .design import Campaign
from .campaign_context import CampaignContext
from ..judging.cell import Cell
from ..engine.command_builder import Invocation
from .engine_starts import EngineStart
from ..model_cache import PreparedCache


def reproduce_command(argv: Sequence[str], env_set: Mapping[str, str], env_copy: Mapping[str, str],
                      env_unset: Sequence[str] = ()) -> str:
    """A shell command that reruns one cell; copied secrets appear as ``$NAME``, never as a value."""
    prefix = ["env", *(f"-u {shlex.quote(n)}" for n in sorted(env_unset))] if env_unset else []
    assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(env_set.items())]
    assignments += [f'{target}="${source}"' for target, source in sorted(env_copy.items())]
    return " \\\n  ".join([*prefix, *assignments, *map(shlex.quote, argv)])


def child_env_changes(caller_env: Mapping[str, str], child_env: Mapping[str, str]
                      ) -> tuple[dict[str, str], list[str]]:
    """(set, unset): what the runner changed in the caller's environment; secrets are never values here."""
    changed = {k: v for k, v in child_env.items()
               if caller_env.get(k) != v and k not in contract.SECRET_ENV_VARS}
    return changed, sorted(k for k in caller_env if k not in child_env)


def reproduce_entries(ctx: CampaignContext, cells: Sequence[Cell], invocations: Sequence[Invocation],
                      prepared: PreparedCache | None) -> list[dict[str, str]]:
    """One command per arm, with the environment the cell really got (the campaign's own child environment)."""
    entries, seen = [], set()
    for cell, inv in zip(cells, invocations, strict=True):
        if cell.arm in seen:
            continue
        seen.add(cell.arm)
        env_set, env_unset = child_env_changes(ctx.caller_env, ctx.engine_env(prepared).child_env(inv))
        entries.append({"arm": cell.arm, "command": reproduce_command(inv.argv, env_set, inv.env_copy, env_unset)})
    return entries


def cache_roots(ctx: CampaignContext, invocations: Sequence[Invocation],
                prepared: PreparedCache | None) -> dict[str, Any]:
    """Where the weights came from and went: the isolated root and child (when used), the hub cache the engine
    read, and a locally built model's directory."""
    child = ctx.engine_env(prepared).child_env(invocations[0]) if invocations else dict(ctx.caller_env)
    return {"model_cache_root": str(ctx.settings.model_cache_root) if ctx.settings.model_cache_root else None,
            "model_cache_child": str(prepared.child) if prepared is not None else None,
            "hf_hub_cache": str(hf_settings.hub_cache(child)),
            "local_model_dir": ctx.model_path,
            "seed_caches": [str(s) for s in ctx.settings.seed_caches]}


def arms_as_run(plan: Campaign, invocations: Sequence[Invocation]) -> dict[str, Any]:
    """Each arm as planned, with ``bcg`` taken from the flags its commands carry."""
    arms = {n: a.to_json() for n, a in plan.arms.items()}
    # an --until-verdict campaign that stopped early keeps the invocations of the rounds it ran, in slot order
    for slot, inv in zip(plan.slots[:len(invocations)], invocations, strict=True):
        arms[slot.arm]["bcg"] = engine_args.requests_bcg(inv.argv)
    return arms


def what_ran(ctx: CampaignContext, cells: Sequence[Cell], warm_starts: Sequence[EngineStart]) -> dict[str, Any]:
    """A campaign's account of what actually ran: the preset and what the caller changed in it, and per arm the
    engine's effective settings and its warm-up requests (a cold cell's engine warms up inside the cell; a warm
    engine once, at its start)."""
    runs = [(c.arm, c.index, c.engine_run) for c in cells if c.engine_run]
    runs += [(arm, None, s.facts.to_json()) for s in warm_starts for arm in s.arms]
    request, preset = dict(ctx.settings.request), ctx.preset
    return {"preset": preset.to_json(), "request": {
                "preset": preset.name, "model": request.get("model_path") or preset.model_label,
                "model_path": request.get("model_path"), "overrides": request.get("overrides") or {},
                "extra_args": list(request.get("extra_args") or ctx.settings.extra_args),
                "num_gpus": preset.num_gpus}, **engine_args.per_arm(runs)}
