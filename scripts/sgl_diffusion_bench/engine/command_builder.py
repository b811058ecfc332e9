"""Build one `sglang generate` invocation from a preset, run options and the engine's capabilities. Pure: no
filesystem, no subprocess, no os.environ; the caller passes the environment and writes the config file.

Order of arguments (reference `build_sglang_cmd`): CLI, backend pin, model, prompt, seed, negative prompt, image,
config file, preset request fields and args, quality, save-output, warmup, BCG (+ warmup resolutions, frames,
text buckets), compile comparator, perf dump, output path and file name, caller extra args.

Every flag in the finished argv is checked against the engine: one the engine lacks is refused here, before anything
runs, naming the flag, the installed version and what to do. Preset args are never dropped to make a command fit:
a benchmark whose workload silently changed is worse than no benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import argv_tokens, contract, hf_settings
from . import flag_checks
from .capabilities import EngineCapabilities
from ..presets import Preset

DEFAULT_QUALITY = "lossless"  # every release with --quality defaults to it; pinned so runs stay comparable
WARMUP_MODE_DEFAULT = "request"
RESIDENCY_MODES = ("resident", "component-offload", "snapshot-offload", "layerwise-offload")  # 0.5.23 server_args
# No '_' (run ids join their parts with '__') and no '.' (so "<run id>.*" never matches a longer run id).
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
MAX_LABEL_CHARS = 100  # a label names folders and files beside the preset, arm and round: 255 bytes in all
# Every benchmark runs sglang's native pipeline: a diffusers fallback is caught by the log gate, never chosen.
BACKEND_PIN = "--backend=sglang"
BENCH_ENV_DEFAULTS = {"FLASHINFER_DISABLE_VERSION_CHECK": "1", "SGLANG_DIFFUSION_SYNC_STAGE_PROFILING": "1"}
# Set by us on every run: NVML and CUDA then number GPUs the same way.
BENCH_ENV_FORCED = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
# Silently overrides the step count (runtime doc §3): never let it leak into a benchmark.
ENV_UNSET = ("SGLANG_TEST_NUM_INFERENCE_STEPS",)
WARMUP_FLAGS = ("--warmup", "--warmup-mode")
WARMUP_RESOLUTIONS, WARMUP_NUM_FRAMES = "--warmup-resolutions", "--warmup-num-frames"
# An idle scheduler busy-polls its socket unless told to sleep (0.5.23 scheduler.event_loop): on a CPU host that spins
# a core the running engine's own compute needs (a warm A/B keeps one engine idle while the other runs).
SLEEP_ON_IDLE = "--sleep-on-idle"


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What the caller chose for one run; validate() rejects the combinations the reference rejects."""

    label: str = "baseline"
    arm: str | None = None  # e.g. "A"/"B" in a campaign, a matrix mode such as "bcg-high"
    round: int | None = None
    position: int | None = None
    sample: int | None = None  # the n-th measured request of one slot (--samples), 1-based
    request: int | None = None  # the manifest request this run sends (--requests-file), 1-based
    quality: str | None = None  # None: the engine's default, pinned as lossless where --quality exists
    warmup: bool = True
    warmup_mode: str | None = None  # --warmup-mode off|request|server (None: request when warmup, as the reference)
    warmup_steps: int | None = None  # --warmup-steps: denoise steps per warmup request
    component_residency: tuple[str, ...] = ()  # --component-residency COMPONENT=MODE ...
    performance_mode: str | None = None  # --performance-mode manual|auto|speed|memory
    breakable_cuda_graph: bool = False
    bcg_text_buckets: tuple[int, ...] = ()
    torch_compile: bool = False
    extra_args: tuple[str, ...] = ()
    arm_args: tuple[str, ...] = ()  # this arm's own flags (--arm-a-args/--arm-b-args), after extra_args
    arm_flag_overrides: tuple[tuple[str, str], ...] = ()  # (flag, value): replaces the preset's value of flag
    arm_options: tuple[str, str] = ("--arm-b-args", "--arm-b-override-flag")  # where arm_args/overrides came from
    save_output: bool = True

    def validate(self) -> None:
        for name, value in (("label", self.label), ("arm", self.arm)):
            if value is not None and not LABEL_PATTERN.match(value):
                raise contract.UsageError("usage.bad_label", f"{name} {value!r} must match {LABEL_PATTERN.pattern}",
                                          "use letters, digits and '-'")
            if value is not None and len(value) > MAX_LABEL_CHARS:
                raise contract.UsageError("usage.bad_label", f"{name} is {len(value)} characters; at most "
                                          f"{MAX_LABEL_CHARS} (it names the run's folders and files)",
                                          "use a shorter label")
        if self.warmup_steps is not None and self.warmup_steps < 1:
            raise contract.UsageError("usage.bad_warmup_steps", f"--warmup-steps must be at least 1, got "
                                      f"{self.warmup_steps}", "use --warmup-steps 1")
        for entry in self.component_residency:
            component, _, mode = entry.partition("=")
            if not component or mode not in RESIDENCY_MODES:
                raise contract.UsageError("usage.bad_component_residency", f"--component-residency {entry!r} is not "
                                          f"COMPONENT=MODE with MODE one of {', '.join(RESIDENCY_MODES)}",
                                          "e.g. --component-residency all=resident")
        if self.warmup_mode is not None and not self.warmup and self.warmup_mode != "off":
            raise contract.UsageError("usage.rejected_combination", f"--no-warmup with --warmup-mode "
                                      f"{self.warmup_mode}", "drop one of them")
        if self.torch_compile and self.breakable_cuda_graph:
            raise contract.UsageError("usage.conflicting_comparators", "torch.compile and breakable CUDA graphs "
                                      "are separate comparators and cannot be combined in one run",
                                      "run them as separate arms")
        if self.bcg_text_buckets and not self.breakable_cuda_graph:
            raise contract.UsageError("usage.buckets_without_bcg", "BCG text buckets given without BCG",
                                      "add --breakable-cuda-graph (or --quality-bcg-matrix)")
        if any(b <= 0 for b in self.bcg_text_buckets):
            raise contract.UsageError("usage.bad_buckets", f"BCG text buckets must be positive: "
                                      f"{list(self.bcg_text_buckets)}", "pass positive integers")
        for n, v in (("round", self.round), ("position", self.position)):
            if v is not None and v < 0:
                raise contract.UsageError("usage.bad_slot", f"{n} must be >= 0, got {v}", "")

    @property
    def run_id_suffix(self) -> str:
        parts = [self.label]
        if self.arm:
            parts.append(self.arm)
        if self.round is not None or self.position is not None:
            parts.append(f"r{self.round or 0:02d}p{self.position or 0:02d}"
                         + (f"s{self.sample:02d}" if self.sample is not None else ""))
        if self.request is not None:
            parts.append(f"q{self.request:03d}")
        return "__".join(parts)


@dataclasses.dataclass(frozen=True)
class Invocation:
    """Everything needed to launch and check one run; built, never executed, here."""

    run_id: str
    preset: str
    argv: tuple[str, ...]
    env_set: Mapping[str, str]  # variables to set (only those that differ from the caller's environment)
    env_copy: Mapping[str, str]  # target -> source variable name, copied at launch (secrets: never a value here)
    env_unset: tuple[str, ...]
    num_gpus: int
    run_dir: Path
    perf_dump_path: Path
    output_dir: Path
    output_file_stem: str
    config_path: Path | None
    config_content: str | None
    required_assets: tuple[Path, ...]
    requires_hf_token: bool
    warnings: tuple[tuple[str, str], ...]
    quality: Mapping[str, Any] | None = None  # {requested, ran, source}: the level the engine runs this request at

    def child_env(self, caller_env: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: the caller's plus this invocation's changes."""
        child = dict(caller_env)
        for name in self.env_unset:
            child.pop(name, None)
        child.update(self.env_set)
        for target, source in self.env_copy.items():
            if source in child:
                child[target] = child[source]
        return child

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "preset": self.preset, "argv": list(self.argv), "env_set": dict(self.env_set),
                "env_copy": dict(self.env_copy), "env_unset": list(self.env_unset), "num_gpus": self.num_gpus,
                "artifacts": {"run_dir": str(self.run_dir), "perf_dump_path": str(self.perf_dump_path),
                              "output_dir": str(self.output_dir), "output_file_stem": self.output_file_stem,
                              "config_path": str(self.config_path) if self.config_path else None},
                "config_content": self.config_content, "required_assets": [str(p) for p in self.required_assets],
                "requires_hf_token": self.requires_hf_token, "quality": None if self.quality is None else
                dict(self.quality), "warnings": [{"code": c, "message": m} for c, m in self.warnings]}

    @property
    def quality_level(self) -> str | None:
        """The canonical level the engine runs at (an alias resolved); None on an engine without --quality."""
        return None if self.quality is None else self.quality["ran"]


def output_file_stem(rid: str) -> str:
    """The media file name the engine keeps as given: sglang sanitises ``--output-file-name`` (it collapses ``__``
    to ``_``), so a name passed with ``__`` is saved under another name and the artifact gate would miss it.
    Labels cannot contain ``_``, so single underscores still separate the parts unambiguously."""
    return re.sub(r"_+", "_", rid)


def run_id(preset: Preset, options: RunOptions) -> str:
    """``<preset>__<label>[__<arm>][__rNNpNN]``. Labels and arms hold neither '_' nor '.', so neither
    ``flux__base__*`` nor ``flux__base.*`` can match a file of label ``baseline`` (or of any other run)."""
    return f"{preset.name}__{options.run_id_suffix}"


def _preset_args(preset: Preset, overrides: Sequence[tuple[str, str]], option: str) -> tuple[str, ...]:
    """The preset's engine flags with an arm's ``FLAG=VALUE`` overrides in place of the preset's values; a flag the
    preset does not set is refused (it is added with the arm's args, not overridden)."""
    wanted = dict(overrides)
    split = argv_tokens.split_flags(preset.extra_args)
    absent = sorted(set(wanted) - {flag for flag, _, _ in split})
    if absent:
        raise contract.UsageError(
            "usage.bad_flag_override", f"{option}: preset {preset.name} does not set {', '.join(absent)}",
            f"add a flag the preset does not set with {option.replace('-override-flag', '-args')}; {option} "
            f"changes one it sets ({', '.join(flag for flag, _, _ in split) or 'it sets none'})")
    return tuple(token for flag, _, tokens in split
                 for token in ([flag, wanted[flag]] if flag in wanted else tokens))


def build_invocation(preset: Preset, options: RunOptions, engine: EngineCapabilities, *,
                     sglang_cli: Sequence[str], output_root: Path, assets_dir: Path,
                     caller_env: Mapping[str, str], model_path: str | None = None,
                     asset_filenames: Mapping[str, str] | None = None) -> Invocation:
    """The invocation for one run, or a ToolError naming why it cannot be built.

    ``model_path`` is required for presets with ``local_model`` (the caller resolves it, e.g. with
    ``tiny_model.ensure_local_model``); ``asset_filenames`` maps asset ids to file names in ``assets_dir``.
    """
    options.validate()
    _check_buildable(preset, model_path)
    warnings: list[tuple[str, str]] = []
    rid = run_id(preset, options)
    run_dir = output_root / rid
    perf_dump = run_dir / f"{rid}.perf.json"
    request = _request_args(preset, run_dir / f"{rid}.config.json", model_path, assets_dir, asset_filenames)
    preset_args = _preset_args(preset, options.arm_flag_overrides, options.arm_options[1])
    preset_flags = {argv_tokens.flag_name(t) for t in preset_args}
    tool_args = [*_quality_args(engine, options, warnings), *(["--save-output"] if options.save_output else []),
                 *cpu_idle_args(preset, engine, [*preset_args, *options.extra_args, *options.arm_args]),
                 *_residency_args(engine, options, preset_flags), *_bcg_args(preset, engine, options, preset_flags,
                                                                             warnings),
                 *_compile_args(preset, options, warnings),
                 "--perf-dump-path", str(perf_dump), "--output-path", str(run_dir), "--output-file-name",
                 output_file_stem(rid)]
    flag_checks.refuse_duplicates(preset, preset_args, [*request.argv, *tool_args], options.extra_args,
                                  options.arm_args, options.arm_options)
    engine_argv = [*request.argv, *preset_args, *tool_args, *options.extra_args, *options.arm_args]
    flag_checks.check_flags(preset, engine, engine_argv, warnings)
    _warn_offload_autofill(engine, options, preset_flags, warnings)
    env_set, env_copy, env_unset = _child_env(preset, caller_env, warnings)
    return Invocation(run_id=rid, preset=preset.name, argv=(*sglang_cli, *engine_argv), env_set=env_set,
                      env_copy=env_copy, env_unset=env_unset, num_gpus=preset.num_gpus, run_dir=run_dir,
                      perf_dump_path=perf_dump, output_dir=run_dir, output_file_stem=output_file_stem(rid),
                      config_path=request.config_path, config_content=request.config_content,
                      required_assets=request.required_assets, requires_hf_token=preset.gated,
                      warnings=tuple(warnings), quality=_quality_record(engine, engine_argv))


def _check_buildable(preset: Preset, model_path: str | None) -> None:
    if preset.unknown_fields:
        raise contract.PreconditionError(
            "preset.incomplete", f"preset {preset.name!r} cannot be built: the reference leaves "
            f"{', '.join(preset.unknown_fields)} unknown" + (f" (prompt: {preset.prompt_summary})"
                                                             if preset.prompt_summary else ""),
            "fill the field in data/presets.yaml from upstream bench_diffusion_denoise.py, or pick a complete "
            "preset (--list-models --json shows 'complete')", details={"unknown_fields": list(preset.unknown_fields)})
    if preset.local_model and not model_path:
        raise contract.PreconditionError("preset.local_model_unresolved",
                                         f"preset {preset.name!r} needs the local model {preset.local_model!r}",
                                         "resolve it first (sgl_diffusion_bench.engine.tiny_model.ensure_local_model)")


@dataclasses.dataclass(frozen=True)
class _Request:
    """The request's own flags (model, prompt, seed, input image, config file, shape, parallel layout)."""

    argv: tuple[str, ...]
    required_assets: tuple[Path, ...]
    config_path: Path | None
    config_content: str | None


def _request_args(preset: Preset, config_path: Path, model_path: str | None, assets_dir: Path,
                  asset_filenames: Mapping[str, str] | None) -> _Request:
    argv = [BACKEND_PIN, f"--model-path={model_path or preset.model}", f"--prompt={preset.prompt}",
            f"--seed={preset.seed}"]
    if preset.negative_prompt is not None:
        argv.append(f"--negative-prompt={preset.negative_prompt}")
    required_assets: list[Path] = []
    if preset.asset:
        filename = (asset_filenames or {}).get(preset.asset)
        if filename is None:
            raise contract.InputError("input.unknown_asset", f"preset {preset.name!r} names asset {preset.asset!r}, "
                                      "which the asset manifest does not list", "add it to data/assets.yaml")
        required_assets.append(assets_dir / filename)
        argv.append(f"--image-path={assets_dir / filename}")
    config_content = None
    if preset.config_overrides is not None:
        config_content = json.dumps(preset.config_overrides, indent=2, sort_keys=True) + "\n"
        argv.append(f"--config={config_path}")
    argv += preset.shape_args()
    if preset.num_gpus > 1:
        argv.append(f"--num-gpus={preset.num_gpus}")
    return _Request(tuple(argv), tuple(required_assets), config_path if config_content else None, config_content)


def _quality_args(engine: EngineCapabilities, options: RunOptions, warnings: list[tuple[str, str]]) -> list[str]:
    if engine.quality_values is None:
        if options.quality is not None:
            flag_checks.refuse_missing(["--quality"], engine, f"--quality {options.quality}")
        warnings.append(("engine.no_quality_levels", f"{engine.label} has no --quality; the run uses the "
                         "engine's only numerics (comparable to other runs on this engine only)"))
        return []
    quality = options.quality or DEFAULT_QUALITY
    if not engine.quality_values:
        flag_checks.refuse_missing(["--quality"], engine, f"--quality {quality}")
    if quality not in engine.quality_values:
        raise contract.PreconditionError(
            "engine.quality_unsupported", f"{engine.label} accepts --quality {'|'.join(engine.quality_values)}, "
            f"not {quality!r}", "pick one the engine accepts")
    return [f"--quality={quality}"]


def cpu_idle_args(preset: Preset, engine: EngineCapabilities, given: Sequence[str]) -> list[str]:
    """``--sleep-on-idle`` for a CPU preset when the engine has it and the caller did not set it: a GPU run keeps
    the engine's default (a spinning scheduler there costs a host core, not the device's time)."""
    if preset.num_gpus or not engine.has_flag(SLEEP_ON_IDLE):
        return []
    return [] if SLEEP_ON_IDLE in {argv_tokens.flag_name(t) for t in given} else [SLEEP_ON_IDLE]


def cpu_server_warmup_args(preset: Preset, engine: EngineCapabilities, given: Sequence[str]) -> list[str]:
    """A CPU preset's ``sglang serve`` warms up at the preset's own shape, not the model's default one (1024x1024 at
    50 steps for FLUX: 9 s; 832x480x17f for Wan: over 4 minutes of a tiny model on CPU), unless the caller set it."""
    if preset.num_gpus or not (preset.width and preset.height) or not engine.has_flag(WARMUP_RESOLUTIONS):
        return []
    if {argv_tokens.flag_name(t) for t in given} & {WARMUP_RESOLUTIONS, WARMUP_NUM_FRAMES}:
        return []
    argv = [WARMUP_RESOLUTIONS, f"{preset.width}x{preset.height}"]
    return argv + ([WARMUP_NUM_FRAMES, str(preset.num_frames)]
                   if preset.num_frames and engine.has_flag(WARMUP_NUM_FRAMES) else [])


def _residency_args(engine: EngineCapabilities, options: RunOptions, preset_flags: set[str | None]) -> list[str]:
    """Warm-up, performance mode and component placement, each checked against the probe."""
    argv: list[str] = []
    if options.warmup_mode is not None:
        flag_checks.require_choice(engine, "--warmup-mode", options.warmup_mode)
        argv += ["--warmup-mode", options.warmup_mode]
    elif options.warmup and not preset_flags & set(WARMUP_FLAGS):
        if engine.warmup_flag == "--warmup-mode":
            argv += ["--warmup-mode", WARMUP_MODE_DEFAULT]
        elif engine.warmup_flag == "--warmup":
            argv.append("--warmup")
        else:
            flag_checks.refuse_missing(["--warmup-mode"], engine, "warmup (pass --no-warmup to run cold)")
    if options.warmup_steps is not None:
        flag_checks.require_choice(engine, "--warmup-steps", None)
        argv += ["--warmup-steps", str(options.warmup_steps)]
    if options.performance_mode is not None:
        flag_checks.require_choice(engine, "--performance-mode", options.performance_mode)
        argv += ["--performance-mode", options.performance_mode]
    if options.component_residency:
        flag_checks.require_choice(engine, "--component-residency", None)
        argv += ["--component-residency", *options.component_residency]
    return argv


def _bcg_args(preset: Preset, engine: EngineCapabilities, options: RunOptions, preset_flags: set[str | None],
              warnings: list[tuple[str, str]]) -> list[str]:
    if not options.breakable_cuda_graph:
        return []
    if not engine.has_bcg:
        flag_checks.refuse_missing(["--enable-breakable-cuda-graph"], engine, "--breakable-cuda-graph")
    argv = ["--enable-breakable-cuda-graph"]
    if "--warmup-resolutions" not in preset_flags:
        resolutions = list(preset.bcg_warmup_resolutions) or (
            [f"{preset.width}x{preset.height}"] if preset.width and preset.height else [])
        if resolutions:
            argv += ["--warmup-resolutions", *resolutions]
        else:
            warnings.append(("bcg.no_warmup_resolution", f"preset {preset.name!r} has no shape or "
                             "bcg_warmup_resolutions: BCG seeds only the model's default resolution"))
    if "--warmup-num-frames" not in preset_flags and preset.num_frames:
        argv += ["--warmup-num-frames", str(preset.num_frames)]
    if options.bcg_text_buckets:
        argv += ["--bcg-text-buckets", *map(str, options.bcg_text_buckets)]
    return argv


def _compile_args(preset: Preset, options: RunOptions, warnings: list[tuple[str, str]]) -> list[str]:
    if not options.torch_compile:
        return []
    if preset.force_eager:
        warnings.append(("compile.force_eager", f"preset {preset.name!r} is always eager; "
                         "--torch-compile was not applied"))
        return []
    return ["--enable-torch-compile"]


def _quality_record(engine: EngineCapabilities, engine_argv: Sequence[str]) -> dict[str, Any] | None:
    if engine.quality_values is None:
        return None
    passed = argv_tokens.last_value(engine_argv, "--quality")
    return {"requested": passed, "ran": engine.canonical_quality(passed),
            "source": "the last --quality on the argv, resolved by the engine's alias table"
            + (f" ({passed} -> {engine.canonical_quality(passed)})" if passed != engine.canonical_quality(passed)
               else "")}


def _warn_offload_autofill(engine: EngineCapabilities, options: RunOptions, preset_flags: set[str | None],
                           warnings: list[tuple[str, str]]) -> None:
    given = preset_flags | {argv_tokens.flag_name(t) for t in (*options.extra_args, *options.arm_args)}
    if engine.version and "--performance-mode" not in engine.flags and "--dit-cpu-offload" not in given:
        warnings.append(("engine.offload_autofill", f"{engine.label} fills unset offload flags itself (DiT and "
                         "text-encoder CPU offload on); the numbers include offload traffic unless you pass "
                         "--extra-args='--dit-cpu-offload false --text-encoder-cpu-offload false'"))


def _child_env(preset: Preset, caller_env: Mapping[str, str],
               warnings: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """What the engine's environment sets (the caller's values win, except the forced ones), copies and unsets."""
    env_set = {name: value for name, value in {**BENCH_ENV_DEFAULTS, **preset.env}.items() if name not in caller_env}
    env_set.update({name: value for name, value in BENCH_ENV_FORCED.items() if caller_env.get(name) != value})
    target, source = hf_settings.TOKEN_MIRROR
    env_copy = {target: source} if caller_env.get(source) and not caller_env.get(target) else {}
    env_unset = tuple(n for n in ENV_UNSET if n in caller_env)
    if preset.gated and not hf_settings.token_vars_set(caller_env):
        warnings.append(("hf.token_missing", f"preset {preset.name!r} is gated and none of "
                         f"{', '.join(hf_settings.TOKEN_VARS)} is set: {hf_settings.MISSING_TOKEN_HINT}"))
    return env_set, env_copy, env_unset
