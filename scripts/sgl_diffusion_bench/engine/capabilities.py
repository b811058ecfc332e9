"""What the installed engine's generate CLI accepts, as one typed object (EngineCapabilities): its flags and their
choices, per-component flag forms, quality levels, the profiler's directory variable, per-request flags. It comes
from a probe of the installed engine (engine_probe), from a file probed elsewhere (``--engine-capabilities FILE``)
or, for a plan aimed at a newer engine, from the built-in description of current main."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from .. import contract, inputs

PROFILER_ENV_DIFFUSION = "SGLANG_DIFFUSION_TORCH_PROFILER_DIR"
PROFILER_ENV_GENERIC = "SGLANG_TORCH_PROFILER_DIR"
OFFLOAD_FLAGS = ("--dit-cpu-offload", "--text-encoder-cpu-offload", "--image-encoder-cpu-offload",
                 "--vae-cpu-offload", "--dit-layerwise-offload", "--pin-cpu-memory")
BCG_FLAG = "--enable-breakable-cuda-graph"


@dataclasses.dataclass(frozen=True)
class EngineCapabilities:
    """The installed engine's generate CLI, as far as a bench command needs to know it."""

    version: str | None
    package_dir: str | None
    method: str  # argparse | static_source | builtin
    flags: frozenset[str]
    choices: Mapping[str, tuple[str, ...]]  # flag -> accepted values, where the parser declares them
    profiler_dir_env: tuple[str, ...]  # variables the profiler reads for its trace directory, in priority order
    profiler_dir_env_source: str  # source | version_table | builtin
    problems: tuple[str, ...] = ()  # why a better probe method was not used
    quality_levels: tuple[str, ...] | None = None  # the engine's own canonical levels, strictest first, if it says
    quality_aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)  # alias -> canonical level
    degraded: Mapping[str, Any] | None = None  # why the parser could not be imported: {reason, missing_module, hint}
    python: str | None = None  # the interpreter whose sglang this describes
    # Flag forms the engine's unknown-argument handler takes per component (read from its server_args source):
    # prefixes such as "--component-attention-backends." and suffixes such as "-path", "-quantization".
    dynamic_prefixes: tuple[str, ...] = ()
    dynamic_suffixes: tuple[str, ...] = ()
    # Flags the engine takes per request (DiffGenerator.generate's sampling parameters); None where unknown.
    request_flags: frozenset[str] | None = None
    # Whether generate serves through DiffGenerator (generate_cmd building one per call): the warm driver builds it
    # once and answers generate_cmd's build with it. None where unknown.
    warm_entry: bool | None = None

    def has_flag(self, flag: str) -> bool:
        return flag in self.flags

    def flag_acceptance(self, flag: str) -> str | None:
        """"declared" (the parser has it), "model-dependent" (a per-component or pipeline-contributed form the
        engine takes, whose component/option only the model can confirm), or None (the engine rejects it)."""
        if flag in self.flags:
            return "declared"
        if any(flag.startswith(p) and len(flag) > len(p) for p in self.dynamic_prefixes):
            return "model-dependent"
        if any(flag.endswith(x) and len(flag) > len(x) + 2 for x in self.dynamic_suffixes):
            return "model-dependent"
        head = flag.split(".", 1)[0] + "." if "." in flag else None  # --<x>-config.<field>: pipeline configs add them
        if head and any(f.startswith(head) for f in self.flags):
            return "model-dependent"
        return None

    def accepts_flag(self, flag: str) -> bool:
        return self.flag_acceptance(flag) is not None

    @property
    def warmup_flag(self) -> str | None:
        if "--warmup-mode" in self.flags:
            return "--warmup-mode"
        return "--warmup" if "--warmup" in self.flags else None

    @property
    def has_bcg(self) -> bool:
        return BCG_FLAG in self.flags

    @property
    def quality_values(self) -> tuple[str, ...] | None:
        """Accepted ``--quality`` values; None when the engine has no ``--quality``; () when it has one whose
        values the probe could not read."""
        if "--quality" not in self.flags:
            return None
        return tuple(self.choices.get("--quality", ()))

    @property
    def distinct_quality_levels(self) -> tuple[str, ...]:
        """The levels that run differently: the engine's canonical levels, aliases left out."""
        if self.quality_levels is not None:
            return self.quality_levels
        return tuple(v for v in (self.quality_values or ()) if v not in self.quality_aliases)

    def canonical_quality(self, level: str | None) -> str | None:
        """The level a request at ``level`` really runs at (an alias resolved by the engine's own table)."""
        return None if level is None else self.quality_aliases.get(level, level)

    def degraded_reason(self) -> str:
        """Why builds that need what the degraded probe lacks refuse, naming what to install."""
        if not self.degraded:
            return ""
        return f"the engine probe is degraded ({self.degraded['reason']}); {self.degraded['hint']}"

    @property
    def offload_flags(self) -> tuple[str, ...]:
        return tuple(f for f in OFFLOAD_FLAGS if f in self.flags)

    @property
    def label(self) -> str:
        return f"sglang {self.version or '(unknown version)'}" + (f" at {self.package_dir}" if self.package_dir else "")

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "package_dir": self.package_dir, "method": self.method,
                "flags": sorted(self.flags), "choices": {k: list(v) for k, v in sorted(self.choices.items())},
                "warmup_flag": self.warmup_flag, "has_bcg": self.has_bcg,
                "quality_values": None if self.quality_values is None else list(self.quality_values),
                "offload_flags": list(self.offload_flags), "profiler_dir_env": list(self.profiler_dir_env),
                "profiler_dir_env_source": self.profiler_dir_env_source, "problems": list(self.problems),
                "quality_levels": None if self.quality_levels is None else list(self.quality_levels),
                "quality_aliases": dict(self.quality_aliases),
                "distinct_quality_levels": list(self.distinct_quality_levels),
                "degraded": None if self.degraded is None else dict(self.degraded), "python": self.python,
                "dynamic_flag_forms": {"prefixes": list(self.dynamic_prefixes),
                                       "suffixes": list(self.dynamic_suffixes)},
                "request_flags": None if self.request_flags is None else sorted(self.request_flags),
                "warm_entry": self.warm_entry}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EngineCapabilities":
        return cls(version=data["version"], package_dir=data["package_dir"], method=data["method"],
                   flags=frozenset(data["flags"]), choices={k: tuple(v) for k, v in data["choices"].items()},
                   profiler_dir_env=tuple(data["profiler_dir_env"]),
                   profiler_dir_env_source=data["profiler_dir_env_source"], problems=tuple(data["problems"]),
                   quality_levels=None if data.get("quality_levels") is None else tuple(data["quality_levels"]),
                   quality_aliases=dict(data.get("quality_aliases") or {}), degraded=data.get("degraded"),
                   python=data.get("python"),
                   dynamic_prefixes=tuple((data.get("dynamic_flag_forms") or {}).get("prefixes", ())),
                   dynamic_suffixes=tuple((data.get("dynamic_flag_forms") or {}).get("suffixes", ())),
                   request_flags=None if data.get("request_flags") is None else frozenset(data["request_flags"]),
                   warm_entry=data.get("warm_entry"))


_RECENT_FLAGS = """
--config --perf-dump-path --output-file-path --model-path --model-id --revision --backend --pipeline-class-name
--pipeline --performance-mode --mode --num-gpus --tp-size --sp-degree --ulysses-degree --ring-degree
--kv-gather-degree --enable-cfg-parallel --cfg-parallel-size --dp-size --attention-backend
--attention-backend-config --enable-torch-compile --enable-breakable-cuda-graph --bcg-text-buckets --warmup-mode
--warmup-resolutions --warmup-num-frames --warmup-steps --warmup-sampling-params --component-residency
--dit-cpu-offload --text-encoder-cpu-offload --image-encoder-cpu-offload --vae-cpu-offload --dit-layerwise-offload
--layerwise-offload-components --dit-offload-prefetch-size --use-fsdp-inference --pin-cpu-memory --sleep-on-idle
--output-path --log-level --enable-layerwise-nvtx-marker --quantization --lora-path --trust-remote-code
--enable-svdquant --transformer-weights-path --quantization-precision --quantization-rank --prompt --prompt-path
--negative-prompt --seed --generator-device --width --height --4k --2k --1080p --720p --num-frames --fps
--num-inference-steps --guidance-scale --guidance-scale-2 --true-cfg-scale --save-output --no-save-output
--output-file-name --output-quality --quality --profile --num-profiled-timesteps --profile-all-stages
--num-outputs-per-prompt --num-outputs --image-path --enable-cache-dit --cfg-gate-step --attention-backend-override
--diffusers-kwargs --return-frames --debug --progressive-mode --dit-precision --vae-precision --vae-tiling
--text-encoder-precisions --flow-shift --embedded-cfg-scale --adjust-frames --model-variant
--component-attention-backends --enable-prompt-rewrite --action --streaming --refiner-chunked
--use-diffusion-decoder --ltx2-two-stage-device-mode --vae-config.parallel-decode-mode
"""
# Those of _RECENT_FLAGS that main's SamplingParams.add_cli_args adds, plus generate's per-call ones.
_RECENT_REQUEST_FLAGS = """
--perf-dump-path --output-file-path --prompt --prompt-path --negative-prompt --seed --generator-device --width
--height --4k --2k --1080p --720p --num-frames --fps --num-inference-steps --guidance-scale --guidance-scale-2
--true-cfg-scale --save-output --no-save-output --output-file-name --output-quality --quality --profile
--num-profiled-timesteps --profile-all-stages --num-outputs-per-prompt --num-outputs --image-path --enable-cache-dit
--cfg-gate-step --attention-backend-override --diffusers-kwargs --return-frames --debug --progressive-mode
--adjust-frames --enable-prompt-rewrite --action --use-diffusion-decoder
"""


def recent_engine_capabilities() -> EngineCapabilities:
    """A current-main engine as the reference describes it (runtime doc §1 plus the flags main's own presets pass):
    for tests and for dry runs that target a newer engine than the installed one. Not a probe result."""
    return EngineCapabilities(
        version="main", package_dir=None, method="builtin", flags=frozenset(_RECENT_FLAGS.split()),
        choices={"--quality": ("exact", "lossless", "high", "extra-high"),
                 "--warmup-mode": ("off", "request", "server"), "--backend": ("auto", "sglang", "diffusers"),
                 "--performance-mode": ("manual", "auto", "speed", "memory")},
        profiler_dir_env=(PROFILER_ENV_DIFFUSION, PROFILER_ENV_GENERIC), profiler_dir_env_source="builtin",
        quality_levels=("exact", "lossless", "high"), quality_aliases={"extra-high": "lossless"},
        dynamic_prefixes=("--component-paths.", "--component-weights-paths.", "--component-quantizations.",
                          "--component-precisions.", "--component-attention-backends."),
        dynamic_suffixes=("-path", "-weights-path", "-quantization"),
        request_flags=frozenset(_RECENT_REQUEST_FLAGS.split()), warm_entry=True)


def load_capabilities_file(path: Path) -> EngineCapabilities:
    """An engine.v1 document saved from ``--probe-engine --json`` (e.g. probed on another machine)."""
    try:
        document = inputs.load_json(path, "input.unreadable")
    except contract.InputError as exc:
        raise contract.InputError("input.unreadable", f"cannot read engine capabilities {path}: {exc.message}",
                                  "pass a file written by --probe-engine --json") from None
    contract.validate_input(document, "engine.v1", str(path))
    return EngineCapabilities.from_json(document["engine"])
