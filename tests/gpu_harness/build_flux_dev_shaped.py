"""Write a random-weight diffusers pipeline with FLUX.1-dev's shapes, on the GPU, for benchmarks on a machine that
cannot reach the hub (test tooling, not product code).

    python3 build_flux_dev_shaped.py OUT_DIR TOKENIZERS_FROM

OUT_DIR's last component must be ``FLUX.1-dev``: sglang picks the pipeline config (and 0.5.23 its breakable-CUDA-graph
allow-list) by that name. TOKENIZERS_FROM is a FLUX pipeline directory (the bundle's tiny model) whose tokenizers and
scheduler are copied. The DiT and the VAE use FLUX.1-dev's published configs (11.9 B-parameter DiT: 19 double and
38 single blocks of 24 x 128 heads); CLIP-L and T5-XXL keep their widths with 2 layers each, which leaves the
denoise loop - what the benchmark measures - at full size. Seeded, so a given torch build writes the same weights.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import torch
from diffusers import AutoencoderKL, FluxTransformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

DIT = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
           num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
           axes_dims_rope=(16, 56, 56))
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
           up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
           act_fn="silu", latent_channels=16, norm_num_groups=32, sample_size=1024, scaling_factor=0.3611,
           shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False, force_upcast=True,
           mid_block_add_attention=True)
CLIP = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12,
            max_position_embeddings=77, projection_dim=768, hidden_act="quick_gelu", bos_token_id=0, eos_token_id=2,
            pad_token_id=1)
T5 = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=2, num_heads=64,
          feed_forward_proj="gated-gelu", relative_attention_num_buckets=32, relative_attention_max_distance=128,
          is_encoder_decoder=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def save(build, seed: int, out: Path, shard: str | None = None) -> int:
    """Build one component on the GPU with ``seed``, store it as bf16 safetensors, free it; returns its parameters."""
    torch.manual_seed(seed)
    with torch.device("cuda"):
        module = build()
    module = module.to(torch.bfloat16).eval()
    count = sum(p.numel() for p in module.parameters())
    kwargs = {"max_shard_size": shard} if shard else {}
    module.save_pretrained(out, safe_serialization=True, **kwargs)
    del module
    torch.cuda.empty_cache()
    return count


def main(out_dir: str, tokenizers_from: str) -> dict:
    out, source = Path(out_dir), Path(tokenizers_from)
    if out.name != "FLUX.1-dev":
        raise SystemExit(f"{out} must be named FLUX.1-dev (sglang resolves the pipeline by the directory name)")
    out.mkdir(parents=True, exist_ok=False)
    started = time.time()
    params = {
        "transformer": save(lambda: FluxTransformer2DModel(**DIT), 0, out / "transformer", "10GB"),
        "vae": save(lambda: AutoencoderKL(**VAE), 1, out / "vae"),
        "text_encoder": save(lambda: CLIPTextModel(CLIPTextConfig(**CLIP)), 2, out / "text_encoder"),
        "text_encoder_2": save(lambda: T5EncoderModel(T5Config(**T5)), 3, out / "text_encoder_2"),
    }
    for part in ("tokenizer", "tokenizer_2", "scheduler"):
        shutil.copytree(source / part, out / part)
    shutil.copy2(source / "model_index.json", out / "model_index.json")
    return {"path": str(out), "seconds": round(time.time() - started, 1), "parameters": params}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
