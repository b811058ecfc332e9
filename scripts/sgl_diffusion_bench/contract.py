"""The JSON contract every script shares.

Every document a script prints names its schema in a top-level ``"schema"`` field (``"env.v1"`` names
``schemas/env.v1.schema.json``, JSON Schema draft 2020-12) and is validated before it is printed. Errors are
documents too (``error.v1``). Exit codes carry meaning (see ``ExitCode``).

Format history:
- v1: first version of every document. Before 0.1.0 was released, enumerated values became lowercase
  snake_case throughout (verdicts ``no_significant_change``, ``insufficient_data``, ``outputs_differ``; fast-path
  groups; probe methods), so one casing holds for every value a document carries.
"""

from __future__ import annotations

import datetime as _dt
import enum
import functools
import json
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from . import __version__, hf_settings

if TYPE_CHECKING:  # jsonschema is imported when the first document is checked, not by every import of this module
    from jsonschema import Draft202012Validator
    from referencing import Registry
from .paths import schema_dir

SCHEMA_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*\.v[0-9]+$")
SCHEMA_BASE_URI = "https://sglang-diffusion-benchmark-profile.invalid/schemas/"
# Environment variables whose values are secrets: never printed, logged or written (presence only).
SECRET_ENV_VARS = hf_settings.TOKEN_VARS
REDACTED = "<redacted>"


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a run failed or some rows are invalid; the document is still printed
    USAGE = 2  # bad usage or bad input (a file that fails its schema, a corrupt trace, ...)
    PRECONDITION = 3  # nothing was run: an engine flag is missing, no idle GPU, ...
    INTERNAL = 70  # our own bug, e.g. our output failed its schema
    INTERRUPTED = 130


class ToolError(Exception):
    """An error with a stable code, a message and a hint naming the next step; becomes an error.v1 document."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, code: str, message: str, hint: str = "", *, exit_code: int | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details or {}
        if exit_code is not None:
            self.exit_code = exit_code

    def __reduce__(self):  # crosses a process boundary whole (a per-rank trace worker raises it in the parent)
        return type(self), (self.code, self.message, self.hint), self.__dict__


class UsageError(ToolError):
    exit_code = ExitCode.USAGE


class InputError(ToolError):
    """Bad input data: a file that does not parse or does not match its schema."""

    exit_code = ExitCode.USAGE


class PreconditionError(ToolError):
    exit_code = ExitCode.PRECONDITION


class ContractViolation(ToolError):
    """Our own output failed its schema: a bug in this tool, never the user's fault."""

    exit_code = ExitCode.INTERNAL


def schema_path(schema_id: str) -> Path:
    if not SCHEMA_ID_PATTERN.match(schema_id):
        raise ContractViolation("contract.bad_schema_id", f"not a schema id: {schema_id!r}")
    return schema_dir() / f"{schema_id}.schema.json"


def list_schema_ids() -> list[str]:
    return sorted(p.name[: -len(".schema.json")] for p in schema_dir().glob("*.schema.json"))


@functools.lru_cache(maxsize=None)
def load_schema(schema_id: str) -> dict[str, Any]:
    path = schema_path(schema_id)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ContractViolation("contract.schema_missing", f"schema file not found: {path}",
                                "reinstall the bundle; schemas/ must sit beside SKILL.md") from exc
    except json.JSONDecodeError as exc:
        raise ContractViolation("contract.schema_unreadable", f"schema {path} is not JSON: {exc}") from exc


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources = []
    for schema_id in list_schema_ids():
        resources.append((SCHEMA_BASE_URI + f"{schema_id}.schema.json",
                          Resource.from_contents(load_schema(schema_id))))
    return Registry().with_resources(resources)


@functools.lru_cache(maxsize=None)
def validator(schema_id: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(schema_id), registry=_registry())


def prepare_validator(schema_id: str) -> threading.Thread:
    """Build ``validator(schema_id)`` on a daemon thread (returned, started): jsonschema's import, the schemas and
    their registry take ~0.1 s, which a runner can spend while it waits on an engine process instead of after it."""
    builder = threading.Thread(target=validator, args=(schema_id,), name=f"prepare-{schema_id}", daemon=True)
    builder.start()
    return builder


def validation_errors(document: Any, schema_id: str | None = None) -> list[str]:
    """Every way ``document`` fails its schema (named by its own ``schema`` field unless given), as text."""
    if schema_id is None:
        schema_id = document.get("schema") if isinstance(document, dict) else None
        if not isinstance(schema_id, str):
            return ["document has no top-level 'schema' string"]
    errors = sorted(validator(schema_id).iter_errors(document), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def check_document(document: dict[str, Any], schema_id: str | None = None) -> None:
    """Raise ContractViolation when our own document does not match its schema."""
    problems = validation_errors(document, schema_id)
    if problems:
        raise ContractViolation(
            "contract.output_invalid",
            f"output failed schema {document.get('schema')!r}: " + "; ".join(problems[:5]),
            "this is a bug in the tool; report it with the command line",
        )


def validate_input(document: Any, schema_id: str, source: str) -> None:
    """Raise InputError when a file the user gave us does not match the schema it should follow."""
    problems = validation_errors(document, schema_id)
    if problems:
        raise InputError("input.schema_mismatch", f"{source} does not match {schema_id}: " + "; ".join(problems[:5]),
                         f"fix the file so it follows schemas/{schema_id}.schema.json")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def tool_info(name: str) -> dict[str, str]:
    return {"name": name, "version": __version__}


def envelope(schema_id: str, tool: str, *, ok: bool = True, **payload: Any) -> dict[str, Any]:
    """A document with the shared header fields; the payload keys follow."""
    doc: dict[str, Any] = {"schema": schema_id, "ok": ok, "tool": tool_info(tool), "created_at": utc_now()}
    doc.update(payload)
    return doc


def error_document(error: ToolError, tool: str) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message, "hint": error.hint}
    if error.details:
        body["details"] = error.details
    return envelope("error.v1", tool, ok=False, error=body, exit_code=int(error.exit_code))


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [env[name] for name in SECRET_ENV_VARS if env.get(name)]


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """Replace every secret value found in ``text``; a last line of defence, callers never put secrets in."""
    for value in (secret_values() if secrets is None else secrets):
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text


ENVELOPE_CONSTANTS = ("schema", "tool")  # values we write ourselves, never a secret; redacting them breaks the contract


def redact_values(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """``value`` with every string value in it redacted. JSON syntax and keys (our field names) are never touched,
    so a token that reads ``true`` or ``null`` cannot turn the document into invalid JSON."""
    secrets = secret_values() if secrets is None else list(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: redact_values(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_values(v, secrets) for v in value]
    return value


def dumps(document: dict[str, Any], *, ascii_only: bool = False) -> str:
    kept = {k: document[k] for k in ENVELOPE_CONSTANTS if k in document}
    return json.dumps({**redact_values(document), **kept}, indent=2, sort_keys=True, ensure_ascii=ascii_only,
                      allow_nan=False)
