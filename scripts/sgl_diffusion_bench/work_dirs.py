"""Where the bundle reads and writes outside itself: the work root (assets, outputs), the sglang checkout it belongs
to or imports, and installed package versions. Nothing here imports sglang: finding its files is enough."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any

from . import bench_env, contract, paths

WORKDIR_ENV = bench_env.WORKDIR
ASSETS_SUBDIR = Path("inputs/diffusion_benchmark/figs")
OUTPUT_SUBDIRS = {"benchmarks": Path("outputs/diffusion_benchmarks"), "profiles": Path("outputs/diffusion_profiles")}


def find_sglang_checkout(start: Path = paths.CHECKOUT_ROOT) -> Path | None:
    """The sglang repo that contains this bundle (e.g. under python/sglang/multimodal_gen/.claude/skills/)."""
    for candidate in [start, *start.parents]:
        if (candidate / "python" / "sglang" / "__init__.py").is_file():
            return candidate
    return None


def sglang_location() -> dict[str, Any]:
    """Where the importable sglang is, and whether it is a source checkout or an installed package."""
    return dict(_sglang_location())


@functools.lru_cache(maxsize=1)
def _sglang_location() -> dict[str, Any]:
    """Looked up once per process (the work root, the repo root and the probe each ask; ~7 ms a time)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return {"installed": False, "package_dir": None, "version": None, "checkout_root": None,
                "reason": "sglang is not importable in this Python (" + sys.executable + ")"}
    package_dir = Path(spec.origin).resolve().parent
    version = dist_version("sglang")
    checkout = package_dir.parents[1] if package_dir.parent.name == "python" and \
        (package_dir.parents[1] / ".git").exists() else None
    return {"installed": True, "package_dir": str(package_dir), "version": version,
            "checkout_root": str(checkout) if checkout else None, "reason": None}


def repo_root() -> tuple[Path | None, str]:
    """The sglang repo root: the checkout owning the skill first, then the checkout sglang is imported from."""
    own = find_sglang_checkout()
    if own:
        return own, "bundle is inside this sglang checkout"
    location = sglang_location()
    if location["checkout_root"]:
        return Path(location["checkout_root"]), "sglang is imported from this checkout"
    if location["installed"]:
        return None, "sglang is an installed package (no source checkout)"
    return None, location["reason"]


def work_root() -> tuple[Path, str]:
    """Where assets and outputs go: $DIFFUSION_BENCH_WORKDIR, else the sglang checkout, else the bundle."""
    given_by = bench_env.source(WORKDIR_ENV)
    if given_by:
        reason = f"${given_by}" + ("" if given_by == WORKDIR_ENV else f" (deprecated name of ${WORKDIR_ENV})")
        return Path(bench_env.get(WORKDIR_ENV)).expanduser().resolve(), reason
    root, _ = repo_root()
    if root is not None:
        return root, "sglang checkout"
    if paths.is_checkout():
        return paths.CHECKOUT_ROOT, "bundle checkout (sglang has no source checkout here)"
    return Path.cwd(), "current directory"


def assets_dir(mkdir: bool = False) -> Path:
    return _maybe_mkdir(work_root()[0] / ASSETS_SUBDIR, mkdir)


def output_dir(kind: str, mkdir: bool = False) -> Path:
    if kind not in OUTPUT_SUBDIRS:
        raise contract.UsageError("usage.bad_kind", f"unknown output kind {kind!r}",
                                  "use --kind benchmarks or --kind profiles")
    return _maybe_mkdir(work_root()[0] / OUTPUT_SUBDIRS[kind], mkdir)


def _maybe_mkdir(path: Path, mkdir: bool) -> Path:
    if mkdir:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise contract.PreconditionError("fs.not_writable", f"cannot create {path}: {exc.strerror}",
                                             f"set {WORKDIR_ENV} to a writable directory") from exc
    return path


def check_write_access() -> Path:
    """Write a probe file under the work root; raise a clear error when that is not possible."""
    probe = work_root()[0] / ".cache" / "diffusion_skill_write_test" / "probe.txt"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok\n")
    except OSError as exc:
        raise contract.PreconditionError("fs.not_writable", f"cannot write {probe}: {exc.strerror}",
                                         f"make the directory writable or set {WORKDIR_ENV}") from exc
    return probe


@functools.lru_cache(maxsize=None)
def dist_version(name: str) -> str | None:
    """An installed distribution's version, None when absent; looked up once per process (each lookup scans every
    site directory, ~5 ms)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
