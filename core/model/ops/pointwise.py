"""Bandwidth-bound elementwise kernels, and Transformer Engine's quantization of GEMM inputs."""
from functools import lru_cache
from math import ceil

from ..specs import LOW_PRECISION_DTYPES, HardwareSpec, quantized_bytes
from .common import KernelTime, launch_s, mixed_bandwidth_bps

# vLLM's static FP8 quantization gives every row (token) its own thread block, which converts
# the row 2,048 elements a pass (as 256 threads taking one 16-byte vector of 8 BF16 elements
# each would). Its FP8 GEMM tables (../shared/validation/kernels) at n <= 128 and m >= 1,024,
# the GEMM and the launch taken out, climb in steps at k = 2,560, 5,120, 7,168, ... (one per
# 2,048) and stay flat between: 0.46-0.50 us of one SM per pass and row, on 0.18-0.39 us per
# row, over the rows the busiest SM is dealt, on every GPU from H100 to GB300
# (scripts/fit_gemm.py prints both per GPU; one value each). A cost per element instead (0.94 us
# a row and 0.17 ns an element, read at k <= 512 and at m x k >= 16 M) had put rows of 1,024-2,048
# elements 0.35-0.48 us of one SM too slow.
ROW_BLOCK_SM_S = 0.32e-6
ROW_PASS_SM_S = 0.50e-6
ROW_PASS_ELEMENTS = 2048
# vLLM's NVFP4 quantization (one pass, each 16-element block's scale computed in it) runs its
# rows through the SMs too, some ten times cheaper a row: its Blackwell GEMM tables at n <= 64
# and m >= 4,096, after the GEMM (its late start included) and the launch, leave 74-87 ns of one
# SM per row at k of 64 to 256 (B200, GB200, B300, GB300 alike; one value) and, beyond,
# 0.041-0.048 ns per element, about what the bytes take at the HBM rate, so the two add
# (scripts/fit_gemm.py prints both).
NVFP4_ROW_SM_S = 0.08e-6
NVFP4_ELEMENT_SM_S = 0.045e-9
# (one SM's time per row, per pass, elements a pass) of a row-wise cast to each dtype, and the
# recipe whose bytes it writes: NVFP4's quantization costs its elements one by one
ROW_CAST = {"fp8": (ROW_BLOCK_SM_S, ROW_PASS_SM_S, ROW_PASS_ELEMENTS, ""),
            "nvfp4": (NVFP4_ROW_SM_S, NVFP4_ELEMENT_SM_S, 1, "block-scaled")}


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
def row_cast(hw: HardwareSpec, rows: int, columns: int, dtype: str = "fp8") -> KernelTime:
    """A cast of a BF16 [rows, columns] tensor to `dtype` with its tensor scale already known, by a
    kernel that takes the tensor a row at a time (vLLM's static per-tensor FP8 quantization, a
    thread block per row; its NVFP4 one, block scales computed in passing): the slower of the
    bytes over HBM and the rows through the SMs, each their time per row and per pass over
    the row's elements (ROW_CAST), the SM dealt the most rows setting it: a few rows take one
    row's whole time, however many SMs idle."""
    per_row_s, per_pass_s, pass_elements, recipe = ROW_CAST[dtype]
    bytes_moved = rows * columns * (hw.act_bytes + quantized_bytes(dtype, recipe))
    blocks_s = ceil(rows / hw.gpu.sm_count) * (per_row_s + ceil(columns / pass_elements) * per_pass_s)
    return KernelTime(max(bytes_moved / mixed_bandwidth_bps(hw), blocks_s) + launch_s(hw), 0.0, bytes_moved)
