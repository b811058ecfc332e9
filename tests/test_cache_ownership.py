"""Who owns a child cache: a child the user prepared is never reclaimed, a run's child is reclaimed only when its
run provably died (its lock free, its process gone), and a reclaim never deletes what the run did not create."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_script
from sgl_diffusion_bench import contract, model_cache

DIES = textwrap.dedent("""
    import sys
    sys.path.insert(0, {scripts!r})
    from sgl_diffusion_bench import model_cache
    model_cache.prepare_child_cache({root!r}, {model!r}, {label!r}, held_by="run")
    import os
    os._exit(9)  # dies without finishing: neither cleaned nor handed over
""")


def _dead_run_child(root: Path, model: str, label: str) -> Path:
    code = DIES.format(scripts=str(SCRIPTS), root=str(root), model=model, label=label)
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 9
    (child,) = [c for c in root.iterdir() if c.name.endswith(f"-{label}")]
    return child


def _prepare_with_cli(root: Path, model: str, label: str) -> Path:
    run = run_script("cleanup_model_cache", "prepare", "--root", str(root), "--model", model, "--label", label,
                     "--json")
    assert run.returncode == 0, run.stderr
    child = Path(run.document["child"])
    (child / "keep.txt").write_text(f"the user's notes for {label}\n")
    (child / "huggingface" / "hub" / "mine.bin").write_bytes(b"user weights")
    return child


def _snapshot(top: Path) -> dict[str, bytes | str]:
    """Every path below top with its bytes (files) or link text: what 'nothing touched' is checked against."""
    seen: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(top))
            seen[rel] = (os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir")
    return seen


def _ledger(path: Path) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(contract.validation_errors(line, "cleanup-ledger.v1") == [] for line in lines)
    return lines


def test_prepared_children_are_the_users_and_kept_with_a_ledger_line(tmp_path):
    root = tmp_path / "root"
    first = _prepare_with_cli(root, "tiny-flux-cpu", "mine")
    second = _prepare_with_cli(root, "org/other-model", "yours")
    before = _snapshot(root)
    result = model_cache.reclaim_stale_children(root, tmp_path / "cleanup.jsonl")
    assert result.cleaned == () and len(result.kept) == 2
    assert _snapshot(root) == before and (first / "keep.txt").is_file() and (second / "keep.txt").is_file()
    lines = _ledger(tmp_path / "cleanup.jsonl")
    assert sorted((e["phase"], e["ok"], e["owner"]["kind"], e["cache_dir"]) for e in lines) == sorted([
        ("kept", True, "user", str(first)), ("kept", True, "user", str(second))])
    assert all("held by the user" in e["kept_reason"] for e in lines)
    verify = model_cache.verify_ledger(tmp_path / "cleanup.jsonl")
    assert verify["residue_count"] == 0 and [e["status"] for e in verify["entries"]] == ["kept", "kept"]
    assert verify["entries"][0]["residual"]["file_count"] > 0  # what a kept child holds now, measured


def test_a_dead_runs_child_is_reclaimed_and_nothing_outside_it_is_touched(tmp_path):
    root = tmp_path / "root"
    users = _prepare_with_cli(root, "org/m", "users")
    dead = _dead_run_child(root, "org/m", "died")
    (dead / "huggingface" / "hub" / "blob").write_bytes(b"downloaded by the run")
    (tmp_path / "outside.txt").write_text("next to the root\n")
    manifest = json.loads((dead / model_cache.MANIFEST_NAME).read_text())
    assert manifest["owner"]["kind"] == "run" and manifest["owner"]["lock"] == model_cache.LOCK_NAME
    others = {p: _snapshot(p) for p in (users,)}
    result = model_cache.reclaim_stale_children(root, tmp_path / "cleanup.jsonl")
    (entry,) = result.cleaned
    assert entry["ok"] and entry["exit_reason"] == "reclaimed" and entry["cache_dir"] == str(dead)
    assert entry["owner"]["kind"] == "run" and entry["owner"]["pid"] == manifest["owner"]["pid"]
    assert not dead.exists() and {p: _snapshot(p) for p in others} == others
    assert (tmp_path / "outside.txt").read_text() == "next to the root\n"
    assert [(k["cache_dir"], k["owner"]["kind"]) for k in result.kept] == [(str(users), "user")]


def test_a_dead_runs_child_holding_a_users_file_is_kept_and_named(tmp_path):
    root = tmp_path / "root"
    dead = _dead_run_child(root, "org/m", "died")
    (dead / "keep.txt").write_text("put here by the user\n")
    before = _snapshot(dead)
    warnings = model_cache.reclaim_for_run(root, tmp_path / "cleanup.jsonl")
    assert _snapshot(dead) == before
    (kept,) = _ledger(tmp_path / "cleanup.jsonl")
    assert kept["phase"] == "kept" and kept["kept_reason"].startswith("cache.foreign_files") and "keep.txt" in \
        kept["kept_reason"]
    assert [w["code"] for w in warnings] == ["cache.kept"] and "keep.txt" in warnings[0]["message"]


def test_a_live_run_is_skipped_and_a_run_that_ends_without_cleanup_hands_its_child_over(tmp_path):
    root = tmp_path / "root"
    live = model_cache.prepare_child_cache(root, "org/m", "live", held_by="run")
    assert live.lock is not None and live.lock.held
    assert model_cache.reclaim_stale_children(root, tmp_path / "l.jsonl") == model_cache.Reclaim((), ())
    assert model_cache.finish_run_child(live, cleanup=False, reason="success", ledger_path=tmp_path / "l.jsonl",
                                        model="org/m", label="live") is None
    assert not live.lock.held and live.child.is_dir()
    owner = json.loads((live.child / model_cache.MANIFEST_NAME).read_text())["owner"]
    assert owner["kind"] == "user" and owner["handed_over_by_run"]["pid"] == os.getpid()
    (kept,) = model_cache.reclaim_stale_children(root, tmp_path / "l.jsonl").kept
    assert live.child.is_dir() and "held by the user" in kept["kept_reason"]


def test_a_runs_own_cleanup_refuses_files_it_did_not_create(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/m", "own", held_by="run")
    (prepared.child / "keep.txt").write_text("the user's\n")
    entry = model_cache.finish_run_child(prepared, cleanup=True, reason="success", ledger_path=tmp_path / "l.jsonl",
                                         model="org/m", label="own")
    assert entry["phase"] == "kept" and not entry["ok"] and "keep.txt" in entry["kept_reason"]
    assert (prepared.child / "keep.txt").read_text() == "the user's\n" and not prepared.lock.held
    assert json.loads((prepared.child / model_cache.MANIFEST_NAME).read_text())["owner"]["kind"] == "user"
    clean = model_cache.prepare_child_cache(tmp_path / "root", "org/m", "clean", held_by="run")
    entry = model_cache.finish_run_child(clean, cleanup=True, reason="success", ledger_path=tmp_path / "l.jsonl",
                                         model="org/m", label="clean")
    assert entry["ok"] and entry["phase"] == "finished" and not clean.child.exists()


def test_an_old_manifest_without_a_holder_and_a_missing_lock_are_kept(tmp_path):
    root = tmp_path / "root"
    old = model_cache.prepare_child_cache(root, "org/m", "old")
    manifest = json.loads((old.child / model_cache.MANIFEST_NAME).read_text())
    manifest["owner"] = {"pid": 2 ** 22 + 1, "host": manifest["owner"]["host"], "start_ticks": 1}  # older versions
    (old.child / model_cache.MANIFEST_NAME).write_text(json.dumps(manifest))
    nolock = _dead_run_child(root, "org/m", "nolock")
    (nolock / model_cache.LOCK_NAME).unlink()
    kept = model_cache.reclaim_stale_children(root, tmp_path / "l.jsonl").kept
    assert [("older version" in k["kept_reason"], "lock" in k["kept_reason"]) for k in kept] == [
        (False, True), (True, False)]
    assert "owner" not in kept[1] and old.child.is_dir() and nolock.is_dir()


@pytest.mark.engine
def test_a_campaign_with_cleanup_keeps_the_users_prepared_children(tmp_path):
    """The reported scenario, on the real engine: two children prepared with the CLI (a user file in each) and a
    dead run's child under one root, then one campaign with --cleanup-model-cache on that root."""
    root = tmp_path / "root"
    children = [_prepare_with_cli(root, "tiny-flux-cpu", "mine"), _prepare_with_cli(root, "flux-1gpu", "yours")]
    dead = _dead_run_child(root, "tiny-flux-cpu", "died")
    before = {c: _snapshot(c) for c in children}
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--label", "campaign", "--output-dir",
                     str(tmp_path / "out"), "--model-cache-root", str(root), "--cleanup-model-cache", "--json",
                     timeout=900)
    assert run.returncode in (0, 1), run.stderr
    assert {c: _snapshot(c) for c in children} == before  # the user's files, byte for byte
    assert not dead.exists() and not (root / "tiny-flux-cpu-campaign").exists()
    ledger = _ledger(tmp_path / "out" / "cleanup.jsonl")
    kept = {e["cache_dir"]: e for e in ledger if e["phase"] == "kept"}
    assert set(kept) == {str(c) for c in children}
    assert all(e["owner"]["kind"] == "user" and "held by the user" in e["kept_reason"] for e in kept.values())
    finished = {e["cache_dir"]: e["exit_reason"] for e in ledger if e["phase"] == "finished"}
    assert finished == {str(dead): "reclaimed", str(root / "tiny-flux-cpu-campaign"): run.document["cleanup"]
                        ["exit_reason"]}
    assert [w["code"] for w in run.document["warnings"] if w["code"].startswith("cache.")] == ["cache.reclaimed"]
