"""The engine probe's interpreter, kept for the first warm engine, so a run that probes imports sglang once, not twice.

A bench run whose probe is not cached runs the probe as ``warm_driver.py --probe`` (the same code, the same
interpreter, the same CPU-adapter environment as the plain probe) and keeps that process waiting after it answered.
The first warm engine of that interpreter takes it over (``adopt``) instead of spawning a new one: the driver takes the
engine's environment and working directory and builds the engine from its arguments, exactly as a fresh driver would.

It is taken over only when nothing read at import time can differ: the same interpreter, and an engine environment
that differs from the probe's only in variables the engine reads when it runs (``RUN_TIME_ENV``, checked in the
0.5.23 sources: ``os.environ.get`` at request or device set-up, not at import; the hub tokens when a download asks
for one, huggingface_hub/utils/_auth.py). Any other difference (the adapter's
switches, a cache directory, visible devices) closes the kept interpreter and the engine starts as usual. A kept
interpreter nobody takes is closed when the run ends, and dies with it in any case (its own process group).
"""

from __future__ import annotations

import atexit
import subprocess
import sys
from pathlib import Path
from typing import Mapping, TextIO

from .. import progress
from . import warm_engine

RUN_TIME_ENV = frozenset({"SGLANG_DIFFUSION_SYNC_STAGE_PROFILING", "CUDA_DEVICE_ORDER",
                          "FLASHINFER_DISABLE_VERSION_CHECK", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                          "HUGGINGFACE_HUB_TOKEN"})
_kept: dict[str, tuple[warm_engine.WarmEngine, dict[str, str]]] = {}


def probe_and_keep(python: str, env: Mapping[str, str], code: str, log_path: Path, timeout_s: float,
                   ticker: progress.Ticker, answer_mark: str) -> tuple[list[str], list[str], str]:
    """Run the probe ``code`` in ``python`` under ``env``, keeping the interpreter for ``adopt`` once it answered:
    (its lines, its lines but the answer, how it ended); TimeoutExpired past ``timeout_s`` (stopped, not kept)."""
    release(python)
    engine = warm_engine.WarmEngine("probe", [python, str(warm_engine.DRIVER_PATH), "--probe", code], dict(env),
                                    log_path)
    engine.start()
    segment = engine.wait_marker("PROBED", None, timeout_s, ticker)
    if segment.status == "ok":
        if not _kept:
            atexit.register(release_all)
        _kept[python] = (engine, dict(env))
    else:
        engine.close()
    if segment.status == "timeout":
        raise subprocess.TimeoutExpired([python, "--probe"], timeout_s)
    answer = [line for line in segment.lines if line.startswith(answer_mark)]
    return segment.lines, [line for line in segment.lines if line not in answer], segment.error or segment.status


def adoptable(probe_env: Mapping[str, str], engine_env: Mapping[str, str]) -> bool:
    """Whether an engine with ``engine_env`` may take over an interpreter started with ``probe_env``."""
    keys = set(probe_env) | set(engine_env)
    return all(k in RUN_TIME_ENV for k in keys if probe_env.get(k) != engine_env.get(k))


def adopt(python: str, engine_id: str, argv: list[str], env: dict[str, str], log_path: Path, *,
          cwd: Path | None = None, echo: TextIO | None = None) -> warm_engine.WarmEngine | None:
    """The kept probe interpreter of ``python`` as this engine (``start`` it as any), or None: there is none, it has
    exited, or the environment differs in what it read at import (then it is closed, saying why)."""
    kept = _kept.pop(python, None)
    if kept is None:
        return None
    engine, probe_env = kept
    if not engine.alive or not adoptable(probe_env, env):
        differ = sorted(k for k in set(probe_env) | set(env)
                        if probe_env.get(k) != env.get(k) and k not in RUN_TIME_ENV)
        engine.close()
        if differ:
            progress.say(f"engine {engine_id}: not started in the probe's interpreter (its environment differs in "
                         f"{', '.join(differ[:5])}): importing sglang again")
        return None
    progress.say(f"engine {engine_id}: starting in the probe's interpreter (sglang already imported there)")
    return engine.adopt(engine_id, argv, env, log_path, cwd=cwd, echo=echo)


def release(python: str) -> None:
    kept = _kept.pop(python, None)
    if kept is not None:
        kept[0].close()


def release_all() -> None:
    """Close every kept interpreter (the run is over, or it will not start a warm engine)."""
    for python in list(_kept):
        release(python)
    sys.stderr.flush()
