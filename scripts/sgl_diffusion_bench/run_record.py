"""What a report records so a run can be repeated and its files found: the Reproduce commands (with every
environment change the runner made: the CPU adapter's PYTHONPATH, the isolated cache, offline switches), and the
cache roots the run read and wrote, recorded whether or not cleanup was asked for."""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from . import contract, hf_settings


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


def reproduce_entries(runner) -> list[dict[str, str]]:
    """One command per arm, with the environment the cell really got (the runner's own child environment)."""
    entries, seen = [], set()
    for cell, inv in zip(runner.cells, runner.invocations, strict=True):
        if cell.arm in seen:
            continue
        seen.add(cell.arm)
        env_set, env_unset = child_env_changes(runner.caller_env, runner._child_env(inv, runner._prepared))
        entries.append({"arm": cell.arm, "command": reproduce_command(inv.argv, env_set, inv.env_copy, env_unset)})
    return entries


def cache_roots(runner, model_path: str | None) -> dict[str, Any]:
    """Where the weights came from and went: the isolated root and child (when used), the hub cache the engine
    read, and a locally built model's directory."""
    prepared = runner._prepared
    child = runner._child_env(runner.invocations[0], prepared) if runner.invocations else dict(runner.caller_env)
    return {"model_cache_root": str(runner.settings.model_cache_root) if runner.settings.model_cache_root else None,
            "model_cache_child": str(prepared.child) if prepared is not None else None,
            "hf_hub_cache": str(hf_settings.hub_cache(child)),
            "local_model_dir": model_path,
            "seed_caches": [str(s) for s in runner.settings.seed_caches]}
