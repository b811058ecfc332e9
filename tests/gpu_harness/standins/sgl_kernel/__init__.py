"""Stand-in for ``sgl_kernel`` (GPU test harness only): the sglang-kernel wheel is 352 MB and built for another torch.

sglang 0.5.10.post1 imports these names at load on CUDA. A bf16 FLUX run executes only ``rmsnorm`` (T5 encoder);
the others exist so the imports succeed. The three norm/activation functions (plus ``gelu_and_mul``, imported beside
``silu_and_mul`` by srt/layers/quantization/gguf.py) are torch implementations with sgl_kernel's signatures and
in-place semantics; the quantization names are placeholders that raise if ever called.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from . import quantization, scalar_type  # noqa: F401  (sgl_kernel.quantization / .scalar_type are imported by path)
from ._placeholders import placeholder

__version__ = "0.0.0+gpu-harness-standin"


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: Optional[torch.Tensor] = None,
            enable_pdl: Optional[bool] = None) -> torch.Tensor:
    """out = input / sqrt(mean(input^2) + eps) * weight, computed in float32, stored in input's dtype."""
    x = input.float()
    result = (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(input.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out


def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                      enable_pdl: Optional[bool] = None) -> None:
    """In place, like sgl_kernel: residual += input; input = rmsnorm(residual) * weight."""
    summed = input.float() + residual.float()
    residual.copy_(summed.to(residual.dtype))
    input.copy_((summed * torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(input.dtype))


def _gated(input: torch.Tensor, out: Optional[torch.Tensor], act) -> torch.Tensor:
    d = input.shape[-1] // 2
    result = act(input[..., :d]) * input[..., d:]
    if out is None:
        return result
    out.copy_(result)
    return out


def silu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None,
                 enable_pdl: Optional[bool] = None) -> torch.Tensor:
    """silu(input[..., :d]) * input[..., d:], written into ``out`` when given."""
    return _gated(input, out, F.silu)


def gelu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None,
                 enable_pdl: Optional[bool] = None) -> torch.Tensor:
    """gelu(input[..., :d]) * input[..., d:] (erf form), written into ``out`` when given."""
    return _gated(input, out, F.gelu)


fp8_blockwise_scaled_mm = placeholder("fp8_blockwise_scaled_mm")
fp8_scaled_mm = placeholder("fp8_scaled_mm")
gptq_gemm = placeholder("gptq_gemm")
gptq_shuffle = placeholder("gptq_shuffle")
int8_scaled_mm = placeholder("int8_scaled_mm")
moe_align_block_size = placeholder("moe_align_block_size")
moe_sum = placeholder("moe_sum")
qserve_w4a8_per_chn_gemm = placeholder("qserve_w4a8_per_chn_gemm")
qserve_w4a8_per_group_gemm = placeholder("qserve_w4a8_per_group_gemm")
sgl_per_token_group_quant_8bit = placeholder("sgl_per_token_group_quant_8bit")
sgl_per_token_quant_fp8 = placeholder("sgl_per_token_quant_fp8")
