"""The JSON contract: every schema is valid, every script self-tests and speaks JSON on errors."""

from __future__ import annotations

import json
import signal

import pytest
from jsonschema import Draft202012Validator

from conftest import REPO, SCRIPTS, run_main, run_script
from sgl_diffusion_bench import contract

SCRIPT_NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py"))


@pytest.mark.parametrize("schema_file", sorted((REPO / "schemas").glob("*.schema.json")), ids=lambda p: p.name)
def test_every_schema_is_valid_and_self_named(schema_file):
    schema = json.loads(schema_file.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith("/" + schema_file.name)
    schema_id = schema_file.name[: -len(".schema.json")]
    assert contract.SCHEMA_ID_PATTERN.match(schema_id)
    const = schema.get("properties", {}).get("schema", {}).get("const")
    assert const in (None, schema_id), f"{schema_file.name} declares schema const {const!r}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_self_test_passes_and_validates(name):
    run = run_script(name, "--self-test", "--json", timeout=300)
    doc = run.document
    assert doc["schema"] == "selftest.v1"
    failed = [c for c in doc["checks"] if not c["ok"]]
    assert not failed and run.returncode == 0, failed
    assert len(doc["checks"]) >= 3


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_bad_usage_is_an_error_document_with_exit_2(name):
    run = run_main(name, "--no-such-flag", "--json")
    assert run.returncode == 2
    assert run.document["schema"] == "error.v1"
    assert run.document["error"]["code"].startswith("usage.")
    assert run.document["error"]["hint"]


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_help_works(name):
    run = run_main(name, "--help", expect_json=False)
    assert run.returncode == 0 and "usage:" in run.stdout


def test_sigterm_acts_as_ctrl_c_only_while_a_command_runs():
    """A command run in-process hands the caller's SIGTERM handler back: a process forked later (a pool worker, an
    engine) must not inherit one that raises KeyboardInterrupt."""
    seen = []

    def callers(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        run = run_main("judge_run", "--log", "/nonexistent/engine.log", "--json", expect_json=True)
        assert run.returncode != 0 and run.document["schema"] == "error.v1"
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_own_output_failing_its_schema_is_an_internal_error():
    with pytest.raises(contract.ContractViolation) as info:
        contract.check_document({"schema": "error.v1", "ok": True})
    assert info.value.exit_code == contract.ExitCode.INTERNAL


def test_redact_removes_secret_values(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    assert "hf_secretvalue123" not in contract.dumps({"schema": "x.v1", "note": "token hf_secretvalue123"})


def test_prepare_validator_builds_it_on_a_thread_the_caller_does_not_wait_for():
    contract.validator.cache_clear()
    builder = contract.prepare_validator("bench-report.v1")
    assert builder.daemon and builder.name == "prepare-bench-report.v1"
    builder.join(60)
    assert not builder.is_alive() and contract.validator.cache_info().currsize == 1
    assert contract.validator("bench-report.v1").schema["$id"].endswith("bench-report.v1.schema.json")
    assert contract.validator.cache_info().hits >= 1  # the caller gets the one the thread built
