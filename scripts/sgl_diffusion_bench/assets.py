"""Input images (data/assets.yaml): where each comes from, its hash, and fetching with trust on first use.

A pinned sha256 in the manifest is always checked. An unpinned asset gets its hash recorded in the assets
directory's lock file the first time it is seen; every later fetch checks against that record, so a file that
changes under the same name is caught even before anyone pins it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Mapping

from . import contract, datafile, fileio, paths

ASSETS_FILE = paths.DATA_DIR / "assets.yaml"
BUNDLED_DIR = paths.DATA_DIR / "assets"  # assets of kind "bundled": shipped here, installed without a download
LOCK_FILE_NAME = "assets.lock.json"
LOCK_SCHEMA_ID = "assets-lock.v1"
DOWNLOAD_TIMEOUT_S = 60
CHUNK_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Asset:
    id: str
    filename: str
    source: Mapping[str, str]
    sha256: str | None

    def source_text(self) -> str:
        kind = self.source["kind"]
        if kind == "hf_hub":
            return f"hf://{self.source['repo_type']}s/{self.source['repo_id']}/{self.source['filename']}"
        if kind == "url":
            return self.source["url"]
        if kind == "bundled":
            return f"bundled: {BUNDLED_DIR / self.filename}"
        return f"unresolved: {self.source['description']}"


@dataclasses.dataclass(frozen=True)
class FetchOutcome:
    """What happened to one asset. status: present | downloaded | unpinned | missing | hash_mismatch."""

    asset: Asset
    path: Path
    status: str
    sha256: str | None
    expected_sha256: str | None
    hash_source: str | None  # pinned (manifest) | lock (recorded earlier) | recorded (now, first use) | None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("missing", "hash_mismatch")

    def to_json(self) -> dict[str, Any]:
        return {"id": self.asset.id, "filename": self.asset.filename, "path": str(self.path),
                "source": self.asset.source_text(), "status": self.status, "sha256": self.sha256,
                "expected_sha256": self.expected_sha256, "hash_source": self.hash_source, "detail": self.detail}


def parse_manifest(document: Any, source: str) -> tuple[Asset, ...]:
    """Assets from a manifest already valid against assets.v1 (datafile.load checks that); ids must be unique."""
    ids = [a["id"] for a in document["assets"]]
    problems = [f"asset {i!r}: duplicate id" for i in sorted({i for i in ids if ids.count(i) > 1})]
    if problems:
        raise contract.InputError("input.assets_invalid", f"{source}: " + "; ".join(problems[:8]),
                                  "fix the entry so it follows schemas/assets.v1.schema.json")
    return tuple(Asset(a["id"], a["filename"], dict(a["source"]), a["sha256"]) for a in document["assets"])


@functools.lru_cache(maxsize=2)
def load_manifest(path: Path = ASSETS_FILE) -> tuple[Asset, ...]:
    return parse_manifest(datafile.load(path, "assets.v1"), str(path))


def read_lock(assets_dir: Path) -> dict[str, dict[str, str]]:
    path = assets_dir / LOCK_FILE_NAME
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise contract.InputError("input.assets_lock_unreadable", f"cannot read {path}: {exc}",
                                  f"fix or remove {path} (hashes recorded there are re-learned on the next "
                                  "fetch)") from exc
    contract.validate_input(document, LOCK_SCHEMA_ID, str(path))
    return document["assets"]


def write_lock(assets_dir: Path, entries: Mapping[str, Mapping[str, str]]) -> Path:
    path = assets_dir / LOCK_FILE_NAME
    document = {"schema": LOCK_SCHEMA_ID, "assets": {k: dict(v) for k, v in sorted(entries.items())}}
    contract.check_document(document)
    return fileio.atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def _http_download(url: str, dest: Path) -> None:
    import urllib.request  # with http.client and ssl, ~30 ms that a benchmark run without downloads never needs

    request = urllib.request.Request(url, headers={"User-Agent": "sglang-diffusion-benchmark-profile"})
    with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response, open(dest, "wb") as out:
        shutil.copyfileobj(response, out, CHUNK_BYTES)


def _hub_download(source: Mapping[str, str], dest: Path) -> None:
    from huggingface_hub import hf_hub_download

    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        got = hf_hub_download(repo_id=source["repo_id"], filename=source["filename"], repo_type=source["repo_type"],
                              revision=source.get("revision"), local_dir=tmp)
        shutil.move(got, dest)


Downloader = Callable[[Asset, Path], None]


def make_downloader(base_url: str | None = None) -> Downloader:
    """Hub assets through huggingface_hub, URL assets over HTTPS; ``base_url`` (a mirror) serves every file by name."""

    def download(asset: Asset, dest: Path) -> None:
        if asset.source["kind"] == "bundled":
            shutil.copyfile(BUNDLED_DIR / asset.filename, dest)
        elif base_url:
            _http_download(urllib.parse.urljoin(base_url.rstrip("/") + "/", asset.filename), dest)
        elif asset.source["kind"] == "hf_hub":
            _hub_download(asset.source, dest)
        elif asset.source["kind"] == "url":
            _http_download(asset.source["url"], dest)
        else:
            raise FileNotFoundError(f"no download source known ({asset.source['description']})")

    return download


def fetch_one(asset: Asset, assets_dir: Path, lock: dict[str, dict[str, str]], download: Downloader) -> FetchOutcome:
    """Make one asset present and verified; ``lock`` is updated in place when a hash is recorded."""
    path = assets_dir / asset.filename
    expected, hash_source = asset.sha256, "pinned" if asset.sha256 else None
    if expected is None and asset.id in lock:
        expected, hash_source = lock[asset.id]["sha256"], "lock"
    downloaded = False
    if not path.exists():
        part = path.with_name(path.name + ".part")
        try:
            download(asset, part)
        except Exception as exc:  # any download failure is reported per asset, never a traceback
            part.unlink(missing_ok=True)
            return FetchOutcome(asset, path, "missing", None, expected, hash_source,
                                f"download failed: {type(exc).__name__}: {exc}; place the file at {path} by hand")
        actual = fileio.sha256_file(part)
        if expected is not None and actual != expected:
            part.unlink()  # our own partial file: never install a file that fails its hash
            fetched = "the bundled copy" if asset.source["kind"] == "bundled" else "the downloaded file"
            return FetchOutcome(asset, path, "hash_mismatch", actual, expected, hash_source,
                                f"{fetched} does not match the expected hash; it was not installed")
        os.replace(part, path)
        downloaded = True
    else:
        actual = fileio.sha256_file(path)
        if expected is not None and actual != expected:
            return FetchOutcome(asset, path, "hash_mismatch", actual, expected, hash_source,
                                f"{path} differs from the {hash_source} hash; move it away and fetch again")
    if expected is None:
        lock[asset.id] = {"filename": asset.filename, "sha256": actual, "source": asset.source_text(),
                          "recorded_at": contract.utc_now()}
        return FetchOutcome(asset, path, "unpinned", actual, None, "recorded",
                            "hash recorded on first use" + (" after download" if downloaded else ""))
    return FetchOutcome(asset, path, "downloaded" if downloaded else "present", actual, expected, hash_source)


def filenames() -> dict[str, str]:
    """Each asset's file name in the assets folder, by asset id."""
    return {a.id: a.filename for a in load_manifest()}


def require(paths: set[Path]) -> None:
    """Every one of ``paths`` present before a run starts: the bundled ones among the missing installed, anything
    still missing refused."""
    wanted = {p for p in paths if not p.is_file()}
    why = {o.path: o.detail for folder in {p.parent for p in wanted} for o in install_bundled(folder, wanted)
           if o.failed}
    missing = sorted(f"{p} ({why[p]})" if p in why else str(p) for p in wanted if not p.is_file())
    if missing:
        raise contract.PreconditionError("assets.missing", f"input assets missing: {', '.join(missing)}",
                                         "run bench_diffusion_denoise.py --fetch-assets --json first")


def install_bundled(assets_dir: Path, missing: set[Path]) -> list[FetchOutcome]:
    """Copy the bundled assets among ``missing`` into ``assets_dir`` (verified against their pinned hash): a run needs
    no --fetch-assets for what the bundle ships. Each copy's outcome, so a refused one (a damaged bundle) is named."""
    bundled = [a for a in load_manifest() if a.source["kind"] == "bundled" and assets_dir / a.filename in missing]
    if bundled:
        assets_dir.mkdir(parents=True, exist_ok=True)
    return [fetch_one(asset, assets_dir, {}, make_downloader()) for asset in bundled]


def fetch_assets(assets_dir: Path, manifest: tuple[Asset, ...] | None = None,
                 download: Downloader | None = None) -> tuple[list[FetchOutcome], Path]:
    """Fetch and verify every asset into ``assets_dir``; returns the outcomes and the lock file path."""
    assets_dir.mkdir(parents=True, exist_ok=True)
    lock = read_lock(assets_dir)
    download = download or make_downloader()
    outcomes = [fetch_one(a, assets_dir, lock, download) for a in (manifest or load_manifest())]
    return outcomes, write_lock(assets_dir, lock)
