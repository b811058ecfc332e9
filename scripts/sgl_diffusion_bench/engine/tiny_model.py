"""Tiny random-weight pipelines in diffusers format (FLUX.1 text-to-image, Wan2.1 text-to-video and image-to-video,
FLUX.2 Klein image editing), built locally (no hub), so the real engine runs every kind of model on CPU.

The directory name decides how sglang 0.5.10.post1 resolves it: a basename containing "FLUX.1" resolves to the
native FLUX.1 config (``tiny-FLUX.1-dev``); any other name (``tinyflux``) does not, which makes ``--backend auto``
fall back to diffusers and ``--backend sglang`` fail. Builds are deterministic, byte for byte (fixed seeds, a
hand-made tokenizer vocabulary), and atomic: built in a temporary sibling directory, then renamed into place.

``model_location`` says where a preset's model is read from: a directory the user named (``--model-path``), a tiny
local model (built here when a run needs it), or the hub.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import bench_env, contract, paths, progress, work_dirs
from . import engine_process
from ..presets import Preset

NATIVE_NAME = "tiny-FLUX.1-dev"
UNRESOLVED_NAME = "tinyflux"
# local_model -> (directory name the engine resolves natively, builder in this module)
LOCAL_MODELS = {"tiny-flux": (NATIVE_NAME, "build_tiny_flux"),
                "tiny-wan-t2v": ("tiny-Wan2.1-T2V-1.3B-Diffusers", "build_tiny_wan_t2v"),
                "tiny-wan-i2v": ("tiny-Wan2.1-I2V-14B-480P-Diffusers", "build_tiny_wan_i2v"),
                "tiny-flux2-klein": ("tiny-FLUX.2-klein-4B", "build_tiny_flux2_klein")}
CACHE_ENV = bench_env.TINY_MODEL_DIR
CLIP_HIDDEN = 32  # == FluxTransformer2DModel.pooled_projection_dim
T5_D_MODEL = 32  # == FluxTransformer2DModel.joint_attention_dim
LATENT_CHANNELS = 4  # FLUX packs 2x2 latent patches: transformer in_channels == 4 * latent_channels
ROPE_AXES = (4, 6, 6)  # sums to attention_head_dim
CLIP_MERGES = [("a", "t</w>"), ("c", "at</w>"), ("o", "g</w>"), ("d", "og</w>")]
T5_WORDS = ["a", "cat", "dog", "photo", "of", "the", "red", "blue", "on", "in"]
# FLUX's T5 and Wan's UMT5 text encoders share this shape
T5_SHAPE = {"d_model": T5_D_MODEL, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
            "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 8, "decoder_start_token_id": 0}
# FLUX.2 Klein's prompt embedding stacks its Qwen3 encoder's hidden states after layers 9, 18 and 27 (the engine's
# flux2_klein_postprocess_text): the tiny encoder keeps 28 layers, each 16 wide, and the transformer reads 3 x 16.
QWEN3_HIDDEN, QWEN3_LAYERS = 16, 28
QWEN3_MERGES = [("c", "a"), ("ca", "t"), ("Ġ", "a")]
QWEN3_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen3's chat template, cut to what a one-message prompt with thinking off renders
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
# The keys of the published Wan2.1 checkpoints' scheduler_config.json (diffusers 0.33): a newer diffusers adds more
# (shift_terminal, sigma_min, ...), which sglang 0.5.10.post1's own UniPC scheduler refuses.
PUBLISHED_WAN_SCHEDULER_KEYS = (
    "_class_name", "_diffusers_version", "beta_end", "beta_schedule", "beta_start", "disable_corrector",
    "dynamic_thresholding_ratio", "final_sigmas_type", "flow_shift", "lower_order_final", "num_train_timesteps",
    "predict_x0", "prediction_type", "rescale_betas_zero_snr", "sample_max_value", "solver_order", "solver_p",
    "solver_type", "steps_offset", "thresholding", "timestep_spacing", "trained_betas", "use_beta_sigmas",
    "use_exponential_sigmas", "use_flow_sigmas", "use_karras_sigmas")
# target -> (its build, its staging folder, the folders made for it, deepest first)
_early_builds: dict[Path, tuple[subprocess.Popen, Path, list[Path]]] = {}


def transformers_tag() -> str:
    """The transformers release the tiny model is saved with: a model saved by one release's tokenizers may not load
    under an older one (0.5.23's transformers 5.19 vs 0.5.10.post1's 5.3), so each keeps its own copy."""
    return f"transformers-{work_dirs.dist_version('transformers') or 'none'}"


def default_cache_dir() -> Path:
    """$DIFFUSION_BENCH_TINY_MODEL_DIR, else <work root>/.cache/tiny-models/transformers-<version>."""
    if bench_env.get(CACHE_ENV):
        return Path(bench_env.get(CACHE_ENV)).expanduser()
    return work_dirs.work_root()[0] / ".cache" / "tiny-models" / transformers_tag()


def ensure_local_model(local_model: str = "tiny-flux", cache_dir: Path | None = None, name: str | None = None) -> Path:
    """The tiny model's directory ``<cache_dir>/<name>``, built if missing (or the build ``build_beside_probe``
    started, finished); for tiny-flux, name=UNRESOLVED_NAME builds it where the engine does not resolve it natively."""
    dir_name, builder = LOCAL_MODELS[local_model]
    target = Path(cache_dir or default_cache_dir()) / (name or dir_name)
    early = _early_builds.pop(target, None)
    if (target / "model_index.json").is_file():
        if early is not None:
            _cancel(*early)
        return target
    with progress.phase(f"tiny model: building {target.name}", "random weights, once per cache folder: "
                        f"{target.parent}" + ("; started beside the engine probe" if early else "")) as ticker:
        proc, staging, _ = early or _start_build(target, builder)
        try:
            _finish_build(proc, ticker)
            try:
                os.rename(staging, target)
            except OSError:  # another process finished first: keep its copy
                if not (target / "model_index.json").is_file():
                    raise
        finally:
            _cancel(proc, staging, [])
    return target


def build_beside_probe(preset: Preset, model_path: str | None) -> None:
    """Start building the tiny model a real run of ``preset`` will need while the engine probe imports sglang (on a
    fresh machine each takes one core for seconds). It stays in its staging folder until the run asks for it
    (``ensure_local_model``) and is removed if the run ends first: a refused run leaves nothing behind."""
    if model_path or preset.local_model not in LOCAL_MODELS:
        return
    dir_name, builder = LOCAL_MODELS[preset.local_model]
    target = default_cache_dir() / dir_name
    if target in _early_builds or (target / "model_index.json").is_file():
        return
    if not _early_builds:
        atexit.register(cancel_early_builds)
    _early_builds[target] = _start_build(target, builder)


def cancel_early_builds() -> None:
    """Stop and remove every build nobody asked for (the run is over)."""
    while _early_builds:
        _cancel(*_early_builds.popitem()[1])


def _start_build(target: Path, builder: str) -> tuple[subprocess.Popen, Path, list[Path]]:
    """A child Python building into a temporary sibling of ``target``: importing diffusers needs the CPU adapter's b0
    here (CUDA torchvision beside CPU torch), and its torch/diffusers imports (~500 MB) stay out of the caller."""
    made = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model is meant to be shared like any cache entry
    code = f"import sys, pathlib; from sgl_diffusion_bench.engine.tiny_model import {builder}; " \
           f"{builder}(pathlib.Path(sys.argv[1]))"
    child_env = engine_process.cpu_adapter_env(dict(os.environ))
    child_env["PYTHONPATH"] += os.pathsep + str(paths.PACKAGE_DIR.parent)
    proc = subprocess.Popen([sys.executable, "-c", code, str(staging)], env=child_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    return proc, staging, made


def _finish_build(proc: subprocess.Popen, ticker: progress.Ticker) -> None:
    while True:
        try:
            _, err = proc.communicate(timeout=ticker.poll_s)
            break
        except subprocess.TimeoutExpired:
            ticker.tick()
    if proc.returncode != 0:
        raise RuntimeError(f"building the tiny model failed (rc {proc.returncode}): {err[-2000:]}")


def _cancel(proc: subprocess.Popen, staging: Path, made: list[Path]) -> None:
    """Stop a build and remove its staging folder and, when they are left empty, the folders made for it."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    shutil.rmtree(staging, ignore_errors=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            break  # not empty: something else lives there now


def _byte_chars() -> list[str]:
    """GPT-2/CLIP byte-to-unicode table: printable stand-ins for all 256 bytes, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def _clip_tokenizer():
    from transformers import CLIPTokenizer
    chars = _byte_chars()
    tokens = chars + [c + "</w>" for c in chars] + ["".join(pair) for pair in CLIP_MERGES] + \
        ["<|startoftext|>", "<|endoftext|>"]
    return CLIPTokenizer(vocab={token: i for i, token in enumerate(tokens)}, merges=list(CLIP_MERGES),
                         model_max_length=77)


def _t5_tokenizer():
    from transformers import T5Tokenizer
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [("▁" + word, -3.0 - i * 0.1) for i, word in enumerate(T5_WORDS)]
    pieces += [(chr(c), -8.0) for c in range(ord("a"), ord("z") + 1)]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


def _flux_scheduler():
    """The flow-matching scheduler FLUX.1 and FLUX.2 ship (dynamic shift by image size)."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    return FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15, shift=3.0,
        use_dynamic_shifting=True)


def build_tiny_flux(out_dir: Path) -> None:
    """Write the pipeline into ``out_dir`` (existing, empty); every component seeded so rebuilds are identical."""
    import torch
    from diffusers import AutoencoderKL, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    tokenizer, tokenizer_2 = _clip_tokenizer(), _t5_tokenizer()
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=CLIP_HIDDEN, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=77, projection_dim=CLIP_HIDDEN,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    torch.manual_seed(1)
    text_encoder_2 = T5EncoderModel(T5Config(vocab_size=len(tokenizer_2), **T5_SHAPE))
    torch.manual_seed(2)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=1, num_single_layers=1,
        attention_head_dim=sum(ROPE_AXES), num_attention_heads=2, joint_attention_dim=T5_D_MODEL,
        pooled_projection_dim=CLIP_HIDDEN, guidance_embeds=True, axes_dims_rope=ROPE_AXES)
    torch.manual_seed(3)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
        latent_channels=LATENT_CHANNELS, norm_num_groups=4, sample_size=32, scaling_factor=0.3611,
        shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False)
    scheduler = _flux_scheduler()
    pipeline = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                            text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2, transformer=transformer)
    pipeline.save_pretrained(out_dir)


def _qwen3_tokenizer():
    from transformers import Qwen2Tokenizer
    tokens = _byte_chars() + ["".join(pair) for pair in QWEN3_MERGES]
    tokenizer = Qwen2Tokenizer(vocab={token: i for i, token in enumerate(tokens)}, merges=list(QWEN3_MERGES),
                               unk_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=512)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN3_SPECIAL})
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    return tokenizer


def build_tiny_flux2_klein(out_dir: Path) -> None:
    """A FLUX.2 Klein pipeline (distilled, no guidance embedding): a Qwen3 text encoder, the FLUX.2 transformer and
    the FLUX.2 VAE (its batch-norm latent statistics). Given an input image, the engine encodes it with the VAE and
    the transformer attends to its latents beside the noise: an image edit."""
    import torch
    from diffusers import AutoencoderKLFlux2, Flux2KleinPipeline, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _qwen3_tokenizer()
    torch.manual_seed(0)
    text_encoder = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=QWEN3_HIDDEN, intermediate_size=32, num_hidden_layers=QWEN3_LAYERS,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=1024,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id))
    torch.manual_seed(1)
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=3 * QWEN3_HIDDEN, timestep_guidance_channels=16,
        axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False)
    torch.manual_seed(2)
    vae = AutoencoderKLFlux2(block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=LATENT_CHANNELS,
                             norm_num_groups=4, sample_size=32, use_quant_conv=False, use_post_quant_conv=False)
    scheduler = _flux_scheduler()
    Flux2KleinPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                       transformer=transformer, is_distilled=True).save_pretrained(out_dir)


def local_model_path(name: str, build: bool) -> Path:
    """Where a local preset model lives; built only when ``build`` (a dry run only names the path)."""
    if name not in LOCAL_MODELS:
        raise contract.InputError("input.unknown_local_model", f"no builder for local model {name!r}",
                                  f"use local_model: {' or '.join(LOCAL_MODELS)}")
    if build:
        return ensure_local_model(name)
    return default_cache_dir() / LOCAL_MODELS[name][0]


def _tiny_wan(in_channels: int, **transformer_extra: int) -> dict:
    """The Wan2.1 parts at about the smallest shapes the engine accepts: UMT5 encoder, one transformer block with 2x2
    patches, a VAE with the real model's 8x spatial and 4x temporal compression."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = _t5_tokenizer()
    torch.manual_seed(0)
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), **T5_SHAPE))
    torch.manual_seed(1)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=in_channels,
        out_channels=LATENT_CHANNELS, text_dim=T5_D_MODEL, freq_dim=16, ffn_dim=32, num_layers=1, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=32, **transformer_extra)
    torch.manual_seed(2)
    vae = AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True], latents_mean=[0.0] * LATENT_CHANNELS,
                           latents_std=[1.0] * LATENT_CHANNELS)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "transformer": transformer, "vae": vae,
            "scheduler": scheduler}


def _published_wan_scheduler(out_dir: Path) -> None:
    """The scheduler's config with the keys the published checkpoints carry, no more."""
    import json

    path = out_dir / "scheduler" / "scheduler_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({k: config[k] for k in PUBLISHED_WAN_SCHEDULER_KEYS if k in config}, indent=2,
                               sort_keys=True) + "\n")


def build_tiny_wan_t2v(out_dir: Path) -> None:
    """A Wan2.1 text-to-video pipeline."""
    from diffusers import WanPipeline

    WanPipeline(**_tiny_wan(LATENT_CHANNELS)).save_pretrained(out_dir)
    _published_wan_scheduler(out_dir)


def build_tiny_wan_i2v(out_dir: Path) -> None:
    """A Wan2.1 image-to-video pipeline: the text-to-video parts, a CLIP vision encoder whose features enter every
    block's added cross-attention, and the first frame's latents and mask beside the noise (2 x latent + 4 channels)."""
    import torch
    from diffusers import WanImageToVideoPipeline
    from safetensors.torch import load_file, save_file
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    parts = _tiny_wan(2 * LATENT_CHANNELS + 4, image_dim=CLIP_HIDDEN, added_kv_proj_dim=24)
    torch.manual_seed(3)
    image_encoder = CLIPVisionModel(CLIPVisionConfig(
        hidden_size=CLIP_HIDDEN, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
        patch_size=8, projection_dim=CLIP_HIDDEN))
    image_processor = CLIPImageProcessor(crop_size=32, size={"shortest_edge": 32})
    WanImageToVideoPipeline(**parts, image_encoder=image_encoder, image_processor=image_processor).save_pretrained(
        out_dir)
    _published_wan_scheduler(out_dir)
    # transformers 5.19 writes the vision tower's weights without the "vision_model." prefix that the published Wan
    # checkpoints (and the engine's CLIP loader) use (5.3 keeps it): written back the way the real model ships them
    weights = out_dir / "image_encoder" / "model.safetensors"
    save_file({k if k.startswith("vision_model.") else f"vision_model.{k}": v for k, v in load_file(weights).items()},
              weights, metadata={"format": "pt"})


def local_model_dir(path_text: str, preset: Preset, *, must_exist: bool) -> tuple[str, list[dict[str, str]]]:
    """The --model-path directory (resolved), checked to hold a diffusers pipeline when it will be run, and the
    warnings a reader of the results needs (a directory name the engine will not recognise)."""
    path = Path(path_text).expanduser().resolve()
    if must_exist and not (path / "model_index.json").is_file():
        raise contract.PreconditionError("input.model_path_not_a_pipeline", f"{path} holds no model_index.json",
                                         "pass a diffusers pipeline directory (the one holding model_index.json)")
    warnings = [] if (path / "model_index.json").is_file() else [
        {"code": "model.path_missing", "message": f"{path} holds no model_index.json here; a real run refuses to "
         "start without it"}]
    expected = (preset.model or "").rsplit("/", 1)[-1]
    if expected and path.name != expected:
        warnings.insert(0, {"code": "model.path_name", "message": f"--model-path {path} is not named {expected!r}: "
                         "sglang resolves the pipeline config (and 0.5.23 its BCG allow-list) from the directory "
                         f"name, so it may not run the {preset.name!r} architecture"})
    return str(path), warnings


def model_location(preset: Preset, model_path: str | None, *, build: bool) -> tuple[str | None, list[dict[str, str]]]:
    """Where the preset's model is read from (None: the hub id) and what a reader should know about it: the
    --model-path directory, else a local preset model (built here only when ``build``; a plan only names it)."""
    if model_path:
        return local_model_dir(model_path, preset, must_exist=build)
    if not preset.local_model:
        return None, []
    path = local_model_path(preset.local_model, build)
    missing = not build and not (path / "model_index.json").is_file()
    return str(path), [{"code": "model.not_built", "message": f"{path} does not exist yet; a real run builds it "
                        "first (tiny_model.ensure_local_model)"}] if missing else []
