"""The benchmark preset catalog (data/presets.yaml): load, validate, filter, render.

Presets are data so that the table in the docs, the command builder and the nightly drift check all read the same
facts. Where the reference leaves a detail unknown the preset lists it in ``unknown_fields`` and refuses to build.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import assets, contract, datafile, paths

PRESETS_FILE = paths.DATA_DIR / "presets.yaml"
SCHEMA_ID = "presets.v1"
# Flags the builder emits from structured preset fields; a preset must not also carry them in extra_args.
OWNED_FLAGS = ("--model-path", "--prompt", "--seed", "--negative-prompt", "--image-path", "--width", "--height",
               "--num-frames", "--fps", "--num-inference-steps", "--guidance-scale", "--num-gpus", "--config",
               "--backend", "--perf-dump-path", "--output-path", "--output-file-name", "--quality", "--save-output")
SHAPE_FIELDS = ("width", "height", "num_frames", "fps", "num_inference_steps", "guidance_scale")


@dataclasses.dataclass(frozen=True)
class Preset:
    """One benchmark workload: model, request, topology and the reference facts needed to rebuild its command."""

    name: str
    task: str
    seed: int
    num_gpus: int
    model: str | None = None
    local_model: str | None = None
    tags: tuple[str, ...] = ()
    gated: bool = False
    prompt: str | None = None
    prompt_summary: str | None = None
    prompt_source: str = "reference"  # "bundle": our own text of the described content (not upstream's request)
    negative_prompt: str | None = None
    negative_prompt_summary: str | None = None
    asset: str | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    fps: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    config_overrides: Mapping[str, Any] | None = None
    nightly_case_id: str | None = None
    nightly_cli_ignored: tuple[str, ...] = ()
    force_eager: bool = False
    bcg_warmup_resolutions: tuple[str, ...] = ()
    unknown_fields: tuple[str, ...] = ()
    notes: str = ""
    position: int = 0  # 1-based place in the catalog (reference dict order)

    @property
    def all_tags(self) -> tuple[str, ...]:
        """Derived tags (task, gated, nightly, gpus-N, cpu, incomplete) plus the preset's own."""
        derived = [self.task, f"gpus-{self.num_gpus}"]
        if self.gated:
            derived.append("gated")
        if self.nightly_case_id:
            derived.append("nightly")
        if self.num_gpus == 0:
            derived.append("cpu")
        if self.unknown_fields:
            derived.append("incomplete")
        return tuple(dict.fromkeys([*derived, *self.tags]))

    @property
    def complete(self) -> bool:
        return not self.unknown_fields

    @property
    def model_label(self) -> str:
        return self.model if self.model else f"<local:{self.local_model}>"

    def shape_args(self) -> list[str]:
        """The structured request fields as CLI tokens, in a fixed order."""
        tokens = []
        for field in SHAPE_FIELDS:
            value = getattr(self, field)
            if value is not None:
                tokens.append(f"--{field.replace('_', '-')}={value}")
        return tokens

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "position": self.position, "model": self.model, "local_model": self.local_model,
                "task": self.task, "tags": list(self.all_tags), "gated": self.gated, "num_gpus": self.num_gpus,
                "nightly_case_id": self.nightly_case_id, "prompt": self.prompt, "prompt_summary": self.prompt_summary,
                "prompt_source": self.prompt_source,
                "negative_prompt": self.negative_prompt, "asset": self.asset, "seed": self.seed,
                **{f: getattr(self, f) for f in SHAPE_FIELDS}, "extra_args": list(self.extra_args),
                "env": dict(self.env), "config_overrides": self.config_overrides,
                "force_eager": self.force_eager, "bcg_warmup_resolutions": list(self.bcg_warmup_resolutions),
                "unknown_fields": list(self.unknown_fields), "complete": self.complete, "notes": self.notes}


def _flag_name(token: str) -> str:
    return token.split("=", 1)[0]


def _semantic_problems(entries: list[dict[str, Any]], asset_ids: Iterable[str] | None) -> list[str]:
    problems, seen = [], set()
    known_assets = set(asset_ids) if asset_ids is not None else None
    for i, entry in enumerate(entries):
        where = f"preset {entry['name']!r} (#{i + 1})"
        if entry["name"] in seen:
            problems.append(f"{where}, field 'name': duplicate preset name")
        seen.add(entry["name"])
        unknown = entry.get("unknown_fields", [])
        if "prompt" not in entry and "prompt" not in unknown:
            problems.append(f"{where}, field 'prompt': missing; set it or list 'prompt' in unknown_fields")
        if "prompt" in entry and "prompt" in unknown:
            problems.append(f"{where}, field 'prompt': set but also listed in unknown_fields")
        for token in entry.get("extra_args", []):
            if _flag_name(token) in OWNED_FLAGS:
                problems.append(f"{where}, field 'extra_args': {_flag_name(token)} is built from the preset's own "
                                "fields; set the field instead")
        if entry.get("nightly_cli_ignored") and not entry.get("nightly_case_id"):
            problems.append(f"{where}, field 'nightly_cli_ignored': only meaningful with nightly_case_id")
        if known_assets is not None and entry.get("asset") and entry["asset"] not in known_assets:
            problems.append(f"{where}, field 'asset': {entry['asset']!r} is not in data/assets.yaml")
    return problems


def parse_catalog(document: Any, source: str, asset_ids: Iterable[str] | None = None) -> tuple[Preset, ...]:
    """Presets from a document already valid against presets.v1 (datafile.load checks that), checked for the rules
    a schema cannot say; every problem is named in one InputError."""
    problems = _semantic_problems(document["presets"], asset_ids)
    if problems:
        raise contract.InputError("input.presets_invalid", f"{source}: " + "; ".join(problems[:8]),
                                  f"fix the entry so it follows schemas/{SCHEMA_ID}.schema.json",
                                  details={"problems": problems})
    presets = []
    for i, entry in enumerate(document["presets"]):
        fields = dict(entry)
        for key in ("tags", "extra_args", "nightly_cli_ignored", "bcg_warmup_resolutions", "unknown_fields"):
            if key in fields:
                fields[key] = tuple(fields[key])
        presets.append(Preset(position=i + 1, **fields))
    return tuple(presets)


@functools.lru_cache(maxsize=4)
def load_presets(path: Path = PRESETS_FILE) -> tuple[Preset, ...]:
    # The asset manifest is read too: a preset may only name known assets.
    return parse_catalog(datafile.load(path, SCHEMA_ID), str(path), [a.id for a in assets.load_manifest()])


def get_preset(name: str, presets: Iterable[Preset] | None = None) -> Preset:
    catalog = tuple(presets) if presets is not None else load_presets()
    for preset in catalog:
        if preset.name == name:
            return preset
    raise contract.UsageError("usage.unknown_preset", f"no preset named {name!r}",
                              "list them with: bench_diffusion_denoise.py --list-models")


def filter_presets(presets: Iterable[Preset], *, tags: Iterable[str] = (), max_gpus: int | None = None,
                   tasks: Iterable[str] = ()) -> list[Preset]:
    """Presets carrying every tag in ``tags``, needing at most ``max_gpus`` GPUs, of any task in ``tasks``."""
    wanted_tags, wanted_tasks = set(tags), set(tasks)
    return [p for p in presets
            if wanted_tags <= set(p.all_tags)
            and (max_gpus is None or p.num_gpus <= max_gpus)
            and (not wanted_tasks or p.task in wanted_tasks)]


def _shape(p: Preset) -> str:
    parts = []
    if p.width and p.height:
        parts.append(f"{p.width}x{p.height}")
    if p.num_frames:
        parts.append(f"F{p.num_frames}")
    if p.fps:
        parts.append(f"{p.fps} fps")
    if p.num_inference_steps:
        parts.append(f"{p.num_inference_steps} steps")
    if p.guidance_scale is not None:
        parts.append(f"cfg {p.guidance_scale:g}")
    return ", ".join(parts) or "defaults"


def render_preset_table(presets: Iterable[Preset] | None = None) -> str:
    """Markdown table of the catalog, for the generated 'presets' block in the docs."""
    catalog = tuple(presets) if presets is not None else load_presets()
    lines = ["| # | Preset | Task | Model | GPUs | Nightly case | Request | Tags | Buildable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in catalog:
        tags = ", ".join(t for t in p.all_tags if t not in (p.task, f"gpus-{p.num_gpus}"))
        buildable = ("yes" + (" (bundle prompt)" if p.prompt_source == "bundle" else "") if p.complete
                     else "no: unknown " + ", ".join(p.unknown_fields))
        lines.append(f"| {p.position} | `{p.name}` | {p.task} | `{p.model_label}` | {p.num_gpus} | "
                     f"{p.nightly_case_id or '-'} | {_shape(p)} | {tags or '-'} | {buildable} |")
    return "\n".join(lines) + "\n"


OVERRIDABLE_FIELDS = ("width", "height", "num_frames", "fps", "num_inference_steps", "guidance_scale", "seed", "prompt")


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["num_inference_steps=28", "width=768"]`` -> typed values; a UsageError names what is wrong."""
    types = {f.name: f.type for f in dataclasses.fields(Preset)}
    parsed: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in OVERRIDABLE_FIELDS:
            raise contract.UsageError("usage.bad_override", f"--override {item!r} is not FIELD=VALUE with FIELD one "
                                      f"of {', '.join(OVERRIDABLE_FIELDS)}", "e.g. --override num_inference_steps=28")
        if name in parsed:
            raise contract.UsageError("usage.duplicate_override", f"--override {name} given twice",
                                      "give each field once")
        kind = "float" if "float" in str(types[name]) else "int" if "int" in str(types[name]) else "str"
        try:
            value: Any = float(text) if kind == "float" else int(text) if kind == "int" else text
        except ValueError:
            raise contract.UsageError("usage.bad_override",
                                      f"--override {name} needs {'an integer' if kind == 'int' else 'a number'}"
                                      f", got {text!r}", f"e.g. --override {name}=28") from None
        if value == "" or (kind != "str" and (value < 0 if name == "seed" else value <= 0)):
            raise contract.UsageError("usage.bad_override", f"--override {name}={text} is out of range",
                                      "use a positive value (seed: >= 0; prompt: not empty)")
        parsed[name] = value
    return parsed


def customised(chosen: list[Preset], override_items: Iterable[str], local_model_path: str | None) -> list[Preset]:
    """The chosen presets with the --override request fields replaced; with a --model-path directory (one preset
    only) they need no hub token."""
    if local_model_path and len(chosen) != 1:
        raise contract.UsageError("usage.model_path_needs_one_preset", "--model-path replaces one preset's model",
                                  "name the preset with --model instead of --all")
    overrides = parse_overrides(override_items)
    if not overrides and not local_model_path:
        return chosen
    return [dataclasses.replace(p, **overrides, gated=p.gated and not local_model_path) for p in chosen]
