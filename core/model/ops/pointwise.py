"""Bandwidth-bound elementwise kernels, and Transformer Engine's quantization of GEMM inputs."""
from functools import lru_cache

from ..specs import DTYPE_BYTES, LOW_PRECISION_DTYPES, HardwareSpec, quantized_bytes
from .common import KernelTime, launch_s, mixed_bandwidth_bps

# One SM's time per row of a kernel that gives every row its own thread block, as vLLM's static
# FP8 quantization does: its FP8 GEMM tables (../shared/validation/kernels) at n and k <= 512,
# where the GEMM itself is negligible, grow by 7.2 ns per row on 132-SM Hopper and 5.9-6.2 ns
# on 148-160-SM Blackwell, 0.89-0.99 us of one SM per row on every GPU (one value, not fitted
# per GPU).
ROW_BLOCK_SM_S = 0.94e-6
# And one SM's time per element such a kernel converts: at large rows x columns the same tables
# run at about 3 elements a cycle an SM, 1.6 TB/s on H100 and B200 alike (their rows of few
# outputs and many inputs, where the GEMM is short; scripts/fit_gemm.py prints the median).
ROW_ELEMENT_SM_S = 0.17e-9


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


@lru_cache(maxsize=65536)
def row_cast(hw: HardwareSpec, rows: int, columns: int) -> KernelTime:
    """A cast of a BF16 [rows, columns] tensor to FP8 with a scale already known, by a kernel of
    one thread block per row (vLLM's static per-tensor quantization): the slower of the bytes
    over HBM and the rows' thread blocks through the SMs, each ROW_BLOCK_SM_S and
    ROW_ELEMENT_SM_S per element."""
    bytes_moved = rows * columns * (hw.act_bytes + DTYPE_BYTES["fp8"])
    blocks_s = rows * (ROW_BLOCK_SM_S + columns * ROW_ELEMENT_SM_S) / hw.gpu.sm_count
    return KernelTime(max(bytes_moved / mixed_bandwidth_bps(hw), blocks_s) + launch_s(hw), 0.0, bytes_moved)
