"""Hugging Face settings in one place: which variables hold a token, and whether the hub is offline.

Offline follows huggingface_hub's own rule (its ``constants``: ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``, true
values from ``ENV_VARS_TRUE_VALUES``), applied to any environment, e.g. the one a child process gets.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from pathlib import Path
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")

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
    from huggingface_hub import constants as hub_constants  # it parses HF_ENDPOINT as it loads: see endpoint_problem

    return value is not None and value.upper() in hub_constants.ENV_VARS_TRUE_VALUES


def _hf_home(env: Mapping[str, str]) -> Path:
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.path.expanduser(env.get("HF_HOME") or os.path.join(xdg, "huggingface")))


def hub_cache(environ: Mapping[str, str] | None = None) -> Path:
    """The hub cache huggingface_hub would use in ``environ`` (its constants' rule: HF_HUB_CACHE, the legacy
    HUGGINGFACE_HUB_CACHE, else HF_HOME/hub)."""
    env = os.environ if environ is None else environ
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    return Path(os.path.expanduser(explicit)) if explicit else _hf_home(env) / "hub"


def token_available(environ: Mapping[str, str] | None = None) -> bool:
    """A token in a variable or in the login file (HF_TOKEN_PATH, else HF_HOME/token), as huggingface_hub finds
    one. Presence only: the value is never read into our output."""
    env = os.environ if environ is None else environ
    if token_vars_set(env):
        return True
    path = Path(os.path.expanduser(env.get("HF_TOKEN_PATH") or str(_hf_home(env) / "token")))
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def endpoint_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``HF_ENDPOINT`` cannot be used, or None. huggingface_hub parses it while it imports and raises on a
    malformed URL, so every command checks it first and refuses with this reason instead of a traceback."""
    value = (os.environ if environ is None else environ).get("HF_ENDPOINT")
    if not value:
        return None
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return f"HF_ENDPOINT={value!r} holds a space or control character, which no URL may carry"
    try:
        parts = urllib.parse.urlsplit(value)
        host, _ = parts.hostname, parts.port  # the port is parsed here: 'x' or 99999 raise ValueError
    except ValueError as exc:
        return f"HF_ENDPOINT={value!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not host:
        return f"HF_ENDPOINT={value!r} is not an http(s) URL with a host"
    return None


class DeadlinePassed(TimeoutError):
    """A hub call gave no complete answer within its total deadline (its socket timeout bounds each read only)."""


def within(deadline_s: float, call: Callable[[], T]) -> T:
    """``call()`` under a total deadline: an endpoint that trickles a byte every half second never times out a
    socket read, so the call runs on a daemon thread and DeadlinePassed is raised when the deadline passes (the
    thread is left to end with the process). Exceptions of ``call`` are raised here."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="hub-call", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        raise DeadlinePassed(f"no complete answer within {deadline_s:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
