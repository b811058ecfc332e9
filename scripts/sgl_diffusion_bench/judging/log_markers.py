"""Log markers of sglang's diffusion engine, per release: the data file, its checks and the per-release selection.

The markers are data (``data/log_markers.yaml``, validated by schemas/log-markers.v1.schema.json plus the rules a schema
cannot say): which lines reveal a diffusers fallback, an engine failure behind exit code 0, a breakable-CUDA-graph (BCG)
capture, replay miss, fallback or disable, and which success lines a release prints ("Generated N outputs" exists
in 0.5.10.post1, not in 0.5.23). ``log_gates`` applies a release's set to one request's log.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Iterable

from packaging.version import InvalidVersion, Version

try:
    from re import _parser as _sre_parse  # Python 3.11+
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from .. import contract, datafile, paths

SCHEMA_ID = "log-markers.v1"
MARKERS_PATH = paths.DATA_DIR / "log_markers.yaml"
QUALITY_PLACEHOLDER = "{quality}"
FACT_KINDS = ("server_args", "warmup_done")  # facts of a run (engine_args), never gates


@dataclasses.dataclass(frozen=True)
class Release:
    id: str
    version: str | None  # None: upstream main, newer than every numbered release
    bcg_supported: bool


@dataclasses.dataclass(frozen=True)
class Marker:
    """One log marker; ``source`` is the regex text (a late-fusion source still holds ``{quality}``)."""

    id: str
    kind: str
    code: str
    source: str
    stop: bool
    releases: tuple[str, ...]  # the releases that print it, from the entry's since/until/also_in
    example: str

    def compiled(self, quality: str | None = None) -> re.Pattern[str]:
        return re.compile(self.source.replace(QUALITY_PLACEHOLDER, re.escape(quality or "")), re.IGNORECASE)


def required_literal(pattern: re.Pattern[str]) -> str:
    """The longest literal a line must contain for the pattern to match, lower-cased ("" if none found).

    A cheap `in` test on the lower-cased line rules a marker out before its regex runs (most lines match no marker).
    Only top-level literals and those inside top-level positive lookarounds qualify: nothing optional."""
    return _required_literal_of(pattern.pattern)


@functools.lru_cache(maxsize=None)
def _required_literal_of(source: str) -> str:
    """Parsed once per pattern text: every log scan asks again for the same few dozen markers (a verify of 8 cells
    parsed 933 patterns, a quarter of its time)."""
    return _longest_literal(_sre_parse.parse(source)).lower()


def _longest_literal(sequence: Any) -> str:
    best = run = ""
    for op, arg in sequence:
        if op is _sre_parse.LITERAL:
            run += chr(arg)
            continue
        best, run = max(best, run, key=len), ""
        if op is _sre_parse.ASSERT:  # (direction, subpattern); ASSERT_NOT is a different opcode
            best = max(best, _longest_literal(arg[1]), key=len)
    return max(best, run, key=len)


@dataclasses.dataclass(frozen=True)
class QualityModel:
    """What each --quality level promises on an engine that accepts ``recognised_by`` (None: any other engine)."""

    recognised_by: str | None
    semantics: dict[str, str]  # level -> bit_exact | same_math | lossy
    aliases: dict[str, str]  # alias -> level


@dataclasses.dataclass(frozen=True)
class MarkerSet:
    """The markers that apply to one engine release, and why this release was chosen."""

    release: Release
    markers: tuple[Marker, ...]
    late_fusion_qualities: tuple[str, ...]
    selection_warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MarkerCatalog:
    """Every release and marker in the data file."""

    releases: tuple[Release, ...]  # oldest first; the last one has version None
    markers: tuple[Marker, ...]
    late_fusion_qualities: tuple[str, ...]
    quality_models: tuple[QualityModel, ...] = ()

    def quality_model(self, engine_levels: Iterable[str] | None) -> QualityModel:
        """The promises of an engine's quality levels, recognised by the levels it accepts."""
        levels = set(engine_levels or ())
        return next(m for m in self.quality_models if m.recognised_by is None or m.recognised_by in levels)

    def for_release(self, release_id: str, selection_warnings: tuple[str, ...] = ()) -> MarkerSet:
        release = next((r for r in self.releases if r.id == release_id), None)
        if release is None:
            raise contract.InputError("log_markers.unknown_release", f"no marker set for release {release_id!r}",
                                      "known releases: " + ", ".join(r.id for r in self.releases))
        return MarkerSet(release, tuple(m for m in self.markers if release.id in m.releases),
                         self.late_fusion_qualities, selection_warnings)

    def for_version(self, version: str | None) -> MarkerSet:
        """The set for an installed engine version: its own, else the next newer release's, else the newest."""
        newest = self.releases[-1]
        if version is None:
            return self.for_release(newest.id, (f"engine version unknown; using the newest marker set ({newest.id})",))
        for release in self.releases:
            if version in (release.id, release.version):
                return self.for_release(release.id)
        try:
            wanted = Version(version)
        except ValueError:  # InvalidVersion, or a 5000-digit part past int()'s digit limit
            shown = version if len(version) <= 60 else f"{version[:40]}... ({len(version)} characters)"
            return self.for_release(newest.id, (f"engine version {shown!r} is not a PEP 440 version; using the "
                                                f"newest marker set ({newest.id})",))
        numbered = [r for r in self.releases if r.version is not None]
        for release in numbered:
            if Version(release.version) == wanted:
                return self.for_release(release.id)
        newer = [r for r in numbered if Version(r.version) > wanted]
        if not newer:
            return self.for_release(newest.id, (f"sglang {version} is newer than every release with recorded log "
                                                f"markers; using the newest set ({newest.id}): check the engine "
                                                f"still prints them",))
        return self.for_release(newer[0].id, (f"no marker set recorded for sglang {version}; using the next newer "
                                              f"release's set ({newer[0].id})",))


def _literal(text: str) -> str:
    """A literal as regex text; a ``{quality}`` placeholder stays as it is, to be filled per request."""
    return re.escape(text).replace(re.escape(QUALITY_PLACEHOLDER), QUALITY_PLACEHOLDER)


def _pattern_source(entry: dict[str, Any]) -> str:
    if "regex" in entry:
        return entry["regex"]
    if "substring" in entry:
        return _literal(entry["substring"])
    return "^" + "".join(f"(?=.*{_literal(part)})" for part in entry["all_of"])


def _bad(source: str, field: str, message: str) -> contract.InputError:
    return contract.InputError("log_markers.invalid", f"{source}: {field}: {message}",
                               "fix the entry as the header of data/log_markers.yaml describes")


def _printed_by(entry: dict[str, Any], release_ids: list[str], source: str, where: str) -> tuple[str, ...]:
    """The releases a marker's ``since``/``until``/``also_in`` name, in catalog order."""
    named = [entry["since"], *([entry["until"]] if "until" in entry else []), *entry.get("also_in", ())]
    unknown = [r for r in named if r not in release_ids]
    if unknown:
        raise _bad(source, f"{where}.since/until/also_in", f"unknown release(s) {unknown}; known: {release_ids}")
    start = release_ids.index(entry["since"])
    stop = release_ids.index(entry["until"]) if "until" in entry else len(release_ids)
    if stop <= start:
        raise _bad(source, f"{where}.until", f"{entry['until']!r} is not a release after since {entry['since']!r}")
    again = entry.get("also_in", [])
    if any(release_ids.index(r) < stop for r in again) or "until" not in entry and again:
        raise _bad(source, f"{where}.also_in", "names only releases at or after until (and needs until)")
    return tuple(release_ids[start:stop]) + tuple(r for r in release_ids if r in again)


def parse_catalog(document: Any, source: str = str(MARKERS_PATH)) -> MarkerCatalog:
    """Build the catalog from a document already valid against the schema (datafile.load checks that), checking the
    rules a schema cannot say."""
    releases = tuple(Release(r["id"], r["version"], r["bcg_supported"]) for r in document["releases"])
    release_ids = [r.id for r in releases]
    if len(set(release_ids)) != len(release_ids):
        raise _bad(source, "releases", "release ids must be unique")
    if [r.version is None for r in releases].count(True) != 1 or releases[-1].version is not None:
        raise _bad(source, "releases", "exactly one release (the last, upstream main) has version null")
    try:
        versions = [Version(r.version) for r in releases[:-1]]
    except InvalidVersion as exc:
        raise _bad(source, "releases[].version", str(exc)) from exc
    if versions != sorted(versions) or len(set(versions)) != len(versions):
        raise _bad(source, "releases", "numbered releases must be listed oldest first, each once")
    qualities = tuple(document["late_fusion_qualities"])
    markers: list[Marker] = []
    for entry in document["markers"]:
        where = f"markers[id={entry['id']!r}]"
        if any(m.id == entry["id"] for m in markers):
            raise _bad(source, where, "duplicate id")
        printed_by = _printed_by(entry, release_ids, source, where)
        pattern = _pattern_source(entry)  # not `source`: that names the file in every error below
        if (QUALITY_PLACEHOLDER in pattern) != (entry["kind"] == "late_fusion"):
            raise _bad(source, where, "late_fusion markers, and only they, must contain {quality}")
        marker = Marker(entry["id"], entry["kind"], entry["code"], pattern, entry.get("stop", False),
                        printed_by, entry["example"])
        try:
            candidates = [marker.compiled(q) for q in (qualities if marker.kind == "late_fusion" else (None,))]
        except re.error as exc:
            raise _bad(source, f"{where}.regex", f"does not compile: {exc}") from exc
        example = entry["example"]
        if not any(p.search(example) and required_literal(p) in example.lower() for p in candidates):
            raise _bad(source, f"{where}.example", "the example line does not match the marker's own pattern")
        markers.append(marker)
    models = tuple(QualityModel(m["recognised_by"], dict(m["semantics"]), dict(m["aliases"]))
                   for m in document["quality_models"])
    if models[-1].recognised_by is not None or any(m.recognised_by is None for m in models[:-1]):
        raise _bad(source, "quality_models", "exactly one model (the last) has recognised_by: null")
    for index, model in enumerate(models):
        unknown = {a: lv for a, lv in model.aliases.items() if lv not in model.semantics}
        if unknown:
            raise _bad(source, f"quality_models[{index}].aliases", f"alias(es) of levels it does not list: {unknown}")
    return MarkerCatalog(releases, tuple(markers), qualities, models)


def load_catalog(path: Path | None = None) -> MarkerCatalog:
    path = path or MARKERS_PATH
    return _load_catalog_cached(str(path))


@functools.lru_cache(maxsize=4)
def _load_catalog_cached(path: str) -> MarkerCatalog:
    return parse_catalog(datafile.load(Path(path), SCHEMA_ID), path)


def markers_for_version(version: str | None, path: Path | None = None) -> MarkerSet:
    """The marker set for an installed sglang version (e.g. env's sglang version); see MarkerCatalog.for_version."""
    return load_catalog(path).for_version(version)


