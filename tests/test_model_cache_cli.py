"""cleanup_model_cache as a user runs it: prepare/preflight/cleanup/verify JSON, exit codes, and real residue."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_main, run_script
from sgl_diffusion_bench import contract, model_cache
from sgl_diffusion_bench.cli import _runner
from sgl_diffusion_bench.cli import cache as cache_cli
from test_model_cache import SAFETENSORS, build_hf_repo, content_hash

OFFLINE = {"HF_HUB_OFFLINE": "1"}


@pytest.fixture
def seed(tmp_path) -> Path:
    hub = tmp_path / "seed" / "hub"
    build_hf_repo(hub, "org/tiny", {"unet/model.safetensors": SAFETENSORS, "model_index.json": b"{}"})
    return hub.parent


def prepare(root: Path, *extra: str, label: str = "baseline"):
    return run_main("cleanup_model_cache", "prepare", "--root", str(root), "--model", "org/tiny", "--label", label,
                      *extra, "--json", env=OFFLINE)


def test_prepare_cleanup_verify_round_trip(tmp_path, seed):
    before = content_hash(seed)
    run = prepare(tmp_path / "root", "--seed-cache", str(seed), "--preflight")
    assert run.returncode == 0, run.stderr
    doc = run.document
    child = Path(doc["child"])
    assert doc["schema"] == "cache-prepare.v1" and doc["root_created"] and child.name == "org_tiny-baseline"
    assert all(Path(v).is_relative_to(child) for v in doc["env"].values())
    assert doc["seed_caches"][0]["repos"] == ["models--org--tiny"]
    assert doc["preflight"]["size_source"] == "seed_snapshot" and doc["preflight"]["to_download_bytes"] == 0
    new_blob = Path(doc["env"]["HF_HUB_CACHE"]) / "models--org--tiny" / "blobs" / "run-blob"
    new_blob.write_bytes(SAFETENSORS)
    ledger = tmp_path / "out" / "cleanup.jsonl"

    dry = run_main("cleanup_model_cache", "cleanup", "--root", str(tmp_path / "root"), "--child", child.name,
                     "--dry-run", "--json")
    assert dry.returncode == 0 and dry.document["dry_run"] and dry.document["entry"] is None
    assert dry.document["plan"]["before"]["weight_file_count"] == 1 and new_blob.exists() and not ledger.exists()

    run = run_main("cleanup_model_cache", "cleanup", "--root", str(tmp_path / "root"), "--child", child.name,
                     "--reason", "success", "--ledger", str(ledger), "--json")
    assert run.returncode == 0, run.stderr
    entry = run.document["entry"]
    assert entry["ok"] and entry["model"] == "org/tiny" and entry["label"] == "baseline"
    assert entry["before"]["weight_bytes"] == len(SAFETENSORS) and entry["after"]["file_count"] == 0
    assert not os.path.lexists(child) and content_hash(seed) == before
    lines = ledger.read_text().splitlines()
    started, finished = (json.loads(line) for line in lines)  # the started line precedes the first deletion
    assert [started["phase"], finished["phase"]] == ["started", "finished"] and finished == entry
    assert contract.validation_errors(started) == [] and started["cleanup_id"] == finished["cleanup_id"]

    run = run_main("cleanup_model_cache", "verify", "--ledger", str(ledger), "--json")
    assert run.returncode == 0 and run.document["residue_count"] == 0
    assert run.document["entries"][0]["status"] == "absent"


@pytest.mark.parametrize("root", ["/", "symlink-to-slash"])
def test_prepare_refuses_slash_even_through_a_symlink(tmp_path, root):
    if root == "symlink-to-slash":
        os.symlink("/", tmp_path / root)
        root = str(tmp_path / root)
    run = run_main("cleanup_model_cache", "prepare", "--root", root, "--model", "m", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "cache.root_forbidden"
    assert not Path("/", model_cache.MARKER_NAME).exists()


def test_prepare_twice_is_a_precondition_error(tmp_path):
    assert prepare(tmp_path / "root").returncode == 0
    run = prepare(tmp_path / "root")
    assert run.returncode == 3 and run.document["error"]["code"] == "cache.child_exists"
    assert "cleanup" in run.document["error"]["hint"]


def test_cleanup_errors_have_exit_codes_and_delete_nothing(tmp_path):
    child = Path(prepare(tmp_path / "root").document["child"])
    base = ("cleanup", "--root", str(tmp_path / "root"), "--child", child.name)
    run = run_main("cleanup_model_cache", *base, "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.ledger_required"
    (tmp_path / "root" / model_cache.MARKER_NAME).unlink()
    run = run_main("cleanup_model_cache", *base, "--ledger", str(tmp_path / "l.jsonl"), "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "cache.root_not_marked"
    assert child.is_dir() and not (tmp_path / "l.jsonl").exists()


def test_cleanup_that_leaves_residue_exits_1(tmp_path, capsys):
    """In-process through the real CLI runner, with a deletion that skips one file: the re-scan must catch it."""
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/tiny", "x")
    kept = Path(prepared.env["TRITON_CACHE_DIR"]) / "kernel.cubin"
    kept.write_bytes(b"\0" * 7)

    def skip_one(dir_fd: int, name: str, kind: str, path: Path) -> None:
        if path != kept:
            model_cache.remove_entry(dir_fd, name, kind, path)

    code = _runner.run(cache_cli.TOOL, cache_cli.build_parser(), functools.partial(cache_cli.handle, remove=skip_one),
                       cache_cli.self_tests, ["cleanup", "--root", str(tmp_path / "root"), "--child", "org_tiny-x",
                                              "--ledger", str(tmp_path / "l.jsonl"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["ok"] is False and contract.validation_errors(doc) == []
    assert doc["entry"]["after"]["total_bytes"] == 7 + prepared.manifest_path.stat().st_size
    assert doc["entry"]["residual"]["child_present"]
    run = run_main("cleanup_model_cache", "verify", "--ledger", str(tmp_path / "l.jsonl"), "--json")
    assert run.returncode == 1 and run.document["residue_count"] == 1


def _immutable_supported(path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    probe = path / "probe"
    probe.write_text("")
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.unlink()
    return ok


def test_real_undeletable_file_is_reported_by_the_subprocess(tmp_path):
    """A file the kernel refuses to unlink (immutable attribute; works even as root) is real residue."""
    if not _immutable_supported(tmp_path):
        pytest.skip("chattr +i is not supported on this filesystem/user")
    child = Path(prepare(tmp_path / "root").document["child"])
    stuck = child / "huggingface" / "hub" / "stuck.safetensors"
    stuck.write_bytes(SAFETENSORS)
    subprocess.run(["chattr", "+i", str(stuck)], check=True)
    try:
        run = run_script("cleanup_model_cache", "cleanup", "--root", str(tmp_path / "root"), "--child", child.name,
                         "--reason", "error", "--ledger", str(tmp_path / "l.jsonl"), "--json")
        assert run.returncode == 1 and not run.document["ok"]
        entry = run.document["entry"]
        assert entry["after"]["weight_file_count"] == 1 and str(stuck) in entry["residual"]["present_paths"]
        assert any(f["path"] == str(stuck) for f in entry["deletion"]["failures"])
        assert "NOT CLEAN" in run.stderr
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)


def test_verify_missing_and_corrupt_ledgers(tmp_path):
    run = run_main("cleanup_model_cache", "verify", "--ledger", str(tmp_path / "none.jsonl"), "--json")
    assert run.returncode == 3 and run.document["error"]["code"] == "cache.ledger_missing"
    (tmp_path / "bad.jsonl").write_text("not json\n")
    run = run_main("cleanup_model_cache", "verify", "--ledger", str(tmp_path / "bad.jsonl"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "cache.ledger_unreadable"


def test_preflight_subcommand(tmp_path, seed):
    base = ("preflight", "--model", "org/tiny", "--cache-dir", str(tmp_path), "--seed-cache", str(seed))
    run = run_main("cleanup_model_cache", *base, "--json", env=OFFLINE)
    assert run.returncode == 0 and run.document["preflight"]["outcome"] == "fits"
    run = run_main("cleanup_model_cache", *base, "--headroom-bytes", str(1 << 62), "--json", env=OFFLINE)
    assert run.returncode == 3 and run.document["error"]["code"] == "cache.disk_too_small"
    assert run.document["error"]["details"]["size_source"] == "seed_snapshot"
    run = run_main("cleanup_model_cache", "preflight", "--model", "org/other", "--cache-dir", str(tmp_path),
                     "--json", env=OFFLINE)
    assert run.returncode == 0 and run.document["preflight"]["outcome"] == "unknown_size"
