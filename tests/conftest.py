"""Shared test helpers. Every script run through ``run_script`` gets an HF_TOKEN canary in its environment, and
the helper fails the test if the canary appears anywhere in stdout or stderr: secrets never leak."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
SHARED = REPO.parent / "shared"
SHARED_FIXTURES = SHARED / "fixtures"
TEST_FIXTURES = REPO / "tests" / "fixtures"
HF_TOKEN_CANARY = "hf_CANARYtokenValue0123456789abcdef"

sys.path.insert(0, str(SCRIPTS))

from sgl_diffusion_bench import contract  # noqa: E402


@dataclasses.dataclass
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.stdout)


def run_script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
               cwd: Path | None = None, expect_json: bool | None = None) -> ScriptRun:
    """Run scripts/<name>.py as a user would; with --json, check stdout is one document valid against its schema."""
    child_env = dict(os.environ)
    child_env["HF_TOKEN"] = HF_TOKEN_CANARY
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *args], capture_output=True, text=True,
                          env=child_env, timeout=timeout, cwd=cwd or REPO)
    run = ScriptRun(proc.returncode, proc.stdout, proc.stderr)
    assert HF_TOKEN_CANARY not in proc.stdout + proc.stderr, "HF token value leaked into output"
    # Our own traceback starts a line; an engine traceback quoted inside a reason does not.
    assert not re.search(r"(?m)^Traceback \(most recent call last\):", proc.stderr), proc.stderr[-3000:]
    if expect_json if expect_json is not None else "--json" in args:
        document = run.document  # exactly one JSON document: json.loads rejects trailing text
        assert contract.validation_errors(document) == [], contract.validation_errors(document)
        assert (run.returncode == 0) == (document["ok"] is True) or document["schema"] != "error.v1"
    return run


@pytest.fixture
def shared_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not beside this checkout")
    return SHARED_FIXTURES
