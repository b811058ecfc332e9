"""The per-component flag forms an engine's unknown-argument handler takes, read from its server_args source.

sglang routes flags its parser does not declare through ServerArgs' handlers: ``--<component>-path`` (every release),
and in 0.5.23 also ``--component-attention-backends.<component>``, ``--<component>-quantization`` and more. Which
component exists is only known with the model, so a flag of these forms is accepted with a warning, never refused.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterable

_DYNAMIC_PREFIX = re.compile(r"^--[a-z][a-z0-9_-]*\.$")
_DYNAMIC_SUFFIX = re.compile(r"^-[a-z][a-z0-9-]*$")


def dynamic_flag_forms(sources: Iterable[Path]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The per-component flag forms the engine's server_args accept from unknown arguments: literal option
    prefixes ending in '.' and the suffixes it tests with ``endswith(...)`` or passes as ``alias_suffix``."""
    prefixes, suffixes = set(), set()
    for path in sources:
        if "server_args" not in str(path):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (OSError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DYNAMIC_PREFIX.match(node.value):
                prefixes.add(node.value.replace("_", "-"))
            elif isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else None
                values = [a for a in node.args if name == "endswith"]
                values += [k.value for k in node.keywords if k.arg == "alias_suffix"]
                for value in values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str) and \
                            _DYNAMIC_SUFFIX.match(value.value):
                        suffixes.add(value.value)
    return tuple(sorted(prefixes)), tuple(sorted(suffixes))
