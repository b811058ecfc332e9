"""The registry of error codes (data/error_codes.yaml): every ``error.v1:error.code`` a script can print.

The troubleshooting reference is generated from it (``render_error_table``), and the tests tie it to the codes the
package raises, so a new error cannot ship undocumented and a removed one cannot linger in the docs.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from . import contract, datafile, paths

REGISTRY_PATH = paths.DATA_DIR / "error_codes.yaml"
SCHEMA_ID = "error-codes.v1"


@dataclasses.dataclass(frozen=True)
class ErrorEntry:
    codes: tuple[str, ...]
    meaning: str
    fix: str


@functools.lru_cache(maxsize=2)
def load_registry(path: Path = REGISTRY_PATH) -> tuple[ErrorEntry, ...]:
    entries = tuple(ErrorEntry(tuple(e["codes"]), e["meaning"], e["fix"])
                    for e in datafile.load(path, SCHEMA_ID)["errors"])
    codes = [c for e in entries for c in e.codes]
    twice = sorted({c for c in codes if codes.count(c) > 1})
    if twice:
        raise contract.InputError("input.error_codes_invalid", f"{path}: listed more than once: {', '.join(twice)}",
                                  "keep one entry per code")
    return entries


def all_codes(entries: tuple[ErrorEntry, ...] | None = None) -> set[str]:
    return {c for e in (entries if entries is not None else load_registry()) for c in e.codes}


def render_error_table() -> str:
    """Markdown table of the registry, for the generated 'error-codes' block of the troubleshooting reference."""
    lines = ["| Code | Meaning | Next step |", "|---|---|---|"]
    for entry in load_registry():
        lines.append(f"| {', '.join(f'`{c}`' for c in entry.codes)} | {entry.meaning} | {entry.fix} |")
    return "\n".join(lines) + "\n"
