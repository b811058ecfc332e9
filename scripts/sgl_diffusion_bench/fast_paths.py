"""The fast-path family registry (``data/fast_paths.yaml``): load and check it, classify kernel names, render docs.

A hot kernel either belongs to a family that already exists (its guard engaged), or it is part of an unfused chain a
family replaces (the guard missed: find out why before writing a kernel), or it is ``unclassified``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from . import contract, datafile
from .paths import DATA_DIR

REGISTRY_PATH = DATA_DIR / "fast_paths.yaml"
UNCLASSIFIED = "unclassified"


@dataclasses.dataclass(frozen=True)
class Chain:
    steps: tuple[re.Pattern, ...]
    max_gap: int


@dataclasses.dataclass(frozen=True)
class Family:
    id: str
    name: str
    group: str
    kernels: tuple[str, ...]
    patterns: tuple[re.Pattern, ...]
    modules: tuple[str, ...]
    replaces: str
    guards: str
    enablement: str
    first_check: str
    sglang: dict
    chain: Chain | None = None
    quality: str | None = None
    source: str | None = None

    def summary(self) -> dict:
        """The fields a classification result carries for this family."""
        return {"family": self.id, "family_name": self.name, "enablement": self.enablement, "guards": self.guards,
                "first_check": self.first_check, "sglang": dict(self.sglang)}


@dataclasses.dataclass(frozen=True)
class Registry:
    families: tuple[Family, ...]
    quality_levels: tuple[dict, ...] = ()  # per release: default, aliases, levels -> {numerics, families}

    def quality_fusions(self, release: str, level: str) -> tuple[Family, ...]:
        """The quality-gated families a request at ``level`` mounts on ``release`` (an alias resolved)."""
        entry = next((q for q in self.quality_levels if q["release"] == release), None)
        if entry is None:
            raise contract.InputError("input.unknown_release", f"no quality levels recorded for release {release!r}",
                                      "known: " + ", ".join(q["release"] for q in self.quality_levels))
        canonical = entry["aliases"].get(level, level)
        if canonical not in entry["levels"]:
            raise contract.InputError("input.unknown_quality", f"release {release} has no quality {level!r}",
                                      "known: " + (", ".join(entry["levels"]) or "none (no --quality)"))
        return tuple(self.by_id(i) for i in entry["levels"][canonical]["families"])

    def by_id(self, family_id: str) -> Family:
        return next(f for f in self.families if f.id == family_id)

    def classify(self, kernel_name: str) -> Family | None:
        """The first family whose pattern occurs in the kernel name, or None."""
        for family in self.families:
            if any(p.search(kernel_name) for p in family.patterns):
                return family
        return None


def _compile(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise contract.InputError("input.bad_fast_path_pattern", f"{where}: bad regex {pattern!r}: {exc}",
                                  "fix the pattern in data/fast_paths.yaml") from exc


def parse_registry(document: dict, source: str) -> Registry:
    """The registry from a document already valid against fast-paths.v1 (datafile.load checks that)."""
    families = []
    seen: set[str] = set()
    for entry in document["families"]:
        where = f"{source}: family {entry['id']}"
        if entry["id"] in seen:
            raise contract.InputError("input.duplicate_fast_path", f"{where}: id used twice",
                                      "give every family its own id")
        seen.add(entry["id"])
        chain = entry.get("unfused_chain")
        families.append(Family(
            id=entry["id"], name=entry["name"], group=entry["group"], kernels=tuple(entry["kernels"]),
            patterns=tuple(_compile(p, where) for p in entry["patterns"]), modules=tuple(entry["modules"]),
            replaces=entry["replaces"], guards=entry["guards"], enablement=entry["enablement"],
            first_check=entry["first_check"], sglang=dict(entry["sglang"]),
            chain=Chain(tuple(_compile(p, where) for p in chain["steps"]), chain["max_gap"]) if chain else None,
            quality=entry.get("quality"), source=entry.get("source")))
    levels = tuple(document.get("quality_levels", ()))
    known = {f.id for f in families}
    for entry in levels:
        for name, level in entry["levels"].items():
            unknown = sorted(set(level["families"]) - known)
            if unknown:
                raise contract.InputError("input.unknown_fast_path", f"{source}: quality_levels {entry['release']} "
                                          f"{name} names unknown families {unknown}", "use ids from families")
    return Registry(tuple(families), levels)


@functools.lru_cache(maxsize=4)
def load_registry(path: Path = REGISTRY_PATH) -> Registry:
    return parse_registry(datafile.load(path, "fast-paths.v1"), str(path))


def find_chains(kernel_names: list[str], chain: Chain) -> list[tuple[int, int]]:
    """(first, last) indices of non-overlapping occurrences of ``chain`` in one stream's ordered kernel names."""
    memo: dict[str, list[bool]] = {}
    for name in set(kernel_names):
        memo[name] = [bool(p.search(name)) for p in chain.steps]
    matches_step = [memo[name] for name in kernel_names]
    found, i, n = [], 0, len(kernel_names)
    while i < n:
        if not matches_step[i][0]:
            i += 1
            continue
        pos, ok = i, True
        for step in range(1, len(chain.steps)):
            nxt = next((j for j in range(pos + 1, min(pos + chain.max_gap + 1, n)) if matches_step[j][step]), None)
            if nxt is None:
                ok = False
                break
            pos = nxt
        if ok:
            found.append((i, pos))
            i = pos + 1
        else:
            i += 1
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_family_table() -> str:
    """Markdown table of every family (generated into existing-fast-paths.md)."""
    registry = load_registry()
    lines = ["| # | Family | Kernel / module names | Replaces (unfused chain) | Guards | Enablement | "
             "First check when the guard missed | 0.5.10.post1 |",
             "|---|---|---|---|---|---|---|---|"]
    for f in registry.families:
        names = ", ".join(f"`{k}`" for k in f.kernels)
        lines.append(f"| {f.id} | {_cell(f.name)} | {_cell(names)} | {_cell(f.replaces)} | {_cell(f.guards)} | "
                     f"{_cell(f.enablement)} | {_cell(f.first_check)} | {f.sglang.get('0.5.10.post1', 'unknown')} |")
    return "\n".join(lines) + "\n"
