"""The requests a serving run sends: one from the command line, or many from a request manifest (read by
request_manifest.py, the engine's own loader)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from .. import contract
from ..engine.request_manifest import RequestSpec, SIZE_MULTIPLE

_SIZE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*$")


def parse_size(text: str, option: str = "--size") -> tuple[int, int]:
    if not _SIZE.match(text.strip().lower()):
        raise contract.UsageError("usage.bad_size", f"{option} {text!r} is not WIDTHxHEIGHT", "e.g. --size 64x64")
    width, height = (int(v) for v in text.strip().lower().split("x"))
    if width % SIZE_MULTIPLE or height % SIZE_MULTIPLE:
        raise contract.UsageError("usage.bad_size", f"{option} {text}: not a multiple of {SIZE_MULTIPLE}",
                                  "e.g. --size 64x64")
    return width, height


def single_request(prompt: str, size: tuple[int, int], steps: int | None, seed: int) -> list[RequestSpec]:
    sampling: dict[str, Any] = {"seed": seed}
    if steps is not None:
        sampling["num_inference_steps"] = steps
    return [RequestSpec("request-00001", prompt, size[0], size[1], sampling)]


def shapes(specs: Sequence[RequestSpec]) -> list[str]:
    return sorted({s.shape for s in specs})
