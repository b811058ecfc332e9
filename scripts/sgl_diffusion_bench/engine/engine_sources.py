"""The installed engine's parser sources: which files build `sglang generate`'s parser, and what their literal
``add_argument`` calls say (the probe's ``static_source`` method, used when the parser cannot be imported).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterable

SAMPLING_SOURCE = "multimodal_gen/configs/sample/sampling_params.py"  # SamplingParams.add_cli_args: per-request flags
GENERATE_REQUEST_FLAGS = ("--perf-dump-path", "--output-file-path")  # generate_cmd applies them per call
GENERATE_SOURCE = "multimodal_gen/runtime/entrypoints/cli/generate.py"
PARSER_SOURCES = ("multimodal_gen/runtime/entrypoints/cli/generate.py", "multimodal_gen/runtime/server_args.py",
                  "multimodal_gen/runtime/server_args", "multimodal_gen/configs/sample/sampling_params.py",
                  "multimodal_gen/configs/pipeline_configs/base.py", "multimodal_gen/configs/quantization")


def source_files(package_dir: Path) -> list[Path]:
    files = []
    for rel in PARSER_SOURCES:
        path = package_dir / rel
        if path.is_dir():
            files.extend(sorted(path.rglob("*.py")))
        elif path.is_file():
            files.append(path)
    return files


def _literal_option(node: ast.AST) -> str | None:
    """An option string from a str constant or an f-string whose placeholders are prefixes (rendered empty)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def static_request_flags(package_dir: Path) -> frozenset[str] | None:
    """The per-request flags as the sources say: literal options in ``sampling_params.py`` (None if unreadable)."""
    path = package_dir / SAMPLING_SOURCE
    if not path.is_file():
        return None
    options = {o for a in static_parser_actions(package_dir, [path]) for o in a["options"] if o.startswith("--")}
    return frozenset(options | set(GENERATE_REQUEST_FLAGS)) if options else None


def static_parser_actions(package_dir: Path, files: Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """Literal ``add_argument`` calls in the parser-builder sources (or ``files``), as [{options, choices}]."""
    actions = []
    for path in source_files(package_dir) if files is None else files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (OSError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name != "add_argument":
                continue
            options = [o for o in map(_literal_option, node.args) if o and o.startswith("-")]
            if not options:
                continue
            choices = None
            for kw in node.keywords:
                if kw.arg == "choices":
                    try:
                        choices = [str(c) for c in ast.literal_eval(kw.value)]
                    except (ValueError, TypeError, SyntaxError):
                        choices = None
            actions.append({"options": options, "choices": choices})
    return actions


def static_warm_entry(package_dir: Path) -> bool | None:
    """Whether generate.py defines generate_cmd and builds a DiffGenerator (what the warm driver needs)."""
    try:
        text = (package_dir / GENERATE_SOURCE).read_text(encoding="utf-8")
    except OSError:
        return None
    return "def generate_cmd" in text and "DiffGenerator" in text
