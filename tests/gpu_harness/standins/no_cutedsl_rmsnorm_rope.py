"""Stand-in for sglang 0.5.23's ``sglang.kernels.ops.diffusion.rope.rmsnorm_interleaved_rope_cutedsl`` (test tooling,
not product code), served by the GPU harness only when ``cutlass`` (nvidia-cutlass-dsl) is not importable.

The real module imports cutlass, cutlass.cute, cuda.bindings and flashinfer at load; neither package fits the carry
to the lent machine. Importing it fails, and then the engine loads diffusers' Wan transformer instead of its own.
Here every tensor is declined (``can_use_fused_rmsnorm_interleaved_rope`` is always False). The engine's own Wan
blocks then run their unfused q/k RMSNorm and RoPE, as they do wherever the fused CuTe kernel does not apply.
"""

from __future__ import annotations

_WHY = "the GPU harness's stand-in for the CuTe-DSL RMSNorm+RoPE kernel declines every tensor"


def can_use_fused_rmsnorm_interleaved_rope(x, weight, cos_sin_cache, head_dim) -> bool:
    return False


def rmsnorm_interleaved_rope_block_cols(H: int) -> int:
    raise RuntimeError(_WHY)


def fused_rmsnorm_interleaved_rope_(*args, **kwargs) -> None:
    raise RuntimeError(_WHY)


def fused_rmsnorm_interleaved_rope_into_blocks(*args, **kwargs) -> None:
    raise RuntimeError(_WHY)
