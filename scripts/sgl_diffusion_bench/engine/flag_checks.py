"""Refusals of a command the engine would not run as asked, each naming the flag, the installed engine and what to do:
a flag the engine lacks or a value its parser rejects, a flag given twice (the later copy would silently win), and
the check of every flag of a finished command against the probe."""

from __future__ import annotations

from typing import Sequence

from .. import argv_tokens, contract
from ..presets import Preset
from .capabilities import EngineCapabilities


MISSING_FLAG_HINTS = {
    "--quality": "this engine has no quality levels: drop --quality (quality comparisons need sglang 0.5.23 or main)",
    "--warmup-mode": "this engine spells warmup --warmup; the builder uses it by itself, so the preset forcing "
                     "--warmup-mode is what needs a newer engine",
    "--enable-breakable-cuda-graph": "breakable CUDA graphs need a newer sglang (0.5.23 or main); drop "
                                     "--breakable-cuda-graph/--quality-bcg-matrix",
    "--bcg-text-buckets": "BCG text buckets need a newer sglang; drop --bcg-text-buckets",
    "--warmup-num-frames": "BCG video warmup needs a newer sglang",
    "--component-residency": "needs sglang 0.5.23 or main; this engine pins placement only through "
                             "--dit-cpu-offload false --text-encoder-cpu-offload false",
    "--performance-mode": "this engine has no performance modes (it always auto-fills unset offload flags): "
                          "upgrade sglang or pick another preset",
    "--warmup-steps": "this engine has no --warmup-steps (its warmup request runs the full step count)",
}


# Where to set a flag that the tool already builds, instead of repeating it in --extra-args.


DUPLICATE_FLAG_HINTS = {
    "--model-path": "use --model-path DIR", "--num-gpus": "pick a preset for that many GPUs (e.g. flux-1gpu)",
    **{f"--{f.replace('_', '-')}": f"use --override {f}=VALUE" for f in (
        "width", "height", "num_frames", "fps", "num_inference_steps", "guidance_scale", "seed", "prompt")},
    "--warmup": "the tool asks for a warm-up itself; use --no-warmup to run without",
    "--warmup-mode": "the tool asks for a warm-up itself; use --no-warmup to run without",
    "--enable-breakable-cuda-graph": "use --breakable-cuda-graph, or --campaign abba",
    "--warmup-resolutions": "BCG runs warm up at the request's shape; change it with --override width=/height=",
}


def require_choice(engine: EngineCapabilities, flag: str, value: str | None) -> None:
    """A first-class option's flag must exist in the engine, and its value be one the engine's parser accepts."""
    if not engine.has_flag(flag):
        refuse_missing([flag], engine, f"{flag}{' ' + value if value else ''}")
    choices = engine.choices.get(flag)
    if value is not None and choices and value not in choices:
        raise contract.PreconditionError("engine.choice_unsupported", f"{engine.label} accepts {flag} "
                                         f"{'|'.join(choices)}, not {value!r}", "pick one the engine accepts")


def refuse_missing(missing: list[str], engine: EngineCapabilities, where: str) -> None:
    if engine.degraded:  # the flags may well exist: the degraded probe only read the sources
        raise contract.PreconditionError(
            "engine.probe_degraded", f"{engine.label}: cannot confirm {', '.join(missing)} (needed by {where}) "
            "because the probe could not import the engine's parser", engine.degraded_reason(),
            details={"missing_flags": missing, "engine_version": engine.version})
    hints = [f"{flag}: {MISSING_FLAG_HINTS.get(flag, 'upgrade sglang or choose a preset without it')}"
             for flag in missing]
    raise contract.PreconditionError(
        "engine.flag_missing", f"{engine.label} has no {', '.join(missing)} (needed by {where})",
        "; ".join(hints), details={"missing_flags": missing, "engine_version": engine.version})


def refuse_duplicates(preset: Preset, preset_args: Sequence[str], tool_args: Sequence[str], extra_args: Sequence[str],
                      arm_args: Sequence[str], arm_options: tuple[str, str]) -> None:
    """A flag given twice would reach the engine twice and the later one would silently win: refuse instead,
    naming the option each copy came from and, for a preset's flag, the option that changes it for one arm."""
    by_preset = f"preset {preset.name}"
    duplicates = argv_tokens.duplicate_flags([(by_preset, preset_args), ("the tool", tool_args),
                                              ("--extra-args", extra_args), (arm_options[0], arm_args)])
    if duplicates:
        flags = sorted(duplicates)
        preset_hint = ("the preset sets it; change its value for this arm with " + arm_options[1]
                       + " {name}=VALUE" if arm_args else "the preset sets it; change its value for one arm "
                       "with --campaign ab --arm-b-override-flag {name}=VALUE (or --arm-a-override-flag)")
        raise contract.UsageError(
            "usage.duplicate_flag", "flag(s) given more than once: " + "; ".join(
                f"{f} (by {' and '.join(dict.fromkeys(duplicates[f]))})" for f in flags),
            "; ".join(f"{f}: " + DUPLICATE_FLAG_HINTS.get(
                f, preset_hint.format(name=f[2:]) if by_preset in duplicates[f] else "give it once") for f in flags),
            details={"duplicates": duplicates})


def check_flags(preset: Preset, engine: EngineCapabilities, engine_argv: Sequence[str],
                 warnings: list[tuple[str, str]]) -> None:
    """Every flag on the command must exist in the engine; a per-component form is accepted with a warning."""
    missing, model_dependent = [], []
    for flag in dict.fromkeys(filter(None, map(argv_tokens.flag_name, engine_argv))):
        accepted = engine.flag_acceptance(flag)
        if accepted is None:
            missing.append(flag)
        elif accepted == "model-dependent":
            model_dependent.append(flag)
    if missing:
        refuse_missing(sorted(missing), engine, f"preset {preset.name!r} with these options")
    for flag in model_dependent:
        warnings.append(("engine.flag_model_dependent", f"{flag} is a per-component or pipeline-contributed flag: "
                         f"{engine.label} accepts its form, but whether the model has that component or pipeline "
                         "option is only known once the model loads"))
