"""Hugging Face settings in one place: which variables hold a token, and whether the hub is offline.

Offline follows huggingface_hub's own rule (its ``constants``: ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``, true
values from ``ENV_VARS_TRUE_VALUES``), applied to any environment, e.g. the one a child process gets.
"""

from __future__ import annotations

import os
from typing import Mapping

from huggingface_hub import constants as hub_constants

# huggingface_hub reads HF_TOKEN, then HUGGING_FACE_HUB_TOKEN; older diffusers and sglang code read
# HUGGINGFACE_HUB_TOKEN. All three are secrets: presence only, never the value.
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")
# The engine child gets the caller's HF_TOKEN under the older name too (copied by name, never by value).
TOKEN_MIRROR = ("HUGGINGFACE_HUB_TOKEN", "HF_TOKEN")  # (target, source)
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
MISSING_TOKEN_HINT = "export HF_TOKEN=<token with access>"


def token_vars_set(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [name for name in TOKEN_VARS if env.get(name)]


def offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether huggingface_hub would run offline in ``environ`` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    value = next((env[name] for name in OFFLINE_VARS if env.get(name)), None)
    return value is not None and value.upper() in hub_constants.ENV_VARS_TRUE_VALUES
