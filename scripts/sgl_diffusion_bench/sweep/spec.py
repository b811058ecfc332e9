"""The sweep spec (sweep-spec.v1, YAML or JSON) and its expansion into shards: preset x override set x repeat."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from .. import contract, inputs, presets

SCHEMA_ID = "sweep-spec.v1"
DEFAULT_CAMPAIGN = {"mode": "single", "engine": "warm"}
MAX_SHARDS = 1000  # one folder, one status table, one merged report: larger campaigns are several sweeps


@dataclasses.dataclass(frozen=True)
class Shard:
    """One whole campaign of one preset on one GPU set: the unit a job runs."""

    id: str
    preset: presets.Preset
    overrides: dict[str, Any]
    repeat: int
    campaign: dict[str, Any]

    @property
    def num_gpus(self) -> int:
        return self.preset.num_gpus


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    source: str
    document: dict[str, Any]
    shards: tuple[Shard, ...]


def read_spec(path: str | Path) -> dict[str, Any]:
    """The spec file's document, valid against sweep-spec.v1 (input errors otherwise)."""
    return checked(inputs.load_yaml(path, "input.sweep_spec_unreadable"), str(path))


def checked(document: Any, source: str) -> dict[str, Any]:
    """A spec document valid against sweep-spec.v1 (a user's file, or the copy a sweep folder keeps)."""
    contract.validate_input(document, SCHEMA_ID, source)
    return document


def choose_presets(selection: dict[str, Any], catalog: tuple[presets.Preset, ...], source: str) -> list[presets.Preset]:
    known = {p.name: p for p in catalog}
    unknown = [n for n in selection.get("names", []) if n not in known]
    if unknown:
        raise contract.UsageError("sweep.unknown_preset", f"{source} names presets the catalog lacks: "
                                  + ", ".join(unknown), "list them with: bench_diffusion_denoise.py --list-models")
    chosen = [known[n] for n in selection.get("names", [])]
    if "filter" in selection:
        rule = selection["filter"]
        kept = presets.filter_presets(catalog, tags=rule.get("tags", ()), max_gpus=rule.get("max_gpus"),
                                      tasks=rule.get("tasks", ()))
        chosen += [p for p in kept if p.num_gpus >= rule.get("min_gpus", 0) and p not in chosen]
    if not chosen:
        raise contract.UsageError("sweep.no_presets", f"{source} selects no preset",
                                  "loosen the filter or name presets (bench_diffusion_denoise.py --list-models)")
    return chosen


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-") or "x"


def expand(document: dict[str, Any], source: str, catalog: tuple[presets.Preset, ...] | None = None) -> Spec:
    """Every shard of the spec, in a stable order (preset, override set, repeat)."""
    catalog = catalog if catalog is not None else presets.load_presets()
    chosen = choose_presets(document["presets"], catalog, source)
    campaign = {**DEFAULT_CAMPAIGN, **document.get("campaign", {})}
    override_sets = document.get("overrides", [{}])
    repeats = document.get("repeats", 1)
    count = len(chosen) * len(override_sets) * repeats
    if count > MAX_SHARDS:  # before building any: 10^6 shards would take minutes and gigabytes to list
        raise contract.UsageError("sweep.too_many_shards", f"{source} expands to {count} shards ({len(chosen)} "
                                  f"preset(s) x {len(override_sets)} override set(s) x {repeats} repeat(s)); a "
                                  f"sweep runs at most {MAX_SHARDS}", "split it into several sweeps, each with its "
                                  "own spec and --folder, or narrow the preset filter")
    shards = []
    for preset in chosen:
        for o_index, overrides in enumerate(override_sets):
            for repeat in range(1, repeats + 1):
                shard_id = f"{_slug(preset.name)}-o{o_index + 1}-r{repeat}"
                shards.append(Shard(shard_id, preset, dict(overrides), repeat, campaign))
    name = document.get("name") or _slug(Path(source).stem)[:40]
    return Spec(name, source, document, tuple(shards))


def load(path: str | Path) -> Spec:
    return expand(read_spec(path), str(path))
