"""Which Python interpreter's sglang the bundle drives, and what that interpreter has installed.

sglang often lives where the serving stack lives (another virtualenv, a container's Python), not beside the bundle.
``--engine-python PATH`` (or ``DIFFUSION_BENCH_ENGINE_PYTHON``) names that interpreter; the probe, ``inspect``, the
benchmark and the profiler then ask it, never this process, what it can import. Without either, the engine is the
sglang of this interpreter. The variable is not SGL_*/SGLANG_*: sglang claims those names as its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from .. import bench_env, contract

ENV_VAR = bench_env.ENGINE_PYTHON
QUERY_TIMEOUT_S = 60
# Import name -> distribution to install, where they differ (the modules a broken engine install misses most).
MODULE_DISTRIBUTIONS = {"tvm_ffi": "apache-tvm-ffi", "imageio_ffmpeg": "imageio-ffmpeg",
                        "cv2": "opencv-python-headless",
                        "PIL": "pillow", "yaml": "pyyaml", "zmq": "pyzmq", "sklearn": "scikit-learn",
                        "skimage": "scikit-image", "dateutil": "python-dateutil", "cache_dit": "cache-dit",
                        "compressed_tensors": "compressed-tensors", "partial_json_parser": "partial-json-parser"}
_MARK = "@@ENGINE-PYTHON@@"
# Finds packages without importing them (importing sglang costs seconds and can fail in ways that are findings).
_QUERY = f"""
import importlib.metadata as md, importlib.util, json, sys
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
spec = importlib.util.find_spec("sglang")
requires = []
try:
    requires = md.requires("sglang") or []
except md.PackageNotFoundError:
    pass
print({_MARK!r} + json.dumps({{"executable": sys.executable, "python_version": sys.version.split()[0],
      "sglang_origin": spec.origin if spec else None, "sglang": version("sglang"), "torch": version("torch"),
      "sglang_requires": requires}}))
"""


def resolve(cli_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The engine interpreter: ``--engine-python``, else $DIFFUSION_BENCH_ENGINE_PYTHON, else this one."""
    environ = os.environ if environ is None else environ
    value = cli_value or bench_env.get(ENV_VAR, environ) or ""
    if not value:
        return sys.executable
    path = Path(value).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        source = "--engine-python" if cli_value else f"${ENV_VAR}"
        raise contract.UsageError("usage.bad_engine_python", f"{source} {value!r} is not an executable file",
                                  "pass the python of the environment where sglang is installed, e.g. "
                                  "/opt/serving/.venv/bin/python")
    return str(path.absolute())  # not resolved: a venv's python is a symlink whose target has no venv


def is_own(python: str) -> bool:
    return Path(python).absolute() == Path(sys.executable).absolute()


def describe(python: str) -> dict[str, Any]:
    """What ``python`` has installed: its version, sglang's location/version/declared requirements, torch's version."""
    try:
        proc = subprocess.run([python, "-c", _QUERY], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                              check=False, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise contract.PreconditionError("engine.python_unusable", f"cannot run the engine interpreter {python}: "
                                         f"{exc}", "pass a working interpreter with --engine-python") from exc
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise contract.PreconditionError("engine.python_unusable", f"the engine interpreter {python} failed "
                                     f"(exit {proc.returncode}): {last}", "pass a working interpreter with "
                                     "--engine-python")


def sglang_location(python: str) -> dict[str, Any]:
    """work_dirs.sglang_location()'s shape, for the sglang that ``python`` imports."""
    info = describe(python)
    if not info["sglang_origin"]:
        return {"installed": False, "package_dir": None, "version": None, "checkout_root": None,
                "reason": f"sglang is not importable in {python}"}
    package_dir = Path(info["sglang_origin"]).resolve().parent
    checkout = package_dir.parents[1] if package_dir.parent.name == "python" and \
        (package_dir.parents[1] / ".git").exists() else None
    return {"installed": True, "package_dir": str(package_dir), "version": info["sglang"],
            "checkout_root": str(checkout) if checkout else None, "reason": None}


def script_interpreter(script: Path) -> str | None:
    """The interpreter a console script's first line names (plain ``#!PATH``, or the ``/bin/sh`` exec trampoline
    installers write for long paths); None when it names none we can read."""
    try:
        with script.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words[:1] == ["/bin/sh"] and len(head) > 1 and head[1].startswith("'''exec' '"):
        return head[1].split("'")[5] or None
    return words[0] if words else None


def stale_shebang(python: str) -> str | None:
    """Why the ``sglang`` console script beside ``python`` would not run under ``python`` itself, e.g. a venv moved
    after install, whose scripts still name the old path; None when it would (or there is no such script)."""
    script = Path(python).parent / "sglang"
    named = script_interpreter(script) if script.is_file() else None
    if named is None or Path(named).name == "env":
        return None
    if not (Path(named).is_file() and os.access(named, os.X_OK)):
        return f"{script}'s first line names {named}, which does not exist (was the environment moved?)"
    if _runs_as(Path(named)) != _runs_as(Path(python)):
        return f"{script}'s first line names {named}, another interpreter than {python}"
    return None


def _runs_as(python: Path) -> tuple[Path, Path]:
    """What starting this path runs: its venv (the folder, resolved) and the binary (the file, resolved). A venv's
    ``python3`` links to its ``python``, one interpreter under two names; a venv's python links to the base one,
    which is another interpreter since it has no venv."""
    return python.absolute().parent.resolve(), python.resolve()


_told_stale: set[str] = set()


def sglang_cli(python: str) -> list[str]:
    """The ``sglang`` console script beside ``python``, run by ``python`` itself when the script's first line names
    a missing or another interpreter (said once on stderr); without the script, its entry point via ``python -c``.

    0.5.10.post1's ``sglang.cli.main`` has no ``__main__`` guard, so ``python -m sglang.cli.main`` would do nothing.
    """
    script = Path(python).parent / "sglang"
    if script.is_file() and os.access(script, os.X_OK):
        stale = stale_shebang(python)
        if stale is None:
            return [str(script)]
        if python not in _told_stale:
            _told_stale.add(python)
            print(f"[engine] {stale}; running it with {python}", file=sys.stderr)
        return [python, str(script)]
    return [python, "-c", "import sys; from sglang.cli.main import main; sys.exit(main())"]


GENERATE_ENTRY = "sglang.multimodal_gen.runtime.entrypoints.cli.generate"


def torch_requirement(python_info: Mapping[str, Any]) -> dict[str, Any] | None:
    """The torch requirement sglang declares (base dependencies, no extras) against the installed torch; None when
    sglang declares none. {declared, installed, met}."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    for text in python_info.get("sglang_requires") or ():
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.name != "torch" or (requirement.marker and "extra" in str(requirement.marker)):
            continue
        installed = python_info.get("torch")
        try:
            met = installed is not None and requirement.specifier.contains(Version(installed).base_version,
                                                                           prereleases=True)
        except InvalidVersion:
            met = False
        return {"declared": f"torch{requirement.specifier}", "installed": installed, "met": met}
    return None


def install_hint(missing_module: str | None, python: str, version: str | None) -> str:
    """What to install so the parser imports, naming the distribution (not the import name)."""
    if missing_module is None:
        return f"check that `{python} -m sglang.cli.main generate --help` works; fix the engine install first"
    distribution = MODULE_DISTRIBUTIONS.get(missing_module.split(".")[0], missing_module.split(".")[0])
    where = f" (this bundle's CPU install set: requirements/engine-{version}-cpu.txt)" if version else ""
    return f"install {distribution}: `{python} -m pip install {distribution}`{where}"
