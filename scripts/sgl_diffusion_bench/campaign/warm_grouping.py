"""Which requests of a campaign share a warm engine, and how a request is rewritten to write elsewhere.

Two requests share an engine when they differ only in what the engine takes per request. That is the engine's own
answer (the probe's ``request_flags``: what ``SamplingParams.add_cli_args`` adds, i.e. what ``DiffGenerator.generate``
takes per call, such as steps, guidance, size, quality, seed, prompt); where the probe cannot tell, only output
paths, ports, seed and prompt count as per-request. Everything else is the engine's configuration: engine flags
(eager vs BCG), a JSON config file's engine keys, the environment. Pure functions, no effects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from .. import argv_tokens
from ..engine import command_builder

# Where a request writes and the ports a cold cell would bind (a warm engine binds its own once): per request on
# every release, and never part of what a request asks for.
REQUEST_PATH_FLAGS = ("--perf-dump-path", "--output-path", "--output-file-name", "--output-file-path",
                      "--master-port", "--scheduler-port")
# Per request on every supported release (SamplingParams fields in 0.5.10.post1 and 0.5.23) even where the probe
# could not list the engine's request flags.
ALWAYS_PER_REQUEST = (*REQUEST_PATH_FLAGS, "--seed", "--prompt", "--negative-prompt", "--image-path")
# Sampling flags that generate_cmd copies into the server args (0.5.23: --use-diffusion-decoder sets
# load_diffusion_decoder): a request cannot change them on an engine already built.
ENGINE_SIDE_EFFECT_FLAGS = frozenset({"--use-diffusion-decoder"})


def per_request_flags(request_flags: frozenset[str] | None) -> frozenset[str]:
    """The flags a built engine takes per request: the probe's ``request_flags`` (None: not known) and the ones
    per-request everywhere, less those generate copies into the server args."""
    return frozenset(ALWAYS_PER_REQUEST) | ((request_flags or frozenset()) - ENGINE_SIDE_EFFECT_FLAGS)


def _config_part(content: str | None, keep_request: bool, per_request: frozenset[str]) -> str:
    """A JSON config file's engine keys (or its request keys): generate hands the keys that are sampling fields to
    each request and builds the engine from the rest. Content that is not a JSON object counts whole as engine."""
    try:
        config = json.loads(content or "")
    except ValueError:
        config = None
    if not isinstance(config, dict):
        return "" if keep_request else content or ""
    part = {k: v for k, v in config.items() if (f"--{k.replace('_', '-')}" in per_request) == keep_request}
    return json.dumps(part, sort_keys=True)


def engine_key(generate_args: Sequence[str], config_content: str | None, request_flags: frozenset[str] | None = None,
               env: Sequence[str] = ()) -> tuple[str, ...]:
    """What must be equal for two requests to share an engine: every flag the engine does not take per request, a
    config file's engine keys (its path is per run), and the environment changes (``env``)."""
    per_request = per_request_flags(request_flags)
    key = []
    for flag, values, _ in argv_tokens.split_flags(generate_args):
        if flag in per_request:
            continue
        if flag == "--config":
            values = [_config_part(config_content, False, per_request)]
        key.append(" ".join([flag, *values]))
    return (*key, *env)


def request_key(generate_args: Sequence[str], config_content: str | None,
                request_flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """What a request asks its engine for (steps, size, seed, prompt, ...), where it writes left out: requests
    with equal keys warm an engine up alike."""
    per_request = per_request_flags(request_flags)
    key = [" ".join([flag, *values]) for flag, values, _ in argv_tokens.split_flags(generate_args)
           if flag in per_request and flag not in REQUEST_PATH_FLAGS]
    if any(flag == "--config" for flag, _, _ in argv_tokens.split_flags(generate_args)):
        key.append(_config_part(config_content, True, per_request))
    return tuple(key)


def group_by_engine(keys: Sequence[tuple[str, ...]]) -> list[int]:
    """Per request, the index of its engine configuration (first appearance order)."""
    seen: dict[tuple[str, ...], int] = {}
    return [seen.setdefault(key, len(seen)) for key in keys]


def with_request_paths(generate_args: Sequence[str], perf_dump: Path, output_dir: Path, stem: str,
                       config: Path | None = None) -> list[str]:
    """The same request writing its perf dump and output elsewhere, reading its config file (if any) from
    ``config`` (the uncounted warm-up requests: a cell's own run directory does not exist before the cell runs)."""
    replace = {"--perf-dump-path": str(perf_dump), "--output-path": str(output_dir), "--output-file-name": stem}
    out: list[str] = []
    for flag, _, tokens in argv_tokens.split_flags(generate_args):
        if flag == "--config" and config is not None:
            out.append(f"--config={config}")
        else:
            out += [flag, replace[flag]] if flag in replace else tokens
    return out


def invocation_env(invocation: command_builder.Invocation) -> tuple[str, ...]:
    """The environment changes of an invocation, as engine-key tokens (an engine's environment is its process's)."""
    return (*(f"env {k}={v}" for k, v in sorted(invocation.env_set.items())),
            *(f"env-copy {k}={v}" for k, v in sorted(invocation.env_copy.items())),
            *(f"env-unset {k}" for k in sorted(invocation.env_unset)))
