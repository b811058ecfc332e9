"""The seed PR's fixture maker makes exactly the fixtures kept beside it: run into a temporary directory, every file
it writes is byte-identical to the kept one, so a change to the perf or cell model cannot leave them apart."""

from __future__ import annotations

import subprocess
import sys

from conftest import TEST_FIXTURES

MAKER = TEST_FIXTURES / "seed-pr-38591" / "make_fixtures.py"


def test_make_fixtures_rebuilds_the_kept_fixtures(tmp_path):
    proc = subprocess.run([sys.executable, str(MAKER), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    kept_dumps = sorted(p.relative_to(TEST_FIXTURES) for p in (TEST_FIXTURES / "seed-pr-38591").glob("*.json"))
    assert made == sorted([*kept_dumps, TEST_FIXTURES.joinpath("bench-report/example.json").relative_to(TEST_FIXTURES)])
    differing = [str(rel) for rel in made if (tmp_path / rel).read_bytes() != (TEST_FIXTURES / rel).read_bytes()]
    assert differing == [], f"make_fixtures.py and the kept fixtures differ: {differing}"
