"""What each nightly scenario of the installed engine measured: model, output size, frames and GPU count, read from
the engine's own case definitions (``multimodal_gen/test/server/gpu_cases.py`` with the sampling presets of
``testcase_configs.py`` and the model names of ``multimodal_gen/test/test_utils.py``) by parsing their source, never
importing it (that loads torch and the whole engine, and picks a GPU platform).

A case that takes its task's default request names no size in code; its task is then read from the task token of its
id (``flux_image_t2i`` -> t2i), the engine's own naming, and a case whose id carries none has an unknown size. A figure
that cannot be read stays None: the caller treats it as unconfirmed, never as a match.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

CASES_SOURCE = Path("multimodal_gen/test/server/gpu_cases.py")
CONFIGS_SOURCE = Path("multimodal_gen/test/server/testcase_configs.py")
MODEL_NAMES_SOURCE = Path("multimodal_gen/test/test_utils.py")
# testcase_configs.get_default_sampling_params_for_model_task, by the task token of a case id.
TASK_DEFAULTS = {"t2i": "T2I_sampling_params", "i2i": "TI2I_sampling_params", "ti2i": "TI2I_sampling_params",
                 "t2v": "T2V_sampling_params", "i2v": "TI2V_sampling_params", "ti2v": "TI2V_sampling_params"}
CASE_BUILDERS = ("DiffusionTestCase", "_make_modelopt_ci_case")
# Cases listed in this module-level list run on two GPUs (gpu_cases: _with_default_num_gpus(TWO_GPU_CASES, 2)).
TWO_GPU_LIST = "TWO_GPU_CASES"


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _assignments(tree: ast.Module | None) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in tree.body if tree else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
    return found


def _constant(node: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names and depth < 8:
        return _constant(names[node.id], names, depth + 1)
    return None


def _call_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {kw.arg: kw.value for kw in call.keywords if kw.arg}


def _steps_in(extras: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> Any:
    """num_inference_steps of an ``extras={...}`` literal, through ``**NAME`` splats of module dicts."""
    if isinstance(extras, ast.Name) and extras.id in names and depth < 8:
        return _steps_in(names[extras.id], names, depth + 1)
    if not isinstance(extras, ast.Dict):
        return None
    steps = None
    for key, value in zip(extras.keys, extras.values, strict=True):
        if key is None:
            steps = _steps_in(value, names, depth + 1) if steps is None else steps
        elif _constant(key, names) == "num_inference_steps":
            steps = _constant(value, names)
    return steps


def _sampling(node: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> dict[str, Any] | None:
    """output_size, num_frames and num_inference_steps of a sampling-params expression, None when not readable."""
    if depth > 8 or node is None:
        return None
    if isinstance(node, ast.Name):
        return _sampling(names.get(node.id), names, depth + 1)
    name = _call_name(node)
    if name == "replace" and isinstance(node, ast.Call) and node.args:
        base = _sampling(node.args[0], names, depth + 1)
        if base is None:
            return None
        return {**base, **_fields(_keywords(node), names)}
    if name == "DiffusionSamplingParams" and isinstance(node, ast.Call):
        return {"output_size": None, "num_frames": None, "steps": None, **_fields(_keywords(node), names)}
    return None


def _fields(keywords: dict[str, ast.expr], names: dict[str, ast.expr]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "output_size" in keywords:
        fields["output_size"] = _constant(keywords["output_size"], names) or None
    if "num_frames" in keywords:
        fields["num_frames"] = _constant(keywords["num_frames"], names)
    if "extras" in keywords:
        fields["steps"] = _steps_in(keywords["extras"], names)
    return fields


def _size(output_size: Any) -> tuple[int, int] | None:
    """testcase_configs' output_size is "WIDTHxHEIGHT"."""
    if not isinstance(output_size, str) or output_size.count("x") != 1:
        return None
    width, height = output_size.split("x")
    return (int(width), int(height)) if width.isdigit() and height.isdigit() else None


def _task_default(case_id: str, names: dict[str, ast.expr]) -> dict[str, Any] | None:
    token = next((t for t in case_id.lower().split("_") if t in TASK_DEFAULTS), None)
    return _sampling(ast.Name(id=TASK_DEFAULTS[token]), names) if token else None


def _case(call: ast.Call, names: dict[str, ast.expr], two_gpu: bool) -> tuple[str, dict[str, Any]] | None:
    keywords = _keywords(call)
    case_id = _constant(call.args[0] if call.args else keywords.get("id"), names)
    if not isinstance(case_id, str):
        return None
    if _call_name(call) == "DiffusionTestCase":
        server = call.args[1] if len(call.args) > 1 else keywords.get("server_args")
        server_kw = _keywords(server) if isinstance(server, ast.Call) else {}
        params_node = call.args[2] if len(call.args) > 2 else keywords.get("sampling_params")
    else:  # _make_modelopt_ci_case(case_id, model_path=..., sampling_params=..., ...)
        server_kw, params_node = keywords, keywords.get("sampling_params")
    params = _sampling(params_node, names) if params_node is not None else _task_default(case_id, names)
    model, gpus = _constant(server_kw.get("model_path"), names), _constant(server_kw.get("num_gpus"), names)
    size = _size((params or {}).get("output_size"))
    return case_id, {"model": model if isinstance(model, str) else None,
                     "width": size[0] if size else None, "height": size[1] if size else None,
                     "num_frames": (params or {}).get("num_frames"), "steps": (params or {}).get("steps"),
                     "num_gpus": gpus if isinstance(gpus, int) else (2 if two_gpu else 1)}


def read_scenarios(package_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Scenario id -> what its case asked for (model path, width, height, num_frames, steps, num_gpus); empty when
    the engine ships no readable case definitions."""
    root = Path(package_dir)
    cases_tree = _parse(root / CASES_SOURCE)
    if cases_tree is None:
        return {}
    names = {**_assignments(_parse(root / MODEL_NAMES_SOURCE)), **_assignments(_parse(root / CONFIGS_SOURCE)),
             **_assignments(cases_tree)}
    two_gpu_calls = {id(n) for node in cases_tree.body if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == TWO_GPU_LIST for t in node.targets)
                     and isinstance(node.value, ast.List) for n in ast.walk(node.value)}
    scenarios: dict[str, dict[str, Any]] = {}
    for node in ast.walk(cases_tree):
        if isinstance(node, ast.Call) and _call_name(node) in CASE_BUILDERS:
            case = _case(node, names, id(node) in two_gpu_calls)
            if case and case[0] not in scenarios:
                scenarios[case[0]] = case[1]
    return scenarios
