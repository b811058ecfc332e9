"""The requests a serving run sends: one from the command line, or many from a request manifest (read by
request_manifest.py, the engine's own loader)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from .. import assets, contract, work_dirs
from ..engine.request_manifest import RequestSpec, SIZE_MULTIPLE
from ..presets import Preset
from .load import EDITS, IMAGES, VIDEOS

_SIZE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*$")
# The tasks a serving run can send, and where, as the engine's bench_serving sends them: an image-to-video job and
# an image edit upload the preset's input image with every request.
SERVED_TASKS = {"t2i": IMAGES, "edit": EDITS, "t2v": VIDEOS, "i2v": VIDEOS}
IMAGE_INPUT_TASKS = frozenset({"edit", "i2v"})


def endpoint(preset: Preset) -> str:
    """Where the preset's requests go: a text-to-image request, an image edit or a video job; other tasks (a mesh,
    a video with audio ...) are refused before anything starts, not sent as images and judged on what comes back."""
    if preset.task in SERVED_TASKS and (preset.task not in IMAGE_INPUT_TASKS or preset.asset):
        return SERVED_TASKS[preset.task]
    raise contract.UsageError(
        "serving.task_unsupported", f"preset {preset.name!r} is a {preset.task} preset"
        f"{'' if preset.asset or preset.task not in IMAGE_INPUT_TASKS else ' without an input image'}: the serving "
        "benchmark sends text-to-image requests, image edits and text- or image-to-video jobs (an edit or an "
        "image-to-video job uploads the preset's input image) only",
        f"serve a t2i, edit, t2v or i2v preset, or measure this one offline: bench_diffusion_denoise.py --model "
        f"{preset.name}")


def input_image(preset: Preset) -> Path | None:
    """The image an edit's requests and an image-to-video preset's jobs upload: its asset, installed from the
    bundle where missing."""
    if preset.task not in IMAGE_INPUT_TASKS:
        return None
    filenames = assets.filenames()
    if preset.asset not in filenames:
        raise contract.InputError("input.unknown_asset", f"preset {preset.name!r} names asset {preset.asset!r}, "
                                  "which the asset manifest does not list", "add it to data/assets.yaml")
    path = work_dirs.assets_dir() / filenames[preset.asset]
    assets.require({path})
    return path


def parse_size(text: str, option: str = "--size") -> tuple[int, int]:
    if not _SIZE.match(text.strip().lower()):
        raise contract.UsageError("usage.bad_size", f"{option} {text!r} is not WIDTHxHEIGHT", "e.g. --size 64x64")
    width, height = (int(v) for v in text.strip().lower().split("x"))
    if width % SIZE_MULTIPLE or height % SIZE_MULTIPLE:
        raise contract.UsageError("usage.bad_size", f"{option} {text}: not a multiple of {SIZE_MULTIPLE}",
                                  "e.g. --size 64x64")
    return width, height


def single_request(prompt: str, size: tuple[int, int], steps: int | None, seed: int,
                   frames: dict[str, int | None] | None = None) -> list[RequestSpec]:
    """The one request of a run without a manifest; ``frames``: a video preset's num_frames and fps."""
    sampling: dict[str, Any] = {"seed": seed, **{k: v for k, v in (frames or {}).items() if v is not None}}
    if steps is not None:
        sampling["num_inference_steps"] = steps
    return [RequestSpec("request-00001", prompt, size[0], size[1], sampling)]


def shapes(specs: Sequence[RequestSpec]) -> list[str]:
    return sorted({s.shape for s in specs})
