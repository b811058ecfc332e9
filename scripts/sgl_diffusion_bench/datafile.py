"""The one reader for the bundle's data files (``data/*.yaml``): safe YAML, checked against its schema.

Every way a data file can be unusable (unreadable, not YAML, not matching its schema) is one error code,
``input.data_file_invalid``, with a message naming the file and the entry. Rules a schema cannot express stay with
the module that owns the file and keep that module's codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import contract

DATA_FILE_INVALID = "input.data_file_invalid"
MAX_PROBLEMS_SHOWN = 8
# libyaml's safe loader where PyYAML was built with it: the same documents and errors, 30 times faster on the
# preset catalog, which every benchmark run reads before it can refuse anything.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path, schema_id: str) -> Any:
    """The parsed document at ``path``, valid against ``schema_id``; raises InputError(DATA_FILE_INVALID)."""
    hint = f"fix {path.name} so it follows schemas/{schema_id}.schema.json (or restore it from the bundle)"
    try:
        document = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except OSError as exc:
        raise contract.InputError(DATA_FILE_INVALID, f"cannot read {path}: {exc.strerror or exc}", hint) from exc
    except yaml.YAMLError as exc:
        raise contract.InputError(DATA_FILE_INVALID, f"{path} is not valid YAML: {exc}", hint) from exc
    problems = schema_problems(document, schema_id)
    if problems:
        raise contract.InputError(DATA_FILE_INVALID, f"{path} does not match {schema_id}: "
                                  + "; ".join(problems[:MAX_PROBLEMS_SHOWN]), hint, details={"problems": problems})
    return document


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
