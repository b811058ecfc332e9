"""The one reader for the bundle's data files (``data/*.yaml``): safe YAML, checked against its schema.

Every way a data file can be unusable (unreadable, not YAML, not matching its schema) is one error code,
``input.data_file_invalid``, with a message naming the file and the entry. Rules a schema cannot express stay with
the module that owns the file and keep that module's codes.

Every benchmark run reads the preset catalog and the log markers before it can refuse anything; parsing the YAML and
checking it against the schema cost ~0.25 s (and jsonschema's import), about half of the runner's own time per cold
CPU cell. So a file once found valid is kept, parsed, as JSON in the user's cache under a digest of its text, its
schema and the jsonschema install: the same bytes are read back from there, and any edit, schema change or jsonschema
upgrade is parsed and checked in full. A cache that cannot be read or written only costs the check.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import yaml

from . import contract, fileio, inputs, paths

DATA_FILE_INVALID = "input.data_file_invalid"
MAX_PROBLEMS_SHOWN = 8
CHECKED_DIR = "checked-data-files"  # under paths.user_cache_dir(): <digest>.json, a document found valid
# libyaml's safe loader where PyYAML was built with it: the same documents and errors, 30 times faster on the
# preset catalog, which every benchmark run reads before it can refuse anything.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path, schema_id: str) -> Any:
    """The parsed document at ``path``, valid against ``schema_id``; raises InputError(DATA_FILE_INVALID)."""
    hint = f"fix {path.name} so it follows schemas/{schema_id}.schema.json (or restore it from the bundle)"
    try:
        text = inputs.read_text(path, DATA_FILE_INVALID)  # a regular file, strict UTF-8
    except contract.InputError as exc:
        raise contract.InputError(DATA_FILE_INVALID, f"cannot read {path}: {exc.message}", hint) from None
    copy = checked_copy(text, schema_id)
    if copy is not None:
        try:
            return json.loads(copy.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass  # no copy yet, or a damaged one: parse and check
    try:
        document = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise contract.InputError(DATA_FILE_INVALID, f"{path} is not valid YAML: {exc}", hint) from exc
    problems = schema_problems(document, schema_id)
    if problems:
        raise contract.InputError(DATA_FILE_INVALID, f"{path} does not match {schema_id}: "
                                  + "; ".join(problems[:MAX_PROBLEMS_SHOWN]), hint, details={"problems": problems})
    if copy is not None:
        _keep(copy, document)
    return document


def _keep(copy: Path, document: Any) -> None:
    """Write the checked copy when JSON holds the document exactly (YAML may have keys or values JSON cannot)."""
    try:
        as_json = json.dumps(document, sort_keys=True)
        if json.loads(as_json) == document:
            copy.parent.mkdir(parents=True, exist_ok=True)
            fileio.atomic_write_text(copy, as_json)
    except (TypeError, ValueError, OSError):
        pass  # not JSON-exact, or an unwritable cache: the next run parses and checks the file again


def checked_copy(text: str, schema_id: str) -> Path | None:
    """Where a parsed copy of this text, found valid against this schema under this jsonschema install (its package
    file's path and mtime: an upgrade rewrites it), is kept; None when the schema cannot be read or jsonschema is
    not installed (then the file is always checked)."""
    spec = importlib.util.find_spec("jsonschema")
    if spec is None or not spec.origin:
        return None
    try:
        key = b"\0".join([schema_id.encode(), contract.schema_path(schema_id).read_bytes(),
                          f"{spec.origin}@{os.stat(spec.origin).st_mtime_ns}".encode(), text.encode("utf-8")])
    except OSError:
        return None
    return paths.user_cache_dir() / CHECKED_DIR / f"{fileio.sha256_bytes(key)}.json"


def schema_problems(document: Any, schema_id: str) -> list[str]:
    """Schema errors, each naming the list entry by its id or name, e.g. ``presets[2] (name='qwen'), field 'seed'``."""
    problems = []
    for err in sorted(contract.validator(schema_id).iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = list(err.absolute_path)
        if len(where) >= 2 and isinstance(where[1], int):
            entry = _entry(document, where[0], where[1])
            label = next((f" ({key}={entry[key]!r})" for key in ("id", "name") if key in entry), "")
            field = "/".join(map(str, where[2:])) or "<entry>"
            problems.append(f"{where[0]}[{where[1]}]{label}, field {field!r}: {err.message}")
        else:
            problems.append(f"{'/'.join(map(str, where)) or '<root>'}: {err.message}")
    return problems


def _entry(document: Any, key: Any, index: int) -> dict[str, Any]:
    items = document.get(key) if isinstance(document, dict) else None
    entry = items[index] if isinstance(items, list) and index < len(items) else None
    return entry if isinstance(entry, dict) else {}
