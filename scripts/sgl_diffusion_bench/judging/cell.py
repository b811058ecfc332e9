"""The typed record of a campaign, as pyperf's Run/Benchmark: a ``Cell`` is one measured request of a
bench-report.v1 campaign and a ``Report`` the whole document. Code builds and reads attributes (a misspelt name
fails at once, not as a silently missing key); JSON is written once, at the report boundary, and read back with
``from_json``. The schema (schemas/bench-report.v1.schema.json) stays the contract: these classes name its
properties and nothing else, and ``to_json(from_json(d)) == d`` for every document the tools wrote.

A key the model does not know (a newer writer, a hand-edited report) is kept in ``extra`` and written back: an old or
foreign report stays readable and loses nothing; the schema check at the boundary still refuses it on output.
The nested blocks (``perf``, ``gates``, ``outputs``, ...) stay JSON mappings: their shapes are the schema's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

# Optional cell properties (not in the schema's "required"): absent from the JSON when None. None is not a value
# any of them may take in the schema, so leaving them out loses nothing.
_OPTIONAL_CELL_KEYS = ("engine", "other_files", "sample", "engine_run", "quality", "request")


def json_copy(value: Any) -> Any:
    """A copy of JSON-shaped data (dicts, lists, immutable leaves): what copy.deepcopy gives here, several times
    faster (rendering a 10,000-cell report spent half its time in deepcopy)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


@dataclasses.dataclass(slots=True)
class Cell:
    """One planned request of a campaign and, once run, its judged evidence (the bench-report.v1 ``cell``).

    A new cell is ``skipped`` with no evidence; the request path fills it in. Numbers (``perf``) are kept only
    for a valid cell (validity.strip_numbers)."""

    index: int
    arm: str
    round: int | None = None
    position: str | None = None
    status: str = "skipped"
    reasons: list[str] = dataclasses.field(default_factory=list)
    argv: list[str] = dataclasses.field(default_factory=list)
    started_at: str | None = None
    wall_s: float | None = None
    returncode: int | None = None  # always written (null until the request ran), as every report has had it
    log_path: str | None = None
    perf_dump_path: str | None = None
    perf: dict[str, Any] | None = None
    outputs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gates: dict[str, Any] = dataclasses.field(default_factory=dict)
    engine: dict[str, Any] | None = None  # warm mode: the engine that served the request
    other_files: list[str] | None = None  # output-like files of a kind the task does not produce
    sample: int | None = None  # n-th measured request of its slot (--samples)
    engine_run: dict[str, Any] | None = None  # the settings the engine reported it ran with
    quality: dict[str, Any] | None = None  # the --quality level the engine ran at
    request: dict[str, Any] | None = None  # the manifest request it sent and its shape (manifest_campaign)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # keys this model does not know, kept

    @property
    def valid(self) -> bool:
        return self.status == "valid"

    def metric(self, name: str) -> float | None:
        """A perf figure (``e2e_ms``, ``denoise_ms``, ...) of this cell; None when it has none."""
        return (self.perf or {}).get(name)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Cell":
        """A cell from its bench-report.v1 JSON; unknown keys go to ``extra``. Missing required keys are refused."""
        missing = [k for k in ("index", "arm") if k not in doc]
        if missing:
            raise ValueError(f"a bench-report cell needs {', '.join(missing)}: got keys {sorted(doc)}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        fields = {k: json_copy(v) for k, v in doc.items() if k in known}
        extra = {k: json_copy(v) for k, v in doc.items() if k not in known}
        return cls(**fields, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The bench-report.v1 cell: every required key, the optional ones that are set, then ``extra``."""
        doc = {f.name: json_copy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "extra"}
        for key in _OPTIONAL_CELL_KEYS:
            if doc[key] is None:
                del doc[key]
        doc.update(json_copy(self.extra))
        return doc


# Top-level bench-report.v1 keys that a report may leave out (every one of them a mapping or a list).
_OPTIONAL_REPORT_KEYS = ("artifacts", "cleanup", "warnings", "engines")


@dataclasses.dataclass(slots=True)
class Report:
    """A bench-report.v1 document: its cells typed, the other blocks as the schema's mappings."""

    ok: bool
    tool: dict[str, Any]
    created_at: str
    campaign: dict[str, Any]
    engine: dict[str, Any]
    environment: dict[str, Any]
    plan: dict[str, Any]
    cells: list[Cell]
    summary: dict[str, Any]
    artifacts: dict[str, Any] | None = None
    cleanup: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] | None = None
    engines: dict[str, Any] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    SCHEMA = "bench-report.v1"

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Report":
        """A report from its JSON; refuses another schema, keeps unknown top-level keys in ``extra``."""
        if doc.get("schema") != cls.SCHEMA:
            raise ValueError(f"not a {cls.SCHEMA} document (schema: {doc.get('schema')!r})")
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in doc
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"a {cls.SCHEMA} document needs {', '.join(missing)}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "cells"}
        fields = {k: json_copy(v) for k, v in doc.items() if k in known}
        extra = {k: json_copy(v) for k, v in doc.items() if k not in known | {"schema", "cells"}}
        return cls(**fields, cells=[Cell.from_json(c) for c in doc.get("cells", [])], extra=extra)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": self.SCHEMA}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name == "cells":
                doc["cells"] = [c.to_json() for c in value]
            elif value is not None or f.name not in _OPTIONAL_REPORT_KEYS:
                doc[f.name] = json_copy(value)
        doc.update(json_copy(self.extra))
        return doc
