"""``sgl_kernel.kvcacheio``: the KV-cache transfer ops sglang 0.5.23's srt/mem_cache host pools import at load on CUDA
(placeholders; diffusion never calls them). Without this module the import fails inside a guarded block and sglang
silently loads the CLIP text encoder as the plain Hugging Face class instead of its own."""

from ._placeholders import placeholder

_NAMES = ("transfer_embedding_ranges_direct", "transfer_kv_all_layer", "transfer_kv_all_layer_direct_lf_pf",
          "transfer_kv_all_layer_lf_pf", "transfer_kv_all_layer_lf_ph", "transfer_kv_all_layer_mla",
          "transfer_kv_all_layer_mla_lf_pf", "transfer_kv_direct", "transfer_kv_per_layer",
          "transfer_kv_per_layer_direct_pf_lf", "transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf",
          "transfer_kv_per_layer_pf_lf", "transfer_kv_per_layer_ph_lf")
globals().update({name: placeholder(f"kvcacheio.{name}") for name in _NAMES})
__all__ = list(_NAMES)
