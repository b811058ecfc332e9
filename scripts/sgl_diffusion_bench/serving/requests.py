"""The requests a serving run sends: one from the command line, or many from a request manifest in the engine's own
JSONL format (``sglang/multimodal_gen/benchmarks/request_manifest.py``), parsed by the engine's own loader.

The loader is imported from the installed engine's file by path: it needs only the standard library, while importing
it as ``sglang.multimodal_gen...`` would run sglang's package import (torch, transformers) in this process. Every
line is checked before any server starts; a line the engine would refuse is refused here, naming the line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import contract

MANIFEST_SOURCE = "multimodal_gen/benchmarks/request_manifest.py"
# Fields of the engine's manifest that a text-to-image HTTP request carries (the OpenAI-style image API's names).
PAYLOAD_FIELDS = ("seed", "negative_prompt", "guidance_scale", "num_inference_steps", "num_outputs_per_prompt")
_SIZE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*$")
SIZE_MULTIPLE = 8  # the VAE's scale factor of every FLUX-like model: other sizes are refused by the pipeline


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
        steps = self.sampling.get("num_inference_steps")
        return f"{self.width}x{self.height}" + (f"@{steps}steps" if steps else "")

    def payload(self) -> dict[str, Any]:
        """The JSON body of POST /v1/images/generations, as the engine's bench_serving builds it (model, prompt, n,
        response_format=b64_json, size, num_inference_steps), plus the manifest's seed and other sampling fields;
        PNG, so identical pixels give identical bytes."""
        body: dict[str, Any] = {"model": "default", "prompt": self.prompt,
                                "n": int(self.sampling.get("num_outputs_per_prompt", 1)),
                                "response_format": "b64_json", "size": f"{self.width}x{self.height}",
                                "output_format": "png"}
        for name in PAYLOAD_FIELDS:
            if name in self.sampling and name != "num_outputs_per_prompt":
                body[name] = self.sampling[name]
        return body

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "prompt": self.prompt, "width": self.width, "height": self.height,
                "shape": self.shape, "sampling": dict(self.sampling), "line": self.line}


def _engine_loader(package_dir: Path):
    path = package_dir / MANIFEST_SOURCE
    if not path.is_file():
        raise contract.PreconditionError(
            "serving.no_manifest_parser", f"the installed engine at {package_dir} ships no {MANIFEST_SOURCE}",
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
    return contract.InputError("serving.bad_manifest", f"{path}: {where}: {message}; no server was started",
                               "fix that line (fields: prompt, request_id, seed, width, height, num_inference_steps, "
                               "negative_prompt, guidance_scale, sampling_params)", details={"line": line})


def _int_field(value: Any, name: str, path: Path, line: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad_line(path, line, f"{name} must be a positive integer, got {value!r}")
    return value


def load_manifest(path: Path, package_dir: Path, default_size: tuple[int, int]) -> tuple[list[RequestSpec], str]:
    """The manifest's requests and its sha256, by the engine's loader, then the checks a text-to-image server
    would fail a request on (size a multiple of SIZE_MULTIPLE, positive steps, no condition images)."""
    if not path.is_file():
        raise contract.InputError("serving.bad_manifest", f"--requests-file {path}: no such file",
                                  "give a JSONL request manifest (scripts/sgl_diffusion_bench/data/"
                                  "sample_requests.jsonl is one)")
    try:
        loaded = _engine_loader(package_dir)(path)
    except ValueError as exc:
        match = re.search(r"[Ll]ine (\d+)", str(exc))
        line = int(match[1]) if match else None
        raise _bad_line(path, line, f"the engine's manifest parser refused it: {exc}") from None
    numbered = [n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text.strip()]
    specs = []
    for request, line in zip(loaded.requests, numbered, strict=True):
        sampling = dict(request.sampling_params)
        if "image_path" in sampling:
            raise _bad_line(path, line, "image_paths: the serving benchmark sends text-to-image requests only")
        width = _int_field(sampling.pop("width", default_size[0]), "width", path, line)
        height = _int_field(sampling.pop("height", default_size[1]), "height", path, line)
        if width % SIZE_MULTIPLE or height % SIZE_MULTIPLE:
            raise _bad_line(path, line, f"size {width}x{height} is not a multiple of {SIZE_MULTIPLE}; the pipeline "
                                        "refuses it")
        for name in ("num_inference_steps", "num_outputs_per_prompt"):
            if name in sampling:
                _int_field(sampling[name], name, path, line)
        if "seed" in sampling and (isinstance(sampling["seed"], bool) or not isinstance(sampling["seed"], int)):
            raise _bad_line(path, line, f"seed must be an integer, got {sampling['seed']!r}")
        specs.append(RequestSpec(request.request_id, request.prompt, width, height, sampling, line))
    return specs, loaded.sha256


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
