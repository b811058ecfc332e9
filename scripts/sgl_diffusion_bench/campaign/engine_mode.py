"""Which engine mode a campaign runs: warm (resident engines serve the cells, the default) or cold (one `sglang
generate` process per cell), and why.

Warm is the default because it measures the same request at a fraction of the wall time and engine starts. On the
real CPU engine (benchmarks/warm_vs_cold.py, idle machine) a 2-round A/A gave identical output hashes, one engine start
instead of eight, 0.20 of the wall time, and e2e medians 126.5 ms warm vs 119.1 ms cold, a 6.2 % gap inside the
24 % interquartile noise of a 2-core CPU. On the H200 (tests/fixtures/gpu-h200-0.5.23/warm-vs-cold) a 28-step
1024x1024 FLUX.1-dev-shaped A/A gave 4227.8 ms warm vs 4226.1 ms cold: 0.04 % inside 0.72 % noise, one output hash.
(Under heavy load a cold cell's single request suffers more than a warm engine's: compare like with like, never a
warm run with a cold one.) Where warm cannot run, the default falls back to cold and says why: when the engine does
not serve generate through ``DiffGenerator`` (the warm driver builds one and answers ``generate_cmd`` with it), when
the capabilities do not say, or when a request asks for the engine's torch profiler (its traces are written per
engine process). Asked for by name, warm is refused there instead.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import argv_tokens, contract

MODES = ("cold", "warm")
DEFAULT = "warm"
PROFILER_FLAGS = ("--profile", "--profile-all-stages", "--num-profiled-timesteps")


def warm_obstacle(engine: Any, argvs: Sequence[Sequence[str]]) -> str | None:
    """Why these requests cannot run on a warm engine, or None."""
    if engine.warm_entry is False:
        return (f"{engine.label} does not serve generate through DiffGenerator (no generate_cmd building one), "
                "which a warm engine builds once")
    if engine.warm_entry is None:
        return f"the engine capabilities ({engine.method}) do not say whether {engine.label} serves generate " \
               "through DiffGenerator"
    profiled = sorted({f for argv in argvs for t in argv if (f := argv_tokens.flag_name(t)) in PROFILER_FLAGS})
    if profiled:
        return f"the requests ask for the torch profiler ({', '.join(profiled)}), whose traces are per engine process"
    return None


def choose(asked: str | None, engine: Any, argvs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``{"asked", "mode", "reason"}`` for ``--engine`` as given (None: the default). ``--engine warm`` is refused,
    before anything runs, where it cannot run; the default then runs cold and the reason says why."""
    if asked not in (None, *MODES):
        raise contract.UsageError("usage.bad_engine_mode", f"engine mode {asked!r} is not one of {', '.join(MODES)}",
                                  "use --engine cold or --engine warm")
    if asked == "cold":
        return {"asked": asked, "mode": "cold", "reason": "--engine cold"}
    obstacle = warm_obstacle(engine, argvs)
    if asked == "warm" and obstacle:
        raise contract.PreconditionError("engine.warm_unavailable", f"--engine warm cannot run: {obstacle}",
                                         "use --engine cold (one sglang generate process per cell)")
    if asked == "warm":
        return {"asked": asked, "mode": "warm", "reason": "--engine warm"}
    if obstacle:
        return {"asked": None, "mode": "cold", "reason": f"the default ({DEFAULT}) cannot run: {obstacle}"}
    return {"asked": None, "mode": DEFAULT, "reason": f"the default ({DEFAULT})"}
