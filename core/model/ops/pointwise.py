"""Bandwidth-bound elementwise kernels, and Transformer Engine's quantization of GEMM inputs."""
from functools import lru_cache

from ..specs import LOW_PRECISION_DTYPES, HardwareSpec, quantized_bytes
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
# vLLM's NVFP4 quantization (one pass, each 16-element block's scale computed in it) runs its
# rows through the SMs too, some ten times cheaper a row: its Blackwell GEMM tables at n <= 64
# and m >= 4,096, after the GEMM and the launch, leave 96-106 ns of one SM per row at k of 64
# to 256 (B200, GB200, B300, GB300 alike; one value) and, beyond, 0.041-0.047 ns per element,
# about what the bytes take at the HBM rate, so the two add (scripts/fit_gemm.py prints both).
NVFP4_ROW_SM_S = 0.10e-6
NVFP4_ELEMENT_SM_S = 0.045e-9
# (one SM's time per row, per element) of a row-wise cast to each dtype, and the recipe whose
# bytes it writes
ROW_CAST = {"fp8": (ROW_BLOCK_SM_S, ROW_ELEMENT_SM_S, ""),
            "nvfp4": (NVFP4_ROW_SM_S, NVFP4_ELEMENT_SM_S, "block-scaled")}


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
    bytes over HBM and the rows through the SMs, each their time per row and per element
    (ROW_CAST)."""
    per_row_s, per_element_s, recipe = ROW_CAST[dtype]
    bytes_moved = rows * columns * (hw.act_bytes + quantized_bytes(dtype, recipe))
    blocks_s = rows * (per_row_s + columns * per_element_s) / hw.gpu.sm_count
    return KernelTime(max(bytes_moved / mixed_bandwidth_bps(hw), blocks_s) + launch_s(hw), 0.0, bytes_moved)
