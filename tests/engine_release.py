"""Which sglang release the tests run against, so tests of engine behaviour say which release they expect.

``make test`` runs on the default release (0.5.23); ``make test-engine ENGINE=0.5.10.post1`` runs the engine tests
against the older one. A test written for one release is skipped, with the reason, on the other.
"""

from __future__ import annotations

import importlib.metadata

import pytest

DEFAULT_RELEASE = "0.5.23"
OLDER_RELEASE = "0.5.10.post1"


def installed_release() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


INSTALLED = installed_release()


def expects(*releases: str) -> pytest.MarkDecorator:
    """Mark a test (or module) as written for these sglang releases; it skips on any other."""
    return pytest.mark.skipif(INSTALLED not in releases,
                              reason=f"expects sglang {' or '.join(releases)}; installed: {INSTALLED or 'none'}")


# The CPU-adapter gaps a tiny-FLUX or tiny-Wan run on 0.5.10.post1 fills: all but b7, the gap of 0.5.23's Wan blocks
# (FLUX's blocks, and 0.5.10.post1's Wan blocks, call no sgl-kernel CPU op).
FLUX_GAPS_0510 = ["b0", "b1", "b2", "b2a", "b3", "b4", "b5", "b6"]
