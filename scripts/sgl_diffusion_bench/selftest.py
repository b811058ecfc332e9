"""Self-tests: each script checks its own machinery where it is installed, in seconds, without a GPU or network."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable

from . import contract


@dataclasses.dataclass(frozen=True)
class Check:
    """One named check; ``run`` returns a short detail string or raises to fail."""

    name: str
    run: Callable[[], str]


def schema_checks(schema_ids: Iterable[str]) -> list[Check]:
    """Checks that each schema a tool writes or reads loads and is itself a valid draft 2020-12 schema."""

    def make(schema_id: str) -> Check:
        def run() -> str:
            from jsonschema import Draft202012Validator

            Draft202012Validator.check_schema(contract.load_schema(schema_id))
            return f"schemas/{schema_id}.schema.json is a valid schema"

        return Check(f"schema:{schema_id}", run)

    return [make(s) for s in ("error.v1", "selftest.v1", *schema_ids)]


def run_checks(tool: str, checks: Iterable[Check]) -> dict[str, Any]:
    results = []
    for check in checks:
        started = time.perf_counter()
        try:
            detail, ok = check.run(), True
        except Exception as exc:  # a self-test reports every failure instead of stopping at the first
            detail, ok = f"{type(exc).__name__}: {exc}", False
        results.append({"name": check.name, "ok": ok, "detail": detail,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 3)})
    return contract.envelope("selftest.v1", tool, ok=all(r["ok"] for r in results), checks=results)


def render_text(document: dict[str, Any]) -> str:
    lines = [f"self-test of {document['tool']['name']} {document['tool']['version']}:"]
    for r in document["checks"]:
        lines.append(f"  [{'OK' if r['ok'] else 'FAIL'}] {r['name']}: {r['detail']}")
    lines.append("all checks passed" if document["ok"] else "SOME CHECKS FAILED")
    return "\n".join(lines)
