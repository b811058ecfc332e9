"""The probe lists the values of flags the engine validates against its own enums (not argparse choices)."""

from __future__ import annotations

import pytest

from engine_release import OLDER_RELEASE
from sgl_diffusion_bench.engine import engine_probe

pytestmark = pytest.mark.engine


def test_attention_backend_choices_come_from_the_engines_enum(tmp_path):
    caps = engine_probe.probe_engine(tmp_path / "probe.json").capabilities
    if caps.method != "argparse":
        pytest.skip(f"probe method {caps.method}: no live parser to read enums from")
    backends = caps.choices.get("--attention-backend")
    assert backends and {"fa", "torch_sdpa"} <= set(backends), caps.choices.keys()
    if caps.version == OLDER_RELEASE:  # no request quality in that release
        assert "--quality" not in caps.flags
    else:
        assert caps.choices.get("--quality")  # argparse-declared choices stay as they were
