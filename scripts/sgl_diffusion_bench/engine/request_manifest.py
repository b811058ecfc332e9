"""Request manifests in the engine's own JSONL format (``sglang/multimodal_gen/benchmarks/request_manifest.py``),
parsed by the engine's own loader: the one reader of ``--requests-file`` for serving runs and for campaigns.

The loader is imported from the installed engine's file by path: it needs only the standard library, while importing
it as ``sglang.multimodal_gen...`` would run sglang's package import (torch, transformers) in this process. Every
line is checked before any server or engine starts; a line the engine would refuse is refused here, naming the line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import math
import re
import sys
from pathlib import Path
from typing import Any

from .. import contract, inputs, work_dirs
from . import engine_python

MANIFEST_SOURCE = "multimodal_gen/benchmarks/request_manifest.py"
# Fields of the engine's manifest that a text-to-image HTTP request carries (the OpenAI-style image API's names).
PAYLOAD_FIELDS = ("seed", "negative_prompt", "guidance_scale", "num_inference_steps", "num_outputs_per_prompt")
# A text-to-video request (POST /v1/videos) carries the frame count and rate too.
VIDEO_PAYLOAD_FIELDS = (*PAYLOAD_FIELDS, "num_frames", "fps")
MAX_MANIFEST_BYTES = 64 << 20  # 10^5 requests of a few hundred bytes each is 30 MB; serving reads it in seconds
SIZE_MULTIPLE = 8  # the VAE's scale factor of every FLUX-like model: other sizes are refused by the pipeline
# The sampling fields a campaign request carries: each is the preset's request field of that name, which the command
# builder passes as the engine's own flag (--seed, --negative-prompt, ...): a request runs as `sglang generate` would.
PRESET_FIELDS = ("seed", "negative_prompt", "guidance_scale", "num_inference_steps", "num_frames", "fps")


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """One request: the manifest's id, prompt and sampling parameters, and the line it came from."""

    request_id: str
    prompt: str
    width: int
    height: int
    sampling: dict[str, Any]
    line: int | None = None

    @property
    def shape(self) -> str:
        steps, frames = self.sampling.get("num_inference_steps"), self.sampling.get("num_frames")
        return f"{self.width}x{self.height}" + (f"x{frames}f" if frames else "") + (f"@{steps}steps" if steps else "")

    def payload(self) -> dict[str, Any]:
        """The JSON body of POST /v1/images/generations, as the engine's bench_serving builds it (model, prompt, n,
        response_format=b64_json, size, num_inference_steps), plus the manifest's seed and other sampling fields;
        PNG, so identical pixels give identical bytes."""
        body: dict[str, Any] = {"model": "default", "prompt": self.prompt,
                                "n": int(self.sampling.get("num_outputs_per_prompt", 1)),
                                "response_format": "b64_json", "size": f"{self.width}x{self.height}",
                                "output_format": "png"}
        return {**body, **self._sampling_fields(PAYLOAD_FIELDS)}

    def video_payload(self) -> dict[str, Any]:
        """The JSON body of POST /v1/videos, as the engine's bench_serving builds it (model, prompt, size,
        num_frames, fps, num_inference_steps), plus the manifest's seed and other sampling fields."""
        body: dict[str, Any] = {"model": "default", "prompt": self.prompt, "size": f"{self.width}x{self.height}",
                                "num_outputs_per_prompt": int(self.sampling.get("num_outputs_per_prompt", 1))}
        return {**body, **self._sampling_fields(VIDEO_PAYLOAD_FIELDS)}

    def _sampling_fields(self, fields: tuple[str, ...]) -> dict[str, Any]:
        """The manifest's values of ``fields``; the output count goes under each API's own name."""
        return {name: self.sampling[name] for name in fields
                if name in self.sampling and name != "num_outputs_per_prompt"}

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "prompt": self.prompt, "width": self.width, "height": self.height,
                "shape": self.shape, "sampling": dict(self.sampling), "line": self.line}


def _engine_loader(package_dir: Path):
    path = package_dir / MANIFEST_SOURCE
    if not path.is_file():
        raise contract.PreconditionError(
            "engine.no_manifest_parser", f"the installed engine at {package_dir} ships no {MANIFEST_SOURCE}",
            "use sglang 0.5.23 or newer for --requests-file, or give one request with --prompt/--size")
    name = f"sgl_diffusion_bench_engine_request_manifest_{abs(hash(str(path)))}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return module.load_request_manifest


def _bad_line(path: Path, line: int | None, message: str) -> contract.InputError:
    where = f"line {line}" if line else "the manifest"
    return contract.InputError("input.bad_manifest", f"{path}: {where}: {message}; nothing was started",
                               "fix that line (fields: prompt, request_id, seed, width, height, num_inference_steps, "
                               "negative_prompt, guidance_scale, sampling_params)", details={"line": line})


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int_field(value: Any, name: str, path: Path, line: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad_line(path, line, f"{name} must be a positive integer, got {value!r}")
    return value


def load_manifest(path: Path, package_dir: Path, default_size: tuple[int, int],
                  fields: tuple[str, ...] = PAYLOAD_FIELDS, who: str = "a serving request (its JSON body)"
                  ) -> tuple[list[RequestSpec], str]:
    """The manifest's requests and its sha256, by the engine's loader, then the checks a text-to-image server
    would fail a request on (size a multiple of SIZE_MULTIPLE, positive steps, no condition images). A sampling
    field outside ``fields`` (what ``who`` can carry) is refused, naming it: serving and campaigns apply one rule,
    each with its own fields (serving sent only its payload's fields and dropped the rest without a word)."""
    if not path.is_file():
        raise contract.InputError("input.bad_manifest", f"--requests-file {path}: no such file",
                                  "give a JSONL request manifest (scripts/sgl_diffusion_bench/data/"
                                  "sample_requests.jsonl is one)")
    # Our bounded reader first (a regular file that reads, within the size bound, UTF-8), then the engine's parser.
    text = inputs.decode_text(inputs.read_bytes(path, "input.bad_manifest", gunzip=False,
                                                max_bytes=MAX_MANIFEST_BYTES), f"--requests-file {path}",
                              "input.bad_manifest")
    try:
        loaded = _engine_loader(package_dir)(path)
    except (ValueError, RecursionError) as exc:  # RecursionError: a line nested deeper than json can parse
        match = re.search(r"[Ll]ine (\d+)", str(exc))
        line = int(match[1]) if match else None
        raise _bad_line(path, line, f"the engine's manifest parser refused it: {exc or type(exc).__name__}") from None
    # Split as the engine's reader splits its file (universal newlines, not str.splitlines: U+2028 stays in a line).
    numbered = [n for n, line in enumerate(io.StringIO(text, newline=None), 1) if line.strip()]
    specs = []
    for request, line in zip(loaded.requests, numbered, strict=True):
        for name, text in (("request_id", request.request_id), ("prompt", request.prompt),
                           ("negative_prompt", request.sampling_params.get("negative_prompt"))):
            if isinstance(text, str) and not _encodable(text):
                raise _bad_line(path, line, f"{name} holds a lone surrogate (an unpaired \\ud800-\\udfff escape), "
                                            "which no UTF-8 output can carry")
        sampling = dict(request.sampling_params)
        if "image_path" in sampling:
            raise _bad_line(path, line, "image_paths: manifest requests run as text-to-image requests only")
        width = _int_field(sampling.pop("width", default_size[0]), "width", path, line)
        height = _int_field(sampling.pop("height", default_size[1]), "height", path, line)
        if width % SIZE_MULTIPLE or height % SIZE_MULTIPLE:
            raise _bad_line(path, line, f"size {width}x{height} is not a multiple of {SIZE_MULTIPLE}; the pipeline "
                                        "refuses it")
        for name in ("num_inference_steps", "num_outputs_per_prompt", "num_frames", "fps"):
            if name in sampling:
                _int_field(sampling[name], name, path, line)
        guidance = sampling.get("guidance_scale", 0.0)
        if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not math.isfinite(guidance) \
                or guidance < 0:
            raise _bad_line(path, line, f"guidance_scale must be a finite number >= 0, got {guidance!r}")
        if "seed" in sampling and (isinstance(sampling["seed"], bool) or not isinstance(sampling["seed"], int)):
            raise _bad_line(path, line, f"seed must be an integer, got {sampling['seed']!r}")
        if not isinstance(sampling.get("negative_prompt", ""), str):
            raise _bad_line(path, line, "negative_prompt must be a string")
        other = sorted(k for k in sampling if k not in fields
                       and not (k == "num_outputs_per_prompt" and sampling[k] == 1))
        if other:
            raise _bad_line(path, line, f"{', '.join(other)}: {who} sets only prompt, width, height and "
                                        f"{', '.join(fields)}")
        specs.append(RequestSpec(request.request_id, request.prompt, width, height, sampling, line))
    return specs, loaded.sha256


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A campaign's manifest: where it is, its sha256 (the exact input), and its requests in file order."""

    path: Path
    sha256: str
    requests: tuple[RequestSpec, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.sha256, "parser": MANIFEST_SOURCE,
                "requests": [{"index": n, **spec.to_json()} for n, spec in enumerate(self.requests)]}


def preset_fields(spec: RequestSpec) -> dict[str, Any]:
    """The preset request fields this manifest request replaces (dataclasses.replace on a presets.Preset)."""
    return {"prompt": spec.prompt, "width": spec.width, "height": spec.height,
            **{name: spec.sampling[name] for name in PRESET_FIELDS if name in spec.sampling}}


def for_campaign(path_text: str | None, python_option: str | None,
                 preset_size: tuple[int | None, int | None]) -> Manifest | None:
    """A campaign's ``--requests-file`` (None without one), read by the parser of the engine ``--engine-python``
    names, before that engine is probed or started; a line without a size takes the preset's. A line with a field
    the preset's request cannot carry is refused, naming it."""
    if not path_text:
        return None
    path, python = Path(path_text), engine_python.resolve(python_option)
    location = work_dirs.sglang_location() if engine_python.is_own(python) else engine_python.sglang_location(python)
    if not location["installed"]:
        raise contract.PreconditionError("engine.not_installed", f"sglang is not installed: {location['reason']}",
                                         "install the engine (README 'Engine install') or pass --engine-python")
    specs, sha = load_manifest(path, Path(location["package_dir"]), (preset_size[0] or 1024, preset_size[1] or 1024),
                               PRESET_FIELDS, "a campaign request")
    return Manifest(path.resolve(), sha, tuple(specs))
