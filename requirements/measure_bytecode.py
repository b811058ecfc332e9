"""Measure which installed modules an engine run imports and write them as the list `precompile.py` compiles at set-up.

  .venv/bin/python requirements/measure_bytecode.py      # writes requirements/engine-<installed sglang>-bytecode.txt

Runs the demo (`bench_diffusion_denoise.py --model tiny-flux-cpu --report`, as `make demo`: the probe's import of
sglang, the tiny model's build and load, one request, the report) with an empty bytecode cache of its own
(PYTHONPYCACHEPREFIX) and a work folder of its own, then lists the site-packages files it compiled. Re-run it when the
engine's pins change (a test fails on a listed file the venv lacks). Creates and deletes only its own temporary folder.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    version = importlib.metadata.version("sglang")
    tmp = Path(tempfile.mkdtemp(prefix="measure-bytecode-"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=str(tmp / "pyc"), DIFFUSION_BENCH_WORKDIR=str(tmp / "work"))
        argv = [sys.executable, str(BUNDLE / "scripts" / "bench_diffusion_denoise.py"), "--model", "tiny-flux-cpu",
                "--label", "measure-bytecode", "--report", "--json"]
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            print(f"measure_bytecode: the demo failed (exit {proc.returncode}); nothing written", file=sys.stderr)
            return 1
        compiled_under = tmp / "pyc" / site.relative_to(site.anchor)
        # under a prefix, a/b/c.py's bytecode is a/b/c.<tag>.pyc (no __pycache__ folder)
        names = sorted(str(p.relative_to(compiled_under).with_name(p.name.rsplit(".", 2)[0] + ".py"))
                       for p in compiled_under.rglob("*.pyc"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = HERE / f"engine-{version}-bytecode.txt"
    header = (f"# The site-packages modules an engine run of sglang {version} imports (the tiny-FLUX demo), "
              "measured by\n"
              "# requirements/measure_bytecode.py; requirements/precompile.py compiles them at set-up.\n")
    out.write_text(header + "".join(n + "\n" for n in names), encoding="utf-8")
    print(f"measure_bytecode: {len(names)} modules -> {out.relative_to(BUNDLE)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
