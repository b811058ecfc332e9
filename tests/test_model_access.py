"""Gated presets: refused before anything runs without a token, unless a complete copy sits in the local Hugging
Face cache (found by huggingface_hub's own scan), in which case the run goes offline."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import run_main, run_script
from sgl_diffusion_bench import presets
from sgl_diffusion_bench.engine import model_access

FLUX = presets.get_preset("flux")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
NO_TOKEN = {"HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "", "HUGGINGFACE_HUB_TOKEN": ""}


def write_cached_model(hub: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """A hub cache laid out as huggingface_hub writes it: blobs by hash, a snapshot of symlinks, refs/main."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    return snapshot


def flux_files(with_transformer=True) -> dict[str, bytes]:
    index = {"_class_name": "FluxPipeline", "transformer": ["diffusers", "FluxTransformer2DModel"],
             "vae": ["diffusers", "AutoencoderKL"], "tokenizer_2": [None, None]}
    files = {"model_index.json": json.dumps(index).encode(), "vae/config.json": b"{}",
             "vae/diffusion_pytorch_model.safetensors": b"vae weights"}
    if with_transformer:
        shards = {"weight_map": {"a": "diffusion_pytorch_model-00001-of-00002.safetensors",
                                 "b": "diffusion_pytorch_model-00002-of-00002.safetensors"}}
        files.update({"transformer/diffusion_pytorch_model.safetensors.index.json": json.dumps(shards).encode(),
                      "transformer/diffusion_pytorch_model-00001-of-00002.safetensors": b"shard one",
                      "transformer/diffusion_pytorch_model-00002-of-00002.safetensors": b"shard two"})
    return files


def env_for(home: Path) -> dict[str, str]:
    return {**NO_TOKEN, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}


def test_a_gated_preset_without_token_or_copy_is_refused_before_anything_runs(tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "flux", "--label", "gated", "--output-dir",
                     str(tmp_path / "out"), "--engine-capabilities", "recent", "--json", env=env_for(tmp_path))
    assert run.returncode == 3, run.stderr[-2000:]
    error = run.document["error"]
    assert error["code"] == "hf.gated_no_token" and "black-forest-labs/FLUX.1-dev" in error["message"]
    assert "HF_TOKEN" in error["hint"] and not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_a_complete_local_copy_runs_offline(tmp_path):
    write_cached_model(tmp_path / "hub", FLUX.model, flux_files())
    access = model_access.decide(FLUX, env_for(tmp_path))
    assert access.decision == "offline_local_copy" and access.local_copy["revision"] == COMMIT
    assert model_access.require(FLUX, env_for(tmp_path)).env["HF_HUB_OFFLINE"] == "1"
    plan = run_main("bench_diffusion_denoise", "--model", "flux", "--dry-run", "--engine-capabilities", "recent",
                      "--json", env=env_for(tmp_path), expect_json=True).document
    assert plan["schema"] == "bench-plan.v1"
    assert all(r["env_set"].get("HF_HUB_OFFLINE") == "1" for r in plan["runs"]), plan


def test_an_incomplete_copy_does_not_count(tmp_path):
    write_cached_model(tmp_path / "hub", FLUX.model, flux_files(with_transformer=False))
    assert model_access.decide(FLUX, env_for(tmp_path)).decision == "refused"
    other = tmp_path / "other"
    snapshot = write_cached_model(other / "hub", FLUX.model, flux_files())
    (snapshot / "transformer" / "diffusion_pytorch_model-00002-of-00002.safetensors").unlink()  # a shard missing
    assert model_access.decide(FLUX, env_for(other)).decision == "refused"
    partial = tmp_path / "partial"
    write_cached_model(partial / "hub", FLUX.model, flux_files())
    (partial / "hub" / "models--black-forest-labs--FLUX.1-dev" / "blobs" / "abc.incomplete").write_bytes(b"")
    assert model_access.decide(FLUX, env_for(partial)).decision == "refused"  # a download still in progress


def test_a_token_variable_or_login_file_is_enough_and_public_models_need_none(tmp_path):
    assert model_access.decide(FLUX, {**env_for(tmp_path), "HF_TOKEN": "x"}).decision == "token"
    (tmp_path / "token").write_text("hf_loggedin")
    assert model_access.decide(FLUX, env_for(tmp_path)).decision == "token"
    assert model_access.decide(presets.get_preset("qwen"), env_for(tmp_path / "none")).decision == "public"
    assert model_access.decide(presets.get_preset("tiny-flux-cpu"), {}).decision == "local"


@pytest.mark.torch
def test_a_missing_seed_folder_gets_a_hint_that_helps(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--model-cache-root", str(tmp_path / "c"),
                     "--seed-model-cache-root", str(tmp_path / "nope"), "--dry-run", "--json",
                     env={"HF_HOME": str(tmp_path / "home")})
    assert run.returncode != 0
    doc = run.document
    error = doc["error"] if doc["schema"] == "error.v1" else doc["refusals"][0]  # the dry run names it as a refusal
    assert error["code"] == "cache.seed_missing" and str(tmp_path / "nope") not in error["hint"]
    assert "drop --seed-model-cache-root" in error["hint"]
