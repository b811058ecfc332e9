"""Where the bundle's own files live, in a checkout and when installed as a package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
# scripts/sgl_diffusion_bench/ -> the bundle checkout (SKILL.md, schemas/, tests/ live there).
CHECKOUT_ROOT = PACKAGE_DIR.parents[1]
DIST_NAME = "sglang-diffusion-benchmark-profile"
INSTALLED_SHARE = Path(sys.prefix) / "share" / DIST_NAME


def bundle_root() -> Path:
    """The directory holding SKILL.md and schemas/: the checkout, or the installed share directory."""
    if (CHECKOUT_ROOT / "schemas").is_dir():
        return CHECKOUT_ROOT
    return INSTALLED_SHARE


def schema_dir() -> Path:
    return bundle_root() / "schemas"


def is_checkout() -> bool:
    return (CHECKOUT_ROOT / "schemas").is_dir() and (CHECKOUT_ROOT / "pyproject.toml").is_file()


def user_cache_dir() -> Path:
    """This user's cache for the bundle's own bookkeeping ($XDG_CACHE_HOME, else ~/.cache): nothing in it is needed,
    everything in it can be rebuilt."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / DIST_NAME
