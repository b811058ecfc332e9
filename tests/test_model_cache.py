"""model_cache on real trees: HF-cache-shaped seeds with real blobs and symlinks, hostile layouts, interrupted and
faulty deletions. Every test checks what is on disk afterwards, not what the code says it did."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgl_diffusion_bench import contract, model_cache, paths

REV = "0123456789abcdef0123456789abcdef01234567"
SAFETENSORS = b"\x0e\x00\x00\x00\x00\x00\x00\x00" + b'{"__meta__":1}' + b"\0" * 100


def build_hf_repo(hub: Path, repo_id: str, files: dict[str, bytes], rev: str = REV) -> Path:
    """models--org--name/{blobs/<hash>, snapshots/<rev>/<name> -> ../../blobs/<hash>, refs/main}, as HF writes it."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    for name, data in files.items():
        blob = f"{abs(hash(data)):x}{len(data):x}"
        (repo / "blobs" / blob).write_bytes(data)
        link = repo / "snapshots" / rev / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(repo / "blobs" / blob, link.parent), link)
    return repo


@pytest.fixture
def seed(tmp_path) -> Path:
    """A read-only HF home: hub/ with a weight repo and a lock dir, made read-only like a shared cache."""
    hub = tmp_path / "seed-home" / "hub"
    build_hf_repo(hub, "org/flux-tiny", {"transformer/diffusion_pytorch_model.safetensors": SAFETENSORS,
                                        "model_index.json": b'{"_class_name": "FluxPipeline"}',
                                        "text_encoder/model.bin": b"PK\x03\x04" + b"\1" * 40})
    (hub / ".locks" / "models--org--flux-tiny").mkdir(parents=True)
    (hub / ".locks" / "models--org--flux-tiny" / "x.lock").write_text("")
    (hub / "version.txt").write_text("1")
    for dirpath, _dirnames, filenames in os.walk(hub):
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(0o444)
    return hub.parent


def content_hash(path: Path) -> str:
    return model_cache.fingerprint_tree(path, content=True)


def simulate_run(prepared: model_cache.PreparedCache) -> None:
    """What an engine run leaves: a new weight blob with its snapshot link, a rewritten ref, compiler caches."""
    hub = Path(prepared.env["HF_HUB_CACHE"])
    repo = hub / "models--org--flux-tiny"
    (repo / "blobs" / "newblob").write_bytes(SAFETENSORS + b"more")
    os.symlink("../../blobs/newblob", repo / "snapshots" / REV / "vae.safetensors")
    (repo / "refs" / "main").write_text(REV)  # writable: refs were copied, not linked
    (Path(prepared.env["TRITON_CACHE_DIR"]) / "kernel.cubin").write_bytes(b"\0" * 10)
    (Path(prepared.env["TORCHINDUCTOR_CACHE_DIR"]) / "fx").mkdir()


def test_env_points_every_cache_inside_the_child(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "black-forest-labs/FLUX.1-dev", "baseline")
    assert prepared.child == (tmp_path / "root" / "black-forest-labs_FLUX.1-dev-baseline").resolve()
    for key in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HF_MODULES_CACHE",
                "HF_XET_CACHE", "DIFFUSERS_CACHE", "TRANSFORMERS_CACHE", "MODELSCOPE_CACHE", "MODELSCOPE_MODULES_CACHE",
                "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TVM_FFI_CACHE_DIR", "SGLANG_DIFFUSION_CACHE_ROOT",
                "SGLANG_DG_CACHE_DIR"):
        assert Path(prepared.env[key]).is_relative_to(prepared.child), key
    assert prepared.env["HF_HUB_CACHE"] == prepared.env["HUGGINGFACE_HUB_CACHE"] == prepared.env["DIFFUSERS_CACHE"]
    marker = (tmp_path / "root" / model_cache.MARKER_NAME).read_text()
    assert "Only generated child caches" in marker
    manifest = json.loads(prepared.manifest_path.read_text())
    assert (manifest["model"], manifest["label"], manifest["state"]) == ("black-forest-labs/FLUX.1-dev", "baseline",
                                                                         "ready")


def test_cache_env_vars_are_the_ones_installed_sglang_reads():
    """Guards drift: each sglang-specific variable we set is read by the installed sglang source."""
    # Locate the sources without importing them: importing sglang 0.5.23 pulls in torchvision, whose CUDA build
    # cannot load beside CPU torch in-process (the CPU adapter's b0 covers only engine processes).
    try:
        spec = importlib.util.find_spec("sglang")
    except ImportError:
        spec = None
    if spec is None or spec.origin is None:
        pytest.skip("sglang is not installed")
    root = Path(spec.origin).parent
    reads = {"SGLANG_DIFFUSION_CACHE_ROOT": root / "multimodal_gen" / "envs.py",
             "SGLANG_DG_CACHE_DIR": root / "srt" / "layers" / "deep_gemm_wrapper" / "compile_utils.py",
             "TORCHINDUCTOR_CACHE_DIR": root / "srt" / "compilation" / "compiler_interface.py",
             "TRITON_CACHE_DIR": root / "srt" / "compilation" / "compiler_interface.py"}
    env = model_cache.cache_environment(Path("/x"))
    for var, source in reads.items():
        assert var in env and var in source.read_text(), (var, source)


def test_overlay_links_blobs_copies_refs_and_keeps_link_text(tmp_path, seed):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/flux-tiny", "a", [seed])
    src = seed / "hub" / "models--org--flux-tiny"
    dst = Path(prepared.env["HF_HUB_CACHE"]) / "models--org--flux-tiny"
    for blob in (src / "blobs").iterdir():
        assert os.readlink(dst / "blobs" / blob.name) == str(blob.resolve())
    snap_link = dst / "snapshots" / REV / "model_index.json"
    assert os.readlink(snap_link) == os.readlink(src / "snapshots" / REV / "model_index.json")
    assert os.path.realpath(snap_link) == os.path.realpath(src / "snapshots" / REV / "model_index.json")
    ref = dst / "refs" / "main"
    assert not ref.is_symlink() and ref.read_text() == REV and os.stat(ref).st_mode & stat.S_IWUSR
    assert list((Path(prepared.env["HF_HUB_CACHE"]) / ".locks").iterdir()) == []
    assert os.path.islink(Path(prepared.env["HF_HUB_CACHE"]) / "version.txt")
    assert prepared.seeds[0].hub == (seed / "hub").resolve() and prepared.seeds[0].files_copied == 1


def test_first_seed_wins_and_seeds_merge(tmp_path, seed):
    second = tmp_path / "second" / "hub"
    build_hf_repo(second, "org/flux-tiny", {"model_index.json": b'{"other": 1}', "extra.json": b"{}"})
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/flux-tiny", "a", [seed, second])
    snap = Path(prepared.env["HF_HUB_CACHE"]) / "models--org--flux-tiny" / "snapshots" / REV
    assert b"FluxPipeline" in (snap / "model_index.json").read_bytes()
    assert (snap / "extra.json").read_bytes() == b"{}"
    assert prepared.seeds[1].skipped_existing > 0


def test_seed_is_byte_identical_after_prepare_run_and_cleanup(tmp_path, seed):
    before = content_hash(seed)
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/flux-tiny", "run", [seed])
    simulate_run(prepared)
    entry = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child.name, "success", tmp_path / "l.jsonl")
    assert entry["ok"] and not os.path.lexists(prepared.child)
    assert content_hash(seed) == before
    assert entry["before"]["weight_file_count"] == 1  # the new blob, found through its .safetensors link
    # The 2 seed weights are reached through snapshot links whose final target lies in the seed: referenced, not owned.
    assert entry["before"]["linked_outside_weight_count"] == 2
    assert entry["before"]["linked_outside_count"] == 7  # 3 blob links + 3 snapshot links + version.txt
    assert entry["hf_scan_before"]["repo_count"] == 1
    assert entry["hf_scan_before"]["weight_blob_count"] == 3  # 2 from the seed + the new one
    assert entry["residual"]["outside_targets_checked"] == 7 and entry["residual"]["outside_targets_changed"] == []
    assert entry["seed_caches"][0]["unchanged"]


def test_interrupted_cleanup_is_recorded_then_rerun_finishes(tmp_path, seed):
    before = content_hash(seed)
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/flux-tiny", "run", [seed])
    simulate_run(prepared)
    calls = []

    def interrupt_midway(dir_fd: int, name: str, kind: str, path: Path) -> None:
        calls.append(path)
        if len(calls) == 6:
            raise KeyboardInterrupt
        model_cache.remove_entry(dir_fd, name, kind, path)

    ledger = tmp_path / "l.jsonl"
    with pytest.raises(KeyboardInterrupt):
        model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "interrupted", ledger,
                                        remove=interrupt_midway)
    started, first = (json.loads(line) for line in ledger.read_text().splitlines())
    assert started["phase"] == "started" and started["cleanup_id"] == first["cleanup_id"] and not started["ok"]
    assert first["deletion"]["interrupted"] and not first["ok"] and first["residual"]["child_present"]
    assert first["deletion"]["removed_count"] == 5
    assert content_hash(seed) == before
    second = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "interrupted", ledger)
    assert second["ok"] and not os.path.lexists(prepared.child)
    assert content_hash(seed) == before
    verified = model_cache.verify_ledger(ledger)
    assert verified["residue_count"] == 0 and verified["recorded_failures"] == 1


def test_the_manifest_goes_last_so_a_stopped_cleanup_can_be_resumed(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    (prepared.child / "torch" / "stuck").mkdir()
    (prepared.child / "torch" / "stuck" / "weights.bin").write_bytes(b"w")
    removed = []

    def undeletable(dir_fd: int, name: str, kind: str, path: Path) -> None:
        if name == "weights.bin":
            raise PermissionError(13, "Permission denied")
        removed.append(path)
        model_cache.remove_entry(dir_fd, name, kind, path)

    entry = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "error", tmp_path / "l",
                                            remove=undeletable)
    assert not entry["ok"] and prepared.manifest_path.is_file()  # kept: the child is still recognisably ours
    assert prepared.manifest_path not in removed and any("PermissionError" in f["error"]
                                                         for f in entry["deletion"]["failures"])
    resumed = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "error", tmp_path / "l")
    assert resumed["ok"] and not prepared.child.exists()
    assert resumed["residual"]["deletions_outside_child"] == [] and resumed["residual"]["deletion_directories_checked"]


def test_an_unwritable_ledger_refuses_before_deleting(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    (tmp_path / "ledger-is-a-dir").mkdir()
    for ledger in (tmp_path / "ledger-is-a-dir", tmp_path / "ledger-is-a-dir"):
        with pytest.raises(contract.PreconditionError) as info:
            model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "error", ledger)
        assert info.value.code == "cache.ledger_unwritable"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(contract.PreconditionError):
        model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "error", tmp_path / "fifo")
    assert prepared.manifest_path.is_file() and (prepared.child / "torch").is_dir()


def test_residual_comes_from_the_rescan_not_the_deletion(tmp_path, seed):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "org/flux-tiny", "run", [seed])
    simulate_run(prepared)
    kept = Path(prepared.env["HF_HUB_CACHE"]) / "models--org--flux-tiny" / "blobs" / "newblob"

    def skip_one(dir_fd: int, name: str, kind: str, path: Path) -> None:  # "succeeds" without removing one file
        if path != kept:
            model_cache.remove_entry(dir_fd, name, kind, path)

    entry = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "success", tmp_path / "l.jsonl",
                                            remove=skip_one)
    assert not entry["ok"]
    # What is left: the kept blob, and the manifest (kept while anything else remains, so a rerun can finish).
    assert entry["after"]["file_count"] == 2 and entry["after"]["weight_file_count"] == 1
    assert entry["after"]["total_bytes"] == kept.stat().st_size + prepared.manifest_path.stat().st_size
    residual = entry["residual"]
    assert residual["child_present"] and residual["child_listed_in_root"] and not residual["clean"]
    assert str(kept) in residual["present_paths"] and str(prepared.manifest_path) in residual["present_paths"]
    assert residual["former_entries_present"] == 1 + len(kept.relative_to(prepared.child).parts)
    assert any("OSError" in f["error"] for f in entry["deletion"]["failures"])  # rmdir of the non-empty parents
    verified = model_cache.verify_ledger(tmp_path / "l.jsonl")
    assert verified["residue_count"] == 1 and verified["entries"][0]["residual"]["weight_file_count"] == 1


def test_symlink_to_outside_directory_is_unlinked_not_followed(tmp_path):
    outside = tmp_path / "precious"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "weights.safetensors").write_bytes(SAFETENSORS)
    before = content_hash(outside)
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    os.symlink(outside, prepared.child / "huggingface" / "hub" / "escape")
    os.symlink("../../../precious/sub/weights.safetensors", prepared.child / "w.safetensors")
    entry = model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "error", tmp_path / "l.jsonl")
    assert entry["ok"] and content_hash(outside) == before
    assert entry["before"]["linked_outside_count"] == 2 and entry["before"]["linked_outside_weight_count"] == 1


def test_symlink_swapped_in_during_cleanup_is_not_followed(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "a.bin").write_bytes(b"keep")
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    victim_dir = prepared.child / "modelscope" / "x"
    victim_dir.mkdir()
    (victim_dir / "a.bin").write_bytes(b"temp")
    plan = model_cache.plan_cleanup(tmp_path / "root", prepared.child)
    (victim_dir / "a.bin").unlink()
    victim_dir.rmdir()
    os.symlink(outside, victim_dir)  # the directory became a link to outside after planning
    outcome = model_cache.execute_cleanup(plan)
    assert (outside / "a.bin").read_bytes() == b"keep"
    assert any("replaced since planning" in f["error"] for f in outcome["failures"])


@pytest.mark.parametrize("model,label,expected", [
    ("../../etc", "x", "_._etc-x"),
    ("org/name", "..", None),
    ("a/b", "../../..", None),
    ("..hidden", "r..1", "hidden-r.1"),
])
def test_names_cannot_escape_the_root(tmp_path, model, label, expected):
    if expected is None:
        with pytest.raises(contract.UsageError) as info:
            model_cache.prepare_child_cache(tmp_path / "root", model, label)
        assert info.value.code == "cache.bad_name"
        return
    prepared = model_cache.prepare_child_cache(tmp_path / "root", model, label)
    assert prepared.child.name == expected and prepared.child.parent == (tmp_path / "root").resolve()
    assert ".." not in prepared.child.name


def test_forbidden_roots(tmp_path, monkeypatch):
    link_to_slash = tmp_path / "slash"
    os.symlink("/", link_to_slash)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for root in (link_to_slash, "/", tmp_path / "home", paths.CHECKOUT_ROOT, paths.CHECKOUT_ROOT.parent):
        with pytest.raises(contract.UsageError) as info:
            model_cache.prepare_child_cache(root, "m", "l")
        assert info.value.code == "cache.root_forbidden", root
        with pytest.raises(contract.UsageError):
            model_cache.cleanup_child_cache(root, "etc", "success", tmp_path / "l.jsonl")
    assert not (tmp_path / "home" / model_cache.MARKER_NAME).exists()


def test_root_inside_seed_and_seed_inside_target_are_refused(tmp_path, seed):
    before = content_hash(seed)
    with pytest.raises(contract.UsageError) as info:
        model_cache.prepare_child_cache(seed / "hub" / "mine", "m", "l", [seed])
    assert info.value.code == "cache.root_inside_seed"
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    with pytest.raises(contract.UsageError) as info:
        model_cache.overlay_seed(prepared.child / "huggingface", Path(prepared.env["HF_HUB_CACHE"]))
    assert info.value.code == "cache.seed_overlaps_target"
    with pytest.raises(contract.InputError):
        model_cache.prepare_child_cache(tmp_path / "root", "m", "other", [tmp_path / "not-a-cache"])
    assert content_hash(seed) == before


def test_existing_child_and_foreign_root_are_refused(tmp_path):
    model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    with pytest.raises(contract.PreconditionError) as info:
        model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    assert info.value.code == "cache.child_exists"
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "thesis.pdf").write_bytes(b"%PDF")
    with pytest.raises(contract.PreconditionError) as info:
        model_cache.prepare_child_cache(foreign, "m", "l")
    assert info.value.code == "cache.root_not_ours" and not (foreign / model_cache.MARKER_NAME).exists()


def test_missing_marker_deletes_nothing(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    (tmp_path / "root" / model_cache.MARKER_NAME).unlink()
    with pytest.raises(contract.PreconditionError) as info:
        model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "success", tmp_path / "l.jsonl")
    assert info.value.code == "cache.root_not_marked" and prepared.manifest_path.is_file()
    assert not (tmp_path / "l.jsonl").exists()


def test_child_that_is_not_ours_is_refused(tmp_path):
    model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    stranger = tmp_path / "root" / "someone-else"
    stranger.mkdir()
    (stranger / "data.bin").write_bytes(b"1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    os.symlink(outside, tmp_path / "root" / "linked")
    cases = {"someone-else": "cache.child_not_ours", "linked": "cache.child_not_directory",
             str(outside): "cache.child_outside_root", "../outside": "cache.child_outside_root",
             "gone": "cache.child_missing"}
    for child, code in cases.items():
        with pytest.raises(contract.ToolError) as info:
            model_cache.cleanup_child_cache(tmp_path / "root", child, "success", tmp_path / "l.jsonl")
        assert info.value.code == code, child
    assert (stranger / "data.bin").exists() and (outside / "keep").exists()


def test_ledger_inside_the_child_is_refused(tmp_path):
    prepared = model_cache.prepare_child_cache(tmp_path / "root", "m", "l")
    with pytest.raises(contract.UsageError):
        model_cache.cleanup_child_cache(tmp_path / "root", prepared.child, "success", prepared.child / "l.jsonl")
    assert prepared.child.is_dir()


def test_weight_rule_knows_suffixless_blobs_and_magic(tmp_path):
    top = tmp_path / "t"
    top.mkdir()
    (top / "blob-a").write_bytes(b"\0" * 50)  # a weight only because a .safetensors link points at it
    os.symlink("blob-a", top / "unet.safetensors")
    (top / "blob-b").write_bytes(SAFETENSORS)  # safetensors header, no suffix, no link
    (top / "blob-c").write_bytes(b"GGUF" + b"\0" * 20)
    (top / "notes.pt").write_bytes(b"x")
    (top / "video.mp4").write_bytes(b"\0" * 5000)  # large but not a weight
    (top / "tokenizer.json").write_bytes(b"{" * 20)
    stats = model_cache.compute_stats(top, model_cache.walk_tree(top))
    assert stats["weight_file_count"] == 4 and stats["file_count"] == 6 and stats["symlink_count"] == 1
    assert stats["weight_bytes"] == 50 + len(SAFETENSORS) + 24 + 1


def test_verify_reports_residue_and_recreated_children(tmp_path):
    ledger = tmp_path / "l.jsonl"
    a = model_cache.prepare_child_cache(tmp_path / "root", "m", "a")
    b = model_cache.prepare_child_cache(tmp_path / "root", "m", "b")
    model_cache.cleanup_child_cache(tmp_path / "root", a.child, "success", ledger)
    model_cache.cleanup_child_cache(tmp_path / "root", b.child, "success", ledger)
    assert model_cache.verify_ledger(ledger)["residue_count"] == 0
    model_cache.prepare_child_cache(tmp_path / "root", "m", "a")  # a later run reuses the name legitimately
    b.child.mkdir()
    (b.child / "left.safetensors").write_bytes(SAFETENSORS)  # residue appearing where a cleaned child was
    result = model_cache.verify_ledger(ledger)
    assert [e["status"] for e in result["entries"]] == ["recreated_after_cleanup", "present"]
    assert result["residue_count"] == 1 and result["entries"][1]["residual"]["weight_file_count"] == 1


def test_verify_walks_only_our_children_and_reads_a_manifest_date_it_can_use(tmp_path):
    """Issue 44: a ledger line naming `/` made verify walk the whole machine; a manifest saying
    `created_at_unix_s: 'yesterday'` was exit 70. The first is refused naming its line, the second is no date."""
    ledger = tmp_path / "l.jsonl"
    a = model_cache.prepare_child_cache(tmp_path / "root", "m", "a")
    model_cache.cleanup_child_cache(tmp_path / "root", a.child, "success", ledger)
    again = model_cache.prepare_child_cache(tmp_path / "root", "m", "a")
    manifest = json.loads(again.manifest_path.read_text())
    again.manifest_path.write_text(json.dumps({**manifest, "created_at_unix_s": "yesterday"}))
    entry = model_cache.verify_ledger(ledger)["entries"][0]
    assert entry["status"] == "present" and entry["residual"]["file_count"] >= 1  # no usable date: not "recreated"
    line = json.loads(ledger.read_text().splitlines()[-1])
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(json.dumps({**line, "cache_dir": "/"}) + "\n")
    with pytest.raises(contract.InputError) as refused:
        model_cache.verify_ledger(hostile)
    assert refused.value.code == "cache.ledger_unreadable" and "line 1: cache_dir / is present" in refused.value.message


def test_verify_rejects_missing_empty_and_corrupt_ledgers(tmp_path):
    with pytest.raises(contract.PreconditionError):
        model_cache.verify_ledger(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(contract.PreconditionError):
        model_cache.verify_ledger(tmp_path / "empty.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"schema": "cleanup-ledger.v1"}\n')
    with pytest.raises(contract.InputError):
        model_cache.verify_ledger(tmp_path / "bad.jsonl")


def fake_model_info(files: dict[str, tuple[int, str]]):
    def model_info(repo_id, *, revision=None, files_metadata=False, timeout=None):
        assert files_metadata and timeout is not None
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=n, size=s, blob_id="git" + n,
                                                         lfs=SimpleNamespace(sha256=sha))
                                         for n, (s, sha) in files.items()])
    return model_info


def test_preflight_subtracts_what_the_seed_provides(tmp_path, seed):
    blob = next((seed / "hub" / "models--org--flux-tiny" / "blobs").iterdir()).name
    info = fake_model_info({"a.safetensors": (10_000, blob), "b.safetensors": (5_000, "f" * 64)})
    result = model_cache.disk_preflight("org/flux-tiny", None, tmp_path, [seed], headroom_bytes=0,
                                        environ={}, model_info=info)
    assert result["outcome"] == "fits" and result["size_source"] == "hub_metadata"
    assert (result["required_bytes"], result["provided_by_seed_bytes"], result["to_download_bytes"]) == \
        (15_000, 10_000, 5_000)
    huge = fake_model_info({"a.safetensors": (1 << 60, "e" * 64)})
    with pytest.raises(contract.PreconditionError) as err:
        model_cache.disk_preflight("org/flux-tiny", None, tmp_path, [seed], environ={}, model_info=huge)
    assert err.value.code == "cache.disk_too_small" and err.value.details["to_download_bytes"] == 1 << 60


def test_preflight_offline_uses_the_seed_snapshot_or_says_unknown(tmp_path, seed):
    def never(*args, **kwargs):
        raise AssertionError("HF_HUB_OFFLINE must skip the hub")

    off = {"HF_HUB_OFFLINE": "1"}
    result = model_cache.disk_preflight("org/flux-tiny", None, tmp_path, [seed], environ=off, model_info=never)
    assert result["size_source"] == "seed_snapshot" and result["to_download_bytes"] == 0
    assert result["required_bytes"] == len(SAFETENSORS) + 31 + 44 and result["hub_error"] == "HF_HUB_OFFLINE is set"
    unknown = model_cache.disk_preflight("org/absent", None, tmp_path, [seed], environ=off, model_info=never)
    assert unknown["outcome"] == "unknown_size" and unknown["required_bytes"] is None
    assert "size unknown" in unknown["notes"][0]


def test_preflight_unreachable_hub_is_an_error_string_not_a_crash(tmp_path):
    """The hub is not reachable from this machine: a real request fails fast and becomes 'unknown_size'."""
    result = model_cache.disk_preflight("black-forest-labs/FLUX.1-dev", None, tmp_path, [], environ={},
                                        hub_timeout_s=3)
    assert result["outcome"] == "unknown_size" and result["hub_error"]


def test_preflight_keeps_a_total_deadline_on_the_hub_call(tmp_path):
    """huggingface_hub's timeout bounds each socket read; a hub that answers slowly is cut off at the deadline."""
    def slow(*args, **kwargs):
        time.sleep(30)

    started = time.monotonic()
    result = model_cache.disk_preflight("org/slow", None, tmp_path, [], environ={}, model_info=slow, hub_timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert result["outcome"] == "unknown_size" and "within 0.5 s" in result["hub_error"]


def test_a_local_model_directory_is_sized_at_any_depth_and_a_whole_machine_is_refused(tmp_path, monkeypatch):
    """Issue 44: `preflight --model /` walked the machine and died on /proc (exit 70); a 2,199-deep tree is still a
    tree. File links count at their target's size (a snapshot links its blobs); directory links are not followed."""
    from sgl_diffusion_bench.model_cache import preflight

    model = tmp_path / "model"
    nested = model.joinpath(*["n"] * 100)
    nested.mkdir(parents=True)
    (nested / "weights.safetensors").write_bytes(b"w" * 1000)
    _chain(model, 2199)  # past PATH_MAX: the walk skips what it cannot open
    (model / "model_index.json").write_text("{}")
    (tmp_path / "blob").write_bytes(b"b" * 500)
    (model / "linked.bin").symlink_to(tmp_path / "blob")
    (model / "outside").symlink_to(tmp_path, target_is_directory=True)  # not followed: the blob is counted once
    result = model_cache.disk_preflight(str(model), None, tmp_path, [], environ={}, headroom_bytes=0)
    assert (result["size_source"], result["required_bytes"], result["file_count"]) == ("local_path", 1502, 3)
    monkeypatch.setattr(preflight, "MAX_LOCAL_FILES", 2)
    try:
        with pytest.raises(contract.UsageError) as refused:
            model_cache.disk_preflight(str(model), None, tmp_path, [], environ={})
        assert refused.value.code == "cache.not_a_model_dir" and "model_index.json" in refused.value.hint
    finally:
        _chain(model, 2199, remove=True)  # pytest's own clean-up of old temp folders recurses and would overflow


def _chain(top: Path, depth: int, remove: bool = False) -> None:
    """Make (or remove) top/d/d/.../d, ``depth`` deep, through directory descriptors: its path is past PATH_MAX."""
    fds = [os.open(top, os.O_RDONLY)]
    try:
        for _ in range(depth if not remove else depth - 1):
            if not remove:
                os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        if remove:
            for parent in reversed(fds):
                os.rmdir("d", dir_fd=parent)
    finally:
        for fd in fds:
            os.close(fd)
