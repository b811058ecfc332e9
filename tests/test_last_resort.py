"""The last-resort error path cannot fail itself: whatever text an unexpected exception carries (a lone surrogate
from a hostile input, say), the command still prints one valid error.v1 document and exits 70."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import SCRIPTS
from sgl_diffusion_bench import contract

PROGRAM = """
import sys
sys.path.insert(0, {scripts!r})
from sgl_diffusion_bench.cli import _runner

def handler(args):
    raise RuntimeError("bad prompt " + chr(0xD800) + " \\u00e9")

sys.exit(_runner.run("t", _runner.new_parser("t", "a test"), handler, lambda: [], sys.argv[1:]))
"""


@pytest.mark.parametrize("json_flag", [True, False])
def test_an_exception_text_with_a_lone_surrogate_still_gives_one_error_document(json_flag):
    run = subprocess.run([sys.executable, "-c", PROGRAM.format(scripts=str(SCRIPTS)), *(["--json"] * json_flag)],
                         capture_output=True, timeout=60, env={"PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 70, run.stderr.decode(errors="replace")
    assert b"Traceback" not in run.stderr
    if json_flag:
        document = json.loads(run.stdout)
        contract.check_document(document)
        assert document["error"]["code"] == "internal.unexpected"
        assert document["error"]["message"] == "RuntimeError: bad prompt \ud800 \u00e9"
    else:
        assert b"internal.unexpected" in run.stderr and b"\\ud800" in run.stderr
