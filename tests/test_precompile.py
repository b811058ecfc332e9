"""The set-up's bytecode step: requirements/precompile.py compiles a measured list on every core, and the list shipped
for the installed engine names only files that engine's venv has (a stale list fails here, not silently in speed)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRECOMPILE = REPO / "requirements" / "precompile.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the step writes bytecode even where the sandbox says not to
    return subprocess.run([sys.executable, str(PRECOMPILE), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_compiles_listed_and_extra_files_skips_missing_and_counts_failures(tmp_path):
    root = tmp_path / "site"
    (root / "pkg").mkdir(parents=True)
    (root / "a.py").write_text("A = 1\n")
    (root / "pkg" / "b.py").write_text("B = 2\n")
    (root / "bad.py").write_text("def broken(:\n")
    also = tmp_path / "bundle"
    also.mkdir()
    (also / "c.py").write_text("C = 3\n")
    listing = tmp_path / "list.txt"
    listing.write_text("# measured\na.py\npkg/b.py\nbad.py\ngone/missing.py\n\n")

    first = _run(str(listing), "--root", str(root), "--also", str(also))
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""
    assert "3 of 4 modules compiled on" in first.stderr
    assert "(1 listed files not in this venv, 1 failed)" in first.stderr
    sources = (root / "a.py", root / "pkg" / "b.py", also / "c.py")
    pycs = [Path(importlib.util.cache_from_source(str(p))) for p in sources]
    assert all(p.is_file() for p in pycs)
    assert not Path(importlib.util.cache_from_source(str(root / "bad.py"))).exists()

    stamps = [p.stat().st_mtime_ns for p in pycs]
    again = _run(str(listing), "--root", str(root), "--also", str(also))
    assert again.returncode == 0 and "3 of 4 modules compiled" in again.stderr
    assert [p.stat().st_mtime_ns for p in pycs] == stamps  # up to date: not rewritten


def test_shipped_list_names_only_files_the_installed_engine_has():
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no sglang installed in this interpreter")
    listing = REPO / "requirements" / f"engine-{version}-bytecode.txt"
    if not listing.is_file():
        pytest.skip(f"no measured bytecode list for sglang {version}")
    site = Path(sysconfig.get_paths()["purelib"])
    names = [n for n in listing.read_text(encoding="utf-8").splitlines() if n and not n.startswith("#")]
    assert len(names) > 1000
    assert any(n.startswith("sglang/multimodal_gen/") for n in names)
    missing = [n for n in names if not (site / n).is_file()]
    assert not missing, (f"{len(missing)} listed files are not installed (first: {missing[:3]}); re-measure with "
                         f"requirements/measure_bytecode.py")
