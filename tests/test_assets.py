"""Input assets: download from a local HTTP server (real files, real hashes), trust on first use, verification
against pinned and recorded hashes, and per-asset statuses with exit 1 on missing or mismatched files."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench import assets, contract, datafile

REAL_PNG = TEST_FIXTURES / "sglang-0.5.10-h200" / "tiny_plain" / "out.png"


@pytest.fixture
def mirror(tmp_path):
    """A directory served over HTTP on 127.0.0.1; yields (dir, base_url)."""
    root = tmp_path / "mirror"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _downloaded() -> list[assets.Asset]:
    return [a for a in assets.load_manifest() if a.source["kind"] != "bundled"]


def _serve_all(root: Path) -> dict[str, str]:
    """Every manifest file a fetch downloads, each with distinct real content; returns filename -> sha256."""
    source = REAL_PNG.read_bytes() if REAL_PNG.exists() else b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    hashes = {}
    for i, asset in enumerate(_downloaded()):
        data = source + bytes([i])
        (root / asset.filename).write_bytes(data)
        hashes[asset.filename] = hashlib.sha256(data).hexdigest()
    return hashes


def _fetch(tmp_path, base_url):
    return run_main("bench_diffusion_denoise", "--fetch-assets", "--assets-base-url", base_url, "--json",
                      env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path / "work")})


def test_manifest_sources_and_honest_null_hashes():
    manifest = {a.id: a for a in assets.load_manifest()}
    assert manifest["cat"].source == {"kind": "hf_hub", "repo_id": "huggingface/documentation-images",
                                      "filename": "diffusers/cat.png", "repo_type": "dataset"}
    assert manifest["qwen-edit-input"].source["url"].endswith("/TI2I_Qwen_Image_Edit_Input.jpg")
    assert manifest["mova-single-person"].source["kind"] == "unresolved"
    assert all(a.sha256 is None for a in _downloaded())  # nobody has verified them yet
    bundled = manifest["tiny-input"]
    assert bundled.source == {"kind": "bundled"}
    assert hashlib.sha256((assets.BUNDLED_DIR / bundled.filename).read_bytes()).hexdigest() == bundled.sha256


def test_first_fetch_downloads_and_records_then_verifies(tmp_path, mirror):
    root, url = mirror
    hashes = _serve_all(root)
    first = _fetch(tmp_path, url)
    assert first.returncode == 0, first.stderr
    statuses = {a["filename"]: (a["status"], a["hash_source"], a["sha256"]) for a in first.document["assets"]}
    bundled = statuses.pop("tiny_input_64.png")  # copied from the bundle, whatever the mirror holds
    assert bundled[:2] == ("downloaded", "pinned")
    assert statuses == {name: ("unpinned", "recorded", digest) for name, digest in hashes.items()}
    assets_dir = tmp_path / "work" / "inputs" / "diffusion_benchmark" / "figs"
    lock = json.loads((assets_dir / "assets.lock.json").read_text())
    assert {v["filename"]: v["sha256"] for v in lock["assets"].values()} == hashes
    for name, digest in hashes.items():
        assert hashlib.sha256((assets_dir / name).read_bytes()).hexdigest() == digest

    second = _fetch(tmp_path, url)
    assert second.returncode == 0
    assert {a["status"] for a in second.document["assets"]} == {"present"}
    assert {a["hash_source"] for a in second.document["assets"]} == {"lock", "pinned"}

    (assets_dir / "cat.png").write_bytes(b"tampered")
    third = _fetch(tmp_path, url)
    assert third.returncode == 1 and not third.document["ok"]
    cat = next(a for a in third.document["assets"] if a["id"] == "cat")
    assert cat["status"] == "hash_mismatch" and cat["expected_sha256"] == hashes["cat.png"]
    assert third.document["counts"] == {"hash_mismatch": 1, "present": 4}

    (assets_dir / "cat.png").unlink()  # gone: re-downloaded and checked against the recorded hash
    fourth = _fetch(tmp_path, url)
    cat = next(a for a in fourth.document["assets"] if a["id"] == "cat")
    assert fourth.returncode == 0 and (cat["status"], cat["hash_source"]) == ("downloaded", "lock")


def test_missing_files_are_reported_and_fail(tmp_path, mirror):
    root, url = mirror
    _serve_all(root)
    (root / "mova_single_person.jpg").unlink()
    run = _fetch(tmp_path, url)
    assert run.returncode == 1
    mova = next(a for a in run.document["assets"] if a["id"] == "mova-single-person")
    assert mova["status"] == "missing" and "404" in mova["detail"] and mova["sha256"] is None
    assert not (tmp_path / "work/inputs/diffusion_benchmark/figs/mova_single_person.jpg.part").exists()


def test_pinned_hash_mismatch_on_download_is_not_installed(tmp_path, mirror):
    root, url = mirror
    _serve_all(root)
    pinned = assets.Asset("cat", "cat.png", {"kind": "url", "url": url + "cat.png"}, "0" * 64)
    outcomes, _ = assets.fetch_assets(tmp_path / "figs", (pinned,), download=assets.make_downloader())
    assert outcomes[0].status == "hash_mismatch" and outcomes[0].hash_source == "pinned"
    assert not (tmp_path / "figs" / "cat.png").exists()
    good = assets.Asset("cat", "cat.png", {"kind": "url", "url": url + "cat.png"},
                        hashlib.sha256((root / "cat.png").read_bytes()).hexdigest())
    outcomes, _ = assets.fetch_assets(tmp_path / "figs", (good,), download=assets.make_downloader())
    assert (outcomes[0].status, outcomes[0].hash_source) == ("downloaded", "pinned")


def test_a_run_installs_the_bundled_assets_it_lacks_and_only_those(tmp_path):
    figs = tmp_path / "figs"
    wanted = {figs / "tiny_input_64.png", figs / "cat.png"}
    assets.install_bundled(figs, wanted)
    assert sorted(p.name for p in figs.iterdir()) == ["tiny_input_64.png"]  # the hub one still needs --fetch-assets
    assert (figs / "tiny_input_64.png").read_bytes() == (assets.BUNDLED_DIR / "tiny_input_64.png").read_bytes()
    assets.install_bundled(tmp_path / "other", set())  # nothing wanted: nothing made
    assert not (tmp_path / "other").exists()


def test_a_bundled_copy_that_fails_its_hash_is_refused_by_name(tmp_path, monkeypatch):
    damaged = tmp_path / "bundle"
    damaged.mkdir()
    (damaged / "tiny_input_64.png").write_bytes(b"not the pinned picture")
    monkeypatch.setattr(assets, "BUNDLED_DIR", damaged)
    wanted = tmp_path / "figs" / "tiny_input_64.png"
    with pytest.raises(contract.PreconditionError) as caught:
        assets.require({wanted})
    assert caught.value.code == "assets.missing" and not wanted.exists()
    assert f"{wanted} (the bundled copy does not match the expected hash; it was not installed)" in caught.value.message


def test_unresolved_source_without_mirror_is_missing_with_a_hint(tmp_path):
    unresolved = assets.Asset("x", "x.png", {"kind": "unresolved", "description": "somewhere"}, None)
    outcomes, lock_path = assets.fetch_assets(tmp_path, (unresolved,))
    assert outcomes[0].status == "missing" and "place the file at" in outcomes[0].detail
    (tmp_path / "x.png").write_bytes(b"by hand")  # placed by hand: trusted on first use, then checked
    outcomes, _ = assets.fetch_assets(tmp_path, (unresolved,))
    assert (outcomes[0].status, outcomes[0].hash_source) == ("unpinned", "recorded")
    assert json.loads(lock_path.read_text())["assets"]["x"]["sha256"] == hashlib.sha256(b"by hand").hexdigest()


def test_bad_manifest_and_lock_are_input_errors(tmp_path):
    entry = {"id": "a", "filename": "a.png", "source": {"kind": "ftp"}, "sha256": None}
    manifest = tmp_path / "assets.yaml"
    manifest.write_text(json.dumps({"schema": "assets.v1", "assets": [entry]}))
    with pytest.raises(contract.InputError) as info:
        assets.load_manifest(manifest)
    assert info.value.code == datafile.DATA_FILE_INVALID and "assets[0] (id='a'), field 'source'" in info.value.message
    entry["source"] = {"kind": "url", "url": "https://example.invalid/a.png"}
    with pytest.raises(contract.InputError) as info:
        assets.parse_manifest({"schema": "assets.v1", "assets": [entry, entry]}, "m")
    assert info.value.code == "input.assets_invalid" and "duplicate id" in info.value.message
    (tmp_path / "assets.lock.json").write_text(json.dumps({"schema": "assets-lock.v1", "assets": {"a": {}}}))
    with pytest.raises(contract.InputError):
        assets.read_lock(tmp_path)
