"""The tiny FLUX.1 builder: byte-identical rebuilds, the directory names that do and do not resolve natively,
component sizes that fit together, and an atomic, idempotent cache entry."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import tiny_model

pytestmark = pytest.mark.torch  # builds the model with torch


def digests(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    return tiny_model.ensure_local_model(cache_dir=first), tiny_model.ensure_local_model(cache_dir=second,
                                                                                 name=tiny_model.UNRESOLVED_NAME)


def test_rebuilds_are_byte_identical_whatever_the_name(two_builds):
    native, unresolved = two_builds
    assert native.name == "tiny-FLUX.1-dev" and unresolved.name == "tinyflux"
    assert "flux.1" in native.name.lower() and "flux.1" not in unresolved.name.lower()
    first, second = digests(native), digests(unresolved)
    assert len(first) == 14 and first == second


def test_components_fit_the_flux_constraints(two_builds):
    native, _ = two_builds
    index = json.loads((native / "model_index.json").read_text())
    assert index["_class_name"] == "FluxPipeline" and "_diffusers_version" in index
    load = lambda part: json.loads((native / part / "config.json").read_text())  # noqa: E731
    dit, vae, clip, t5 = load("transformer"), load("vae"), load("text_encoder"), load("text_encoder_2")
    assert sum(dit["axes_dims_rope"]) == dit["attention_head_dim"]
    assert dit["joint_attention_dim"] == t5["d_model"] and dit["pooled_projection_dim"] == clip["hidden_size"]
    assert dit["in_channels"] == 4 * vae["latent_channels"]
    assert 2 ** (len(vae["block_out_channels"]) - 1) == 8  # vae_scale_factor 8, as in real FLUX
    assert sum(p.stat().st_size for p in native.rglob("*") if p.is_file()) < 2_000_000


def test_ensure_is_idempotent_and_leaves_no_staging_dirs(two_builds):
    native, _ = two_builds
    before = {path: path.stat().st_mtime_ns for path in native.rglob("*")}
    assert tiny_model.ensure_local_model(cache_dir=native.parent) == native
    assert {path: path.stat().st_mtime_ns for path in native.rglob("*")} == before
    assert [p.name for p in native.parent.iterdir()] == [native.name]


def test_default_cache_dir_is_overridable(monkeypatch, tmp_path):
    monkeypatch.setenv(tiny_model.CACHE_ENV, str(tmp_path))
    assert tiny_model.default_cache_dir() == tmp_path
    monkeypatch.delenv(tiny_model.CACHE_ENV)
    monkeypatch.setenv("DIFFUSION_BENCH_WORKDIR", str(tmp_path / "work"))
    expected = tmp_path / "work" / ".cache" / "tiny-models" / tiny_model.transformers_tag()
    assert tiny_model.default_cache_dir() == expected


def test_a_build_started_beside_the_probe_is_finished_by_the_run_that_asks(monkeypatch, tmp_path, capsys):
    cache = tmp_path / "made" / "for" / "it"
    monkeypatch.setenv(tiny_model.CACHE_ENV, str(cache))
    preset = presets.get_preset("tiny-flux-cpu")
    tiny_model.build_beside_probe(preset, model_path="/somewhere/else")  # the user's own model: nothing to build
    assert not (tmp_path / "made").exists()
    tiny_model.build_beside_probe(preset, model_path=None)
    assert [p.name.startswith(".tiny-FLUX.1-dev.building-") for p in cache.iterdir()] == [True]
    built = tiny_model.ensure_local_model()
    assert built == cache / tiny_model.NATIVE_NAME and (built / "model_index.json").is_file()
    assert [p.name for p in cache.iterdir()] == [tiny_model.NATIVE_NAME]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("[progress] tiny model: building tiny-FLUX.1-dev ...")
    assert "started beside the engine probe" in err[0]
    assert err[-1].startswith("[progress] tiny model: building tiny-FLUX.1-dev: done in ")
    tiny_model.build_beside_probe(preset, model_path=None)  # built already: nothing started
    tiny_model.cancel_early_builds()
    assert [p.name for p in cache.iterdir()] == [tiny_model.NATIVE_NAME]


def test_a_build_nobody_asked_for_is_stopped_and_leaves_nothing(monkeypatch, tmp_path):
    (tmp_path / "theirs").mkdir()
    monkeypatch.setenv(tiny_model.CACHE_ENV, str(tmp_path / "theirs" / "made" / "for" / "it"))
    tiny_model.build_beside_probe(presets.get_preset("tiny-flux-cpu"), model_path=None)
    assert (tmp_path / "theirs" / "made").is_dir()
    tiny_model.cancel_early_builds()  # the run was refused after its probe
    assert [p.name for p in tmp_path.iterdir()] == ["theirs"] and not any((tmp_path / "theirs").iterdir())


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    return tiny_model.ensure_local_model("tiny-wan-t2v", tmp_path_factory.mktemp("wan"))


def test_the_tiny_wan_has_the_shapes_the_engine_needs_and_stays_small(wan):
    index = json.loads((wan / "model_index.json").read_text())
    assert index["_class_name"] == "WanPipeline" and wan.name == "tiny-Wan2.1-T2V-1.3B-Diffusers"
    load = lambda part: json.loads((wan / part / "config.json").read_text())  # noqa: E731
    dit, vae, umt5 = load("transformer"), load("vae"), load("text_encoder")
    assert dit["in_channels"] == dit["out_channels"] == vae["z_dim"] and dit["text_dim"] == umt5["d_model"]
    assert umt5["architectures"] == ["UMT5EncoderModel"]
    assert 2 ** (len(vae["dim_mult"]) - 1) == 8 and sum(vae["temperal_downsample"]) == 2  # 8x space, 4x time
    scheduler = json.loads((wan / "scheduler" / "scheduler_config.json").read_text())
    # only the keys the published checkpoints carry: sglang 0.5.10.post1's UniPC refuses newer diffusers' extra ones
    assert scheduler["flow_shift"] and set(scheduler) <= set(tiny_model.PUBLISHED_WAN_SCHEDULER_KEYS)
    assert "shift_terminal" not in scheduler
    assert sum(p.stat().st_size for p in wan.rglob("*") if p.is_file()) < 2_000_000


def test_the_tiny_wan_rebuilds_byte_identically(wan, tmp_path):
    assert digests(tiny_model.ensure_local_model("tiny-wan-t2v", tmp_path)) == digests(wan)


def test_an_unknown_local_model_is_refused_naming_those_there_are():
    with pytest.raises(contract.InputError, match="no builder for local model 'tiny-sdxl'") as refused:
        tiny_model.local_model_path("tiny-sdxl", build=False)
    assert refused.value.code == "input.unknown_local_model"
    assert refused.value.hint == "use local_model: tiny-flux or tiny-wan-t2v or tiny-wan-i2v or tiny-flux2-klein"


def test_the_tiny_wan_i2v_conditions_on_an_image_as_the_published_checkpoints_do(tmp_path):
    i2v = tiny_model.ensure_local_model("tiny-wan-i2v", tmp_path)
    index = json.loads((i2v / "model_index.json").read_text())
    assert index["_class_name"] == "WanImageToVideoPipeline" and index["image_encoder"][1] == "CLIPVisionModel"
    load = lambda part: json.loads((i2v / part / "config.json").read_text())  # noqa: E731
    dit, vae, clip = load("transformer"), load("vae"), load("image_encoder")
    assert dit["in_channels"] == 2 * vae["z_dim"] + 4 and dit["image_dim"] == clip["hidden_size"]
    from safetensors import safe_open
    with safe_open(i2v / "image_encoder" / "model.safetensors", "pt") as weights:
        names = list(weights.keys())
    # the prefix once, whichever transformers saved it (5.19 drops it, 5.3 keeps it)
    assert all(n.startswith("vision_model.") and not n.startswith("vision_model.vision_model.") for n in names)
    assert sum(p.stat().st_size for p in i2v.rglob("*") if p.is_file()) < 2_000_000


def test_the_tiny_flux2_klein_feeds_its_transformer_three_of_its_encoders_hidden_states(tmp_path):
    klein = tiny_model.ensure_local_model("tiny-flux2-klein", tmp_path)
    assert klein.name == "tiny-FLUX.2-klein-4B"  # the name the engine resolves to its Klein config
    index = json.loads((klein / "model_index.json").read_text())
    assert index["_class_name"] == "Flux2KleinPipeline" and index["text_encoder"][1] == "Qwen3ForCausalLM"
    load = lambda part: json.loads((klein / part / "config.json").read_text())  # noqa: E731
    encoder, dit, vae = load("text_encoder"), load("transformer"), load("vae")
    # the engine stacks the hidden states after layers 9, 18 and 27 into the transformer's text input
    assert encoder["num_hidden_layers"] > 27 and dit["joint_attention_dim"] == 3 * encoder["hidden_size"]
    assert dit["in_channels"] == 4 * vae["latent_channels"] and not dit["guidance_embeds"]
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(klein / "tokenizer")
    text = tokenizer.apply_chat_template([{"role": "user", "content": "a cat"}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    assert text == "<|im_start|>user\na cat<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tokenizer("a cat")["input_ids"][-1] == tokenizer.convert_tokens_to_ids("cat")  # a learned merge
    assert sum(p.stat().st_size for p in klein.rglob("*") if p.is_file()) < 2_000_000
