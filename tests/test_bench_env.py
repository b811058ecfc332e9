"""The bundle's variables are DIFFUSION_BENCH_*, outside the engine's SGL_*/SGLANG_* namespaces; the former names are
still read, each with one deprecation line per process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, run_main
from sgl_diffusion_bench import bench_env, contract
from sgl_diffusion_bench.engine import env

DEPRECATION = re.compile(r"^\[sgl-diffusion-bench\] (\S+) is deprecated: set (\S+) instead", re.MULTILINE)
_SGLANG_ENVIRON = next((REPO / ".venv" / "lib").glob("python*/site-packages/sglang/srt/environ.py"), None)


def _write_probe(tmp_path: Path, variable: str) -> tuple[Path, str]:
    run = run_main("diffusion_skill_env", "check-write-access", "--json", env={variable: str(tmp_path)})
    assert run.returncode == 0, run.stderr
    return Path(run.document["path"]), run.stderr


def test_the_new_name_moves_the_work_root_without_a_warning(tmp_path):
    probe, stderr = _write_probe(tmp_path, bench_env.WORKDIR)
    assert probe.is_file() and tmp_path in probe.parents
    assert not DEPRECATION.search(stderr)


def test_a_former_name_still_works_and_says_so_once(tmp_path):
    probe, stderr = _write_probe(tmp_path, "SGLANG_DIFFUSION_SKILL_WORKDIR")
    assert probe.is_file() and tmp_path in probe.parents
    assert DEPRECATION.findall(stderr) == [("SGLANG_DIFFUSION_SKILL_WORKDIR", "DIFFUSION_BENCH_WORKDIR")]


def test_each_former_name_warns_once_per_process(capsys, monkeypatch):
    monkeypatch.setattr(bench_env, "_warned", set())
    environ = {former: "1" for former in bench_env.FORMER_NAMES.values()}
    for _ in range(3):
        assert all(bench_env.get(name, environ) == "1" for name in bench_env.FORMER_NAMES)
    warned = DEPRECATION.findall(capsys.readouterr().err)
    assert sorted(warned) == sorted((former, name) for name, former in bench_env.FORMER_NAMES.items())


def test_the_new_name_wins_over_a_former_one(capsys, monkeypatch):
    monkeypatch.setattr(bench_env, "_warned", set())
    environ = {bench_env.DEBUG: "new", "SGLANG_DIFFUSION_SKILL_DEBUG": "old"}
    assert bench_env.get(bench_env.DEBUG, environ) == "new"
    assert bench_env.deprecated_in_use(environ) == {}
    assert capsys.readouterr().err == ""


def test_inspect_reports_the_new_names_and_flags_a_former_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_DIFFUSION_SKILL_WORKDIR", str(tmp_path))
    for name in bench_env.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    doc = env.inspect(with_gpus=False, import_torch=False)
    contract.check_document(doc)
    assert set(bench_env.VARIABLES) <= set(doc["env"])
    assert doc["env"][bench_env.WORKDIR] == str(tmp_path)
    assert not any(name.startswith(("SGL_", "SGLANG_")) for name in bench_env.VARIABLES)
    assert doc["directories"]["work_root"] == str(tmp_path.resolve())
    assert doc["directories"]["work_root_reason"] == \
        "$SGLANG_DIFFUSION_SKILL_WORKDIR (deprecated name of $DIFFUSION_BENCH_WORKDIR)"
    flagged = [p for p in doc["problems"] if p["code"] == "env.deprecated_variable"]
    assert len(flagged) == 1 and flagged[0]["severity"] == "warning" and "DIFFUSION_BENCH_WORKDIR" in flagged[0]["hint"]


def test_the_installed_engine_rewrites_sgl_names_so_ours_avoid_them():
    """Why not SGL_DIFFUSION_BENCH_*: the engine copies every SGL_* variable to SGLANG_* (with a warning)."""
    if _SGLANG_ENVIRON is None:
        pytest.skip("no engine installed in .venv")
    text = _SGLANG_ENVIRON.read_text(encoding="utf-8")
    assert 'key.startswith("SGL_")' in text and 'key.replace("SGL_", "SGLANG_", 1)' in text


def test_no_reader_bypasses_bench_env():
    """Our variables are read in bench_env only (the CPU adapter, loaded alone inside the engine, reads its one)."""
    package = REPO / "scripts" / "sgl_diffusion_bench"
    allowed = {package / "bench_env.py", package / "cpu_adapter" / "sgl_cpu_adapter.py"}
    for path in [*package.rglob("*.py"), *(REPO / "tests").glob("*.py"), REPO / "tests/check_lane/sitecustomize.py"]:
        if path in allowed or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8")
        for name in [*bench_env.VARIABLES, *bench_env.FORMER_NAMES.values()]:
            assert not re.search(rf"environ(?:\.get)?\(\s*[\"']{name}|environ\[[\"']{name}", text), (path, name)
