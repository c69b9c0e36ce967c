"""Bandwidth-bound elementwise kernels, and Transformer Engine's FP8 casts."""
from functools import lru_cache

from ..specs import HardwareSpec
from .common import KernelTime, launch_s, mixed_bandwidth_bps


@lru_cache(maxsize=65536)
def pointwise(hw: HardwareSpec, bytes_moved: float, flops: float = 0.0) -> KernelTime:
    """An elementwise or reduction kernel: bytes read plus written over HBM bandwidth."""
    memory_s = bytes_moved / mixed_bandwidth_bps(hw)
    compute_s = flops / (hw.gpu.flops("fp32") * hw.calibration.sustained_clock)
    return KernelTime(max(memory_s, compute_s) + launch_s(hw), flops, bytes_moved)


def fp8_cast(hw: HardwareSpec, elements: float, transpose: bool = False) -> KernelTime:
    """Transformer Engine's quantization of a BF16 tensor to FP8 before a GEMM: read it,
    write the FP8 copy (and its transpose, for the backward GEMMs), with the amax
    reduction fused in. Zero time when the GEMMs do not run in FP8."""
    if hw.dtype != "fp8":
        return KernelTime(0.0, 0.0, 0.0)
    return pointwise(hw, elements * (hw.act_bytes + (2 if transpose else 1)))
