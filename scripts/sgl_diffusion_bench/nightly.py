"""Nightly drift check: do the nightly-aligned presets still match the CI comparison config?

Implements the reference's `--validate-nightly-alignment` (upstream-skill §2.12): case order, model path, prompt,
image presence, seed, env, generated request config and the CLI comparison with its token parsing rules. Fields the
catalog cannot know (listed in a preset's ``unknown_fields``, or a prompt that is the bundle's own text) are reported
as unverified, never as matching.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import contract, inputs, work_dirs
from .argv_tokens import parse_cli_tokens
from .presets import Preset

CONFIG_RELATIVE_PATH = Path("scripts/ci/utils/diffusion/comparison_configs.json")
CASE_CLI_FIELDS = ("width", "height", "num_frames", "fps", "num_inference_steps", "guidance_scale")
SERVE_ARGS_IGNORED = ("warmup", "warmup-mode")
DEFAULT_SEED = 42
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$")


def default_config_path() -> Path | None:
    root, _ = work_dirs.repo_root()
    return root / CONFIG_RELATIVE_PATH if root is not None else None


def load_config(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise contract.PreconditionError("nightly.config_missing", f"Missing nightly config: {path}",
                                         "pass --nightly-config PATH; the file is in a full sglang checkout "
                                         f"({CONFIG_RELATIVE_PATH}), not in the wheel")
    try:
        document = inputs.load_json(path, "input.nightly_config_unreadable")
    except contract.InputError as exc:
        raise contract.InputError("input.nightly_config_unreadable", f"cannot read nightly config {path}: "
                                  f"{exc.message}",
                                  "pass the comparison_configs.json from the sglang checkout") from None
    cases = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in cases):
        raise contract.InputError("input.nightly_config_invalid",
                                  f"{path}: expected an object with a 'cases' list of objects that each have an 'id'",
                                  "pass the comparison_configs.json from the sglang checkout")
    for index, case in enumerate(cases):
        wrong = _wrong_fields(case)
        if wrong:
            raise contract.InputError("input.nightly_config_invalid",
                                      f"{path}: case {index} ({case['id']!r}) has wrongly typed fields: "
                                      + ", ".join(wrong), "pass the comparison_configs.json from the sglang checkout")
    return document


_NUMBER_FIELDS = (*CASE_CLI_FIELDS, "seed", "num_gpus")
_TEXT_FIELDS = ("model", "prompt")


def _wrong_fields(case: Mapping[str, Any]) -> list[str]:
    """The fields this check reads whose type is not what the CI config writes (None means absent)."""
    wrong = [f for f in _NUMBER_FIELDS if case.get(f) is not None
             and (isinstance(case[f], bool) or not isinstance(case[f], (int, float)))]
    wrong += [f for f in _TEXT_FIELDS if case.get(f) is not None and not isinstance(case[f], str)]
    if case.get("reference_image") is not None and not isinstance(case["reference_image"], (bool, str)):
        wrong.append("reference_image")  # upstream writes true (the config's test_image_url); a path also works
    if case.get("sglang_request_extra") is not None and not isinstance(case["sglang_request_extra"], dict):
        wrong.append("sglang_request_extra")
    frameworks = case.get("frameworks", {})
    sglang = frameworks.get("sglang", {}) if isinstance(frameworks, dict) else None
    if not isinstance(sglang, dict):
        return [*wrong, "frameworks.sglang"]
    serve_args, extra_env = sglang.get("serve_args"), sglang.get("extra_env")
    if serve_args is not None:
        try:
            parse_cli_tokens(shlex.split(serve_args) if isinstance(serve_args, str) else None)
        except (TypeError, ValueError, AttributeError):
            wrong.append("frameworks.sglang.serve_args")
    if extra_env is not None and not (isinstance(extra_env, dict)
                                      and all(isinstance(v, str) for v in extra_env.values())):
        wrong.append("frameworks.sglang.extra_env")
    return wrong


def _norm(value: Any) -> str:
    """CLI values compare as text, numbers numerically ("5" == "5.0"), booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if _NUMBER.match(text):
        return format(float(text), "g")
    return text.lower() if text.lower() in ("true", "false") else text


def expected_cli(case: Mapping[str, Any]) -> dict[str, str]:
    expected = {f.replace("_", "-"): _norm(case[f]) for f in CASE_CLI_FIELDS if case.get(f) is not None}
    if (case.get("num_gpus") or 1) > 1:
        expected["num-gpus"] = _norm(case["num_gpus"])
    serve_args = case.get("frameworks", {}).get("sglang", {}).get("serve_args", "")
    for key, value in parse_cli_tokens(shlex.split(serve_args or "")).items():
        if key not in SERVE_ARGS_IGNORED:
            expected[key] = _norm(value)
    return expected


def actual_cli(preset: Preset) -> dict[str, str]:
    tokens = [*preset.shape_args(), *([f"--num-gpus={preset.num_gpus}"] if preset.num_gpus > 1 else []),
              *preset.extra_args]
    return {k: _norm(v) for k, v in parse_cli_tokens(tokens).items()}


def expected_config(case: Mapping[str, Any]) -> dict[str, Any]:
    expected = {k: v for k, v in (case.get("sglang_request_extra") or {}).items() if v is not None}
    if case.get("num_inference_steps") is not None:
        expected["num_inference_steps"] = case["num_inference_steps"]
    return expected


def _dict_diff(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    parts = []
    for key in sorted(set(actual) | set(expected)):
        a, e = actual.get(key, "<absent>"), expected.get(key, "<absent>")
        if a != e:
            parts.append(f"{key}: preset {a!r} vs case {e!r}")
    return "; ".join(parts)


def check_preset(preset: Preset, case: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(problems, unverified) for one preset against its case."""
    problems: list[dict[str, Any]] = []
    unverified: list[dict[str, str]] = []

    def problem(field: str, message: str, preset_value: Any, case_value: Any) -> None:
        problems.append({"field": field, "message": f"{preset.name}: {message}", "preset_value": preset_value,
                         "case_value": case_value})

    if preset.model != case.get("model"):
        problem("model", f"model path differs: preset {preset.model!r} vs case {case.get('model')!r}",
                preset.model, case.get("model"))
    if "prompt" in preset.unknown_fields:
        unverified.append({"field": "prompt", "reason": "the catalog does not know this preset's prompt"})
    elif preset.prompt_source == "bundle":
        unverified.append({"field": "prompt", "reason": "the preset's prompt is the bundle's own text of the "
                           "content the reference describes (prompt_source: bundle), not the case's"})
    elif preset.prompt != case.get("prompt"):
        problem("prompt", f"prompt differs: preset {preset.prompt!r} vs case {case.get('prompt')!r}",
                preset.prompt, case.get("prompt"))
    has_image, case_image = preset.asset is not None, bool(case.get("reference_image"))
    if has_image != case_image:
        problem("image", f"image presence differs: preset has image={has_image}, case has reference_image="
                f"{case_image}", has_image, case_image)
    if preset.seed != case.get("seed", DEFAULT_SEED):
        problem("seed", f"seed differs: preset {preset.seed} vs case {case.get('seed')}", preset.seed,
                case.get("seed"))
    case_env = (case.get("frameworks", {}).get("sglang", {}).get("extra_env") or {})
    if dict(preset.env) != case_env:
        problem("env", f"env differs: {_dict_diff(dict(preset.env), case_env)}", dict(preset.env), case_env)
    if preset.config_overrides is not None:
        actual_cfg, expected_cfg = dict(preset.config_overrides), expected_config(case)
        for field in preset.unknown_fields:
            if field.startswith("config_overrides."):
                key = field.split(".", 1)[1]
                actual_cfg.pop(key, None)
                expected_cfg.pop(key, None)
                unverified.append({"field": field, "reason": "the catalog does not know this config entry"})
        if actual_cfg != expected_cfg:
            problem("config_overrides", f"generated request config differs: {_dict_diff(actual_cfg, expected_cfg)}",
                    actual_cfg, expected_cfg)
    ignored = set(preset.nightly_cli_ignored)
    expected = {k: v for k, v in expected_cli(case).items() if k not in ignored}
    actual = {k: v for k, v in actual_cli(preset).items() if k not in ignored}
    if actual != expected:
        problem("cli", f"CLI args differ: {_dict_diff(actual, expected)}", actual, expected)
    return problems, unverified


def check_alignment(presets: Iterable[Preset], config: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a nightly-check.v1 document (without the envelope)."""
    nightly = [p for p in presets if p.nightly_case_id]
    case_ids = [c["id"] for c in config["cases"]]
    cases = {c["id"]: c for c in config["cases"]}
    preset_order = [p.nightly_case_id for p in nightly]
    messages = []
    if preset_order != case_ids:
        messages.append(f"nightly case order differs: presets {preset_order} vs config {case_ids}")
    rows = []
    for preset in nightly:
        case = cases.get(preset.nightly_case_id)
        if case is None:
            problems = [{"field": "case", "message": f"{preset.name}: case {preset.nightly_case_id!r} is not in "
                         "the nightly config", "preset_value": preset.nightly_case_id, "case_value": None}]
            unverified: list[dict[str, str]] = []
        else:
            problems, unverified = check_preset(preset, case)
        messages += [p["message"] for p in problems]
        rows.append({"preset": preset.name, "case_id": preset.nightly_case_id, "ok": not problems,
                     "problems": problems, "unverified": unverified})
    return {"ok": not messages, "order_ok": preset_order == case_ids, "preset_order": preset_order,
            "config_order": case_ids, "presets": rows, "problems": messages}


def render_text(payload: Mapping[str, Any], config_path: Path) -> str:
    if payload["ok"]:
        lines = [f"Nightly alignment check passed: presets match {config_path}."]
    else:
        lines = ["Nightly alignment check failed:", *(f"- {m}" for m in payload["problems"])]
    for row in payload["presets"]:
        for u in row["unverified"]:
            lines.append(f"  (unverified) {row['preset']}: {u['field']}: {u['reason']}")
    return "\n".join(lines)
