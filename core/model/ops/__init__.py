"""Per-kernel time on one GPU, one module per kernel class: tiled GEMMs (gemm), fused
attention (attention), bandwidth-bound elementwise kernels and FP8 casts (pointwise). Results
are memoized by shape."""
from .attention import FLASH_TILE_KV, causal_fraction, decode_attention, flash_attention
from .common import (KernelTime, at_kernel_rates, kernels_alone, launch_s, mixed_bandwidth_bps, stream_bandwidth_bps,
                     tensor_rate_flops)
from .gemm import gemm
from .pointwise import fp8_cast, pointwise, row_cast

__all__ = ["FLASH_TILE_KV", "KernelTime", "at_kernel_rates", "causal_fraction", "decode_attention", "flash_attention",
           "fp8_cast", "gemm", "kernels_alone", "launch_s", "mixed_bandwidth_bps", "pointwise", "row_cast", "stream_bandwidth_bps",
           "tensor_rate_flops"]
