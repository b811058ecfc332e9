"""What the installed `sglang generate` accepts: flags, choices, warmup spelling, BCG, profiler env variable.

sglang releases differ (0.5.10.post1 has `--warmup` and no `--quality`; newer ones have `--warmup-mode`, quality
levels and breakable CUDA graphs), so commands are built from a probe of the installed engine, never assumed.

Two probe methods, best first:
1. ``argparse``: build sglang's own generate parser (``add_multimodal_gen_generate_args``) in a child Python, with
   the CPU adapter on PYTHONPATH so the import also works on a GPU-less box, and list its actions (~10 s).
2. ``static_source``: when that import fails, read the parser-builder sources and collect the literal
   ``add_argument`` option strings with ``ast`` (milliseconds; misses flags built at run time, says so).
The argparse probe also reads the engine's quality levels and aliases (``sampling_params.QUALITY_LEVELS`` and
``QUALITY_ALIASES`` where the release has them), and which flags are per-request: those ``SamplingParams.add_cli_args``
adds (the engine hands them to ``DiffGenerator.generate`` per call) plus the generate command's own per-call
``--perf-dump-path`` and ``--output-file-path``; the static method takes them from ``sampling_params.py``. Its
result is cached under ``<work root>/.cache/`` keyed by the engine interpreter, version, package path and the
sources' mtimes. When the parser cannot be imported the probe is **degraded**: it names the missing module and what
to install, it is never cached, and callers refuse it unless they asked to accept one (``--accept-degraded-probe``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import contract, fileio, inputs, progress, work_dirs
from . import engine_flag_forms, engine_python, engine_sources
from .capabilities import PROFILER_ENV_DIFFUSION, PROFILER_ENV_GENERIC, EngineCapabilities

CACHE_FILE_NAME = "engine-capabilities.json"
PROBE_TIMEOUT_S = 900  # a fresh venv's first import compiles sglang's bytecode: minutes on a loaded 2-core box
PROBE_MARK = "@@ENGINE-PROBE@@"
# Relative to the sglang package: the parser builder and the modules whose add_cli_args it calls.
PROFILER_SOURCE = "multimodal_gen/runtime/utils/profiler.py"
# Newest release known to read only SGLANG_TORCH_PROFILER_DIR (used when profiler.py cannot be read).
LAST_GENERIC_PROFILER_ENV_RELEASE = (0, 5, 10, 1)
_MISSING_MODULE = re.compile(r"No module named '(?P<module>[\w.]+)'")

# Flags the engine validates against an enum of its own instead of argparse choices: (flag, module, enum class).
ENUM_VALIDATED = (("--attention-backend", "sglang.multimodal_gen.runtime.platforms.interface", "AttentionBackendEnum"),)
PROBE_FORMAT = 5  # part of the cache key: a probe written by an older format is probed again

_INTROSPECT = f"""
import argparse, enum, importlib, json
from sglang.multimodal_gen.runtime.entrypoints.cli.generate import add_multimodal_gen_generate_args
parser = argparse.ArgumentParser(add_help=False)
add_multimodal_gen_generate_args(parser)
enum_choices = {{}}
for flag, module, name in {ENUM_VALIDATED!r}:
    try:
        enum_choices[flag] = [m.name.lower() for m in getattr(importlib.import_module(module), name)]
    except Exception:
        pass
actions = []
for a in parser._actions:
    try:
        choices = None if a.choices is None else [str(c) for c in a.choices]
    except TypeError:
        choices = None
    if choices is None and isinstance(a.type, type) and issubclass(a.type, enum.Enum):
        choices = [str(m.value) for m in a.type]
    if choices is None:
        choices = next((enum_choices[o] for o in a.option_strings if o in enum_choices), None)
    actions.append({{"options": list(a.option_strings), "choices": choices}})
request_parser = argparse.ArgumentParser(add_help=False)
try:
    from sglang.multimodal_gen.configs.sample.sampling_params import SamplingParams
    SamplingParams.add_cli_args(request_parser)
    request_flags = [o for a in request_parser._actions for o in a.option_strings if o.startswith("--")]
except Exception:
    request_flags = None
from sglang.multimodal_gen.runtime.entrypoints.cli import generate as generate_module
warm_entry = hasattr(generate_module, "generate_cmd") and hasattr(generate_module, "DiffGenerator")
levels = aliases = None
try:
    from sglang.multimodal_gen.configs.sample import sampling_params as sp
    levels, aliases = list(sp.QUALITY_LEVELS), dict(sp.QUALITY_ALIASES)
except (ImportError, AttributeError):
    pass
print({PROBE_MARK!r} + json.dumps({{"actions": actions, "quality_levels": levels, "quality_aliases": aliases,
                                 "request_flags": request_flags, "warm_entry": warm_entry}}))
"""


def _release_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version or ""))


def profiler_dir_env_from_source(package_dir: Path, version: str | None) -> tuple[tuple[str, ...], str]:
    """Which env variables the installed profiler reads for its trace directory, from its source text."""
    try:
        text = (package_dir / PROFILER_SOURCE).read_text(encoding="utf-8")
    except OSError:
        text = None
    if text is not None and PROFILER_ENV_DIFFUSION in text:
        return (PROFILER_ENV_DIFFUSION, PROFILER_ENV_GENERIC), "source"
    if text is not None and PROFILER_ENV_GENERIC in text:
        return (PROFILER_ENV_GENERIC,), "source"
    if version and _release_tuple(version) <= LAST_GENERIC_PROFILER_ENV_RELEASE:
        return (PROFILER_ENV_GENERIC,), "version_table"
    return (PROFILER_ENV_DIFFUSION, PROFILER_ENV_GENERIC), "version_table"


class ParserImportError(RuntimeError):
    """Importing sglang's generate parser failed; ``missing_module`` when an import named one."""

    def __init__(self, message: str, missing_module: str | None):
        super().__init__(message)
        self.missing_module = missing_module


def _introspect(python: str, adapter_env: Mapping[str, str], keep_log: Path | None = None) -> dict[str, Any]:
    """The parser's facts from ``python``; with ``keep_log``, in a warm driver kept for a warm engine to adopt."""
    with progress.phase("engine probe: importing sglang's generate parser", f"with {python}; cached afterwards; the "
                        "first import of a fresh install compiles its bytecode: minutes") as ticker:
        if keep_log is None:
            proc = progress.run_child([python, "-c", _INTROSPECT], ticker, timeout_s=PROBE_TIMEOUT_S, env=adapter_env)
            out, lines, code = proc.stdout.splitlines(), proc.stderr.strip().splitlines(), proc.returncode
        else:
            from . import probe_interpreter  # the warm engine is imported only where one is kept
            out, lines, code = probe_interpreter.probe_and_keep(python, adapter_env, _INTROSPECT, keep_log,
                                                                PROBE_TIMEOUT_S, ticker, PROBE_MARK)
        found = next((json.loads(line[len(PROBE_MARK):]) for line in out if line.startswith(PROBE_MARK)), None)
        if found is not None:
            return found
        ticker.outcome = "failed"
    lines = lines or ["no output"]
    missing = next((m["module"] for m in map(_MISSING_MODULE.search, reversed(lines)) if m), None)
    raise ParserImportError(f"importing sglang's generate parser failed (exit {code}): {lines[-1]}", missing)


def capabilities_from_actions(actions: Iterable[Mapping[str, Any]], *, version: str | None, package_dir: Path,
                              method: str, problems: Iterable[str] = (), **extra: Any) -> EngineCapabilities:
    flags, choices = set(), {}
    for action in actions:
        for option in action["options"]:
            if option.startswith("--"):
                flags.add(option)
                if action.get("choices"):
                    choices[option] = tuple(action["choices"])
    profiler_env, profiler_source = profiler_dir_env_from_source(package_dir, version)
    prefixes, suffixes = engine_flag_forms.dynamic_flag_forms(engine_sources.source_files(package_dir))
    extra.setdefault("dynamic_prefixes", prefixes)
    extra.setdefault("dynamic_suffixes", suffixes)
    return EngineCapabilities(version=version, package_dir=str(package_dir), method=method, flags=frozenset(flags),
                              choices=choices, profiler_dir_env=profiler_env, profiler_dir_env_source=profiler_source,
                              problems=tuple(problems), **extra)


def cache_key(version: str | None, package_dir: Path, python: str | None = None) -> str:
    mtimes = []
    for path in engine_sources.source_files(package_dir):
        try:
            mtimes.append(f"{path.relative_to(package_dir)}@{path.stat().st_mtime_ns}")
        except OSError:
            continue
    return json.dumps([PROBE_FORMAT, python, version, str(package_dir), sorted(mtimes)])


def default_cache_path() -> Path:
    return work_dirs.work_root()[0] / ".cache" / CACHE_FILE_NAME


def _read_cache(path: Path, key: str) -> EngineCapabilities | None:
    try:
        document = inputs.load_json(path, "input.unreadable")
        if document.get("key") == key:
            return EngineCapabilities.from_json(document["engine"])
    except (contract.ToolError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a missing, damaged or stale cache is simply re-probed
    return None


def _write_cache(path: Path, key: str, caps: EngineCapabilities) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"key": key, "engine": caps.to_json()}
        fileio.atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    except OSError:
        pass  # an unwritable cache only costs a re-probe next time


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    capabilities: EngineCapabilities
    cache_path: Path
    cache_hit: bool


def probe_engine(cache_path: Path | None = None, *, refresh: bool = False, python: str | None = None,
                 accept_degraded: bool = False, keep_interpreter: bool = False) -> ProbeResult:
    """Probe the sglang importable by ``python`` (default: this interpreter), through the cache; where it really
    probes and ``keep_interpreter``, its interpreter is kept for the first warm engine (probe_interpreter).

    A degraded probe (the parser did not import) is never cached, and raises ``engine.probe_degraded`` naming the
    missing module unless ``accept_degraded``."""
    from . import engine_process

    python = python or sys.executable
    location = work_dirs.sglang_location() if engine_python.is_own(python) else engine_python.sglang_location(python)
    if not location["installed"]:
        raise contract.PreconditionError("engine.not_installed", f"sglang is not installed: {location['reason']}",
                                         "install the engine (see README 'Engine install') in that Python, or "
                                         "point --engine-python at the one that has it")
    package_dir, version = Path(location["package_dir"]), location["version"]
    cache_path = cache_path or default_cache_path()
    key = cache_key(version, package_dir, python)
    if not refresh:
        cached = _read_cache(cache_path, key)
        if cached is not None:
            return ProbeResult(cached, cache_path, True)
    try:
        adapter_env = engine_process.cpu_adapter_env(dict(os.environ))
        found = _introspect(python, adapter_env, cache_path.with_suffix(".log") if keep_interpreter else None)
        caps = capabilities_from_actions(
            found["actions"], version=version, package_dir=package_dir, method="argparse", python=python,
            quality_levels=None if found.get("quality_levels") is None else tuple(found["quality_levels"]),
            quality_aliases=found.get("quality_aliases") or {},
            request_flags=None if found.get("request_flags") is None
            else frozenset([*found["request_flags"], *engine_sources.GENERATE_REQUEST_FLAGS]),
            warm_entry=found.get("warm_entry"))
    except (ParserImportError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        missing = getattr(exc, "missing_module", None)
        reason = f"importing the parser took longer than {PROBE_TIMEOUT_S} s" if isinstance(
            exc, subprocess.TimeoutExpired) else str(exc)
        degraded = {"reason": reason if missing is None else f"No module named '{missing}'",
                    "missing_module": missing, "hint": engine_python.install_hint(missing, python, version)}
        actions = engine_sources.static_parser_actions(package_dir)
        if not actions:
            raise contract.PreconditionError(
                "engine.probe_failed", f"cannot learn the CLI of sglang {version} at {package_dir}: "
                f"{degraded['reason']}", degraded["hint"]) from exc
        caps = capabilities_from_actions(actions, version=version, package_dir=package_dir, method="static_source",
                                         problems=[f"argparse probe failed, read the parser sources instead: {exc}"],
                                         degraded=degraded, python=python,
                                         request_flags=engine_sources.static_request_flags(package_dir),
                                         warm_entry=engine_sources.static_warm_entry(package_dir))
        if not accept_degraded:
            raise contract.PreconditionError(
                "engine.probe_degraded", f"cannot import the generate parser of sglang {version} at {package_dir}: "
                f"{degraded['reason']}", degraded["hint"] + "; or pass --accept-degraded-probe to continue with "
                "what the sources say", details={"missing_module": missing, "engine_version": version}) from exc
        return ProbeResult(caps, cache_path, False)  # never cached: the next call probes again
    _write_cache(cache_path, key, caps)
    return ProbeResult(caps, cache_path, False)


def import_check(python: str) -> dict[str, Any]:
    """inspect's import check of the generate entry point, answered by the probe: it imports the same module with
    the same CPU adapter, and its cache (same interpreter, release and sources) lets inspect and check_readiness
    import sglang once between them. {ok, module, missing_module, error, seconds, cached}."""
    import time

    began = time.monotonic()
    try:
        result = probe_engine(python=python, accept_degraded=True)
        degraded, cached = result.capabilities.degraded, result.cache_hit
        missing, error = (None, None) if degraded is None else (degraded["missing_module"], degraded["reason"])
    except contract.ToolError as exc:
        found, cached, error = _MISSING_MODULE.search(exc.message), False, exc.message
        missing = found["module"] if found else None
    return {"ok": error is None, "module": engine_python.GENERATE_ENTRY, "missing_module": missing,
            "error": contract.redact(error) if error else None, "seconds": round(time.monotonic() - began, 2),
            "cached": cached}
