"""Which engine mode a campaign runs: cold (one `sglang generate` process per cell, the default) or warm (resident
engines serve the cells), and why; warm is refused where it cannot run.

Cold stays the default: on the real CPU engine warm gave the same output hashes at a sixth of the wall time, but its
median request was 76 % faster than a cold cell's (a cold cell measures the first request after the engine's own
warmup, a warm engine a steadier state), which is not the same measurement (benchmarks/warm_vs_cold.py). Warm cannot
run when the engine does not serve generate through ``DiffGenerator`` (the warm driver builds one and answers
``generate_cmd`` with it), when the capabilities do not say, or when a request asks for the engine's torch profiler
(its traces are written per engine process: profile with profile_diffusion.py, which runs cold).
"""

from __future__ import annotations

from typing import Any, Sequence

from . import contract, engine_args

MODES = ("cold", "warm")
DEFAULT = "cold"
PROFILER_FLAGS = ("--profile", "--profile-all-stages", "--num-profiled-timesteps")


def warm_obstacle(engine: Any, argvs: Sequence[Sequence[str]]) -> str | None:
    """Why these requests cannot run on a warm engine, or None."""
    if engine.warm_entry is False:
        return (f"{engine.label} does not serve generate through DiffGenerator (no generate_cmd building one), "
                "which a warm engine builds once")
    if engine.warm_entry is None:
        return f"the engine capabilities ({engine.method}) do not say whether {engine.label} serves generate " \
               "through DiffGenerator"
    profiled = sorted({f for argv in argvs for t in argv if (f := engine_args.flag_name(t)) in PROFILER_FLAGS})
    if profiled:
        return f"the requests ask for the torch profiler ({', '.join(profiled)}), whose traces are per engine process"
    return None


def choose(asked: str | None, engine: Any, argvs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``{"asked", "mode", "reason"}`` for ``--engine`` as given (None: the default); warm is refused, before
    anything runs, where it cannot run."""
    if asked not in (None, *MODES):
        raise contract.UsageError("usage.bad_engine_mode", f"engine mode {asked!r} is not one of {', '.join(MODES)}",
                                  "use --engine cold or --engine warm")
    mode = asked or DEFAULT
    obstacle = warm_obstacle(engine, argvs) if mode == "warm" else None
    if obstacle:
        raise contract.PreconditionError("engine.warm_unavailable", f"--engine warm cannot run: {obstacle}",
                                         "use --engine cold (one sglang generate process per cell)")
    return {"asked": asked, "mode": mode, "reason": f"--engine {asked}" if asked else f"the default ({mode})"}
