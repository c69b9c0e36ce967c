"""Bandwidth-bound elementwise kernels, and Transformer Engine's quantization of GEMM inputs."""
from functools import lru_cache

from ..specs import LOW_PRECISION_DTYPES, HardwareSpec, quantized_bytes
from .common import KernelTime, launch_s, mixed_bandwidth_bps


@lru_cache(maxsize=65536)
def pointwise(hw: HardwareSpec, bytes_moved: float, flops: float = 0.0) -> KernelTime:
    """An elementwise or reduction kernel: bytes read plus written over HBM bandwidth."""
    memory_s = bytes_moved / mixed_bandwidth_bps(hw)
    compute_s = flops / (hw.gpu.flops("fp32") * hw.calibration.sustained_clock)
    return KernelTime(max(memory_s, compute_s) + launch_s(hw), flops, bytes_moved)


@lru_cache(maxsize=65536)
def fp8_cast(hw: HardwareSpec, elements: float, transpose: bool = False) -> KernelTime:
    """Transformer Engine's quantization of a BF16 tensor before a low-precision GEMM, as its
    recipe (hw.recipe) runs it; `transpose`: also the columnwise copy the backward's GEMMs read
    (a transpose under per-tensor FP8, a second block-scaled copy otherwise). Zero time when the
    GEMMs do not run in a low-precision format.
    - delayed: one kernel reads the tensor and writes the copies, its amax recorded in passing;
    - current: an amax reduction pass over the tensor first, a one-block kernel turning the
      amax into the scale (Transformer Engine's compute_scale_from_amax), then that kernel;
    - block-scaled FP8 / MXFP8: one kernel, each block's scale computed in it and written
      beside the elements (quantized_bytes);
    - NVFP4 (TE's NVFP4 recipe): the per-tensor FP32 scale needs the tensor's amax first (a
      pass), then the rowwise cast; the columnwise copy feeds only the weight-gradient GEMM,
      which takes a random Hadamard transform of 16-element blocks: a second amax pass over the
      transformed tensor and a cast kernel of its own, each reading the tensor again."""
    if hw.dtype not in LOW_PRECISION_DTYPES:
        return KernelTime(0.0, 0.0, 0.0)
    read = elements * hw.act_bytes
    copy = elements * quantized_bytes(hw.dtype, hw.recipe)
    if hw.dtype == "nvfp4":
        kernels = [pointwise(hw, read), pointwise(hw, read + copy)]
        if transpose:
            kernels += [pointwise(hw, read), pointwise(hw, read + copy)]
    else:
        kernels = [pointwise(hw, read + copy * (2 if transpose else 1))]
        if hw.recipe == "current":
            kernels += [pointwise(hw, read), pointwise(hw, 0.0)]
    return KernelTime(sum(k.time_s for k in kernels), 0.0, sum(k.hbm_bytes for k in kernels))
