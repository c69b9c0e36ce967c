"""Per-kernel time on one GPU: tiled GEMMs over the SRAM / L2 / HBM hierarchy, fused
attention, and bandwidth-bound pointwise kernels. Results are memoized by shape."""
from dataclasses import dataclass
from functools import lru_cache
from math import ceil, sqrt

from .specs import DTYPE_BYTES, HardwareSpec, activation_dtype

# (tile_m, tile_n, tile_k) candidates a GEMM library would pick from.
GEMM_TILES = ((256, 128, 32), (128, 256, 32), (128, 128, 32), (128, 64, 64), (64, 128, 64),
              (64, 64, 64), (64, 32, 64), (32, 64, 64))
SPLIT_K = (1, 2, 4, 8, 16)
PIPELINE_STAGES = 3  # shared-memory buffers per operand (cp.async multi-stage pipeline)
L2_USABLE_FRACTION = 0.5  # of L2 a GEMM's operands can keep resident while streaming
SOFTMAX_FP32_OPS = 5  # scale, max, subtract, sum, rescale per attention score (the exp is apart)
# The exponential runs on the special-function units, 16 results per SM per clock on every
# architecture since Volta (CUDA C programming guide, arithmetic instruction throughput). On
# H100 that is 3.9 T exp/s against 989 TFLOP/s of BF16 matmul (the FlashAttention-3 paper's
# point): a FlashAttention-2-style kernel, which does not overlap the softmax with the
# matmuls, spends a quarter (A100) to a half (H100) of its matmul time on exponentials.
SFU_OPS_PER_SM_PER_CLOCK = 16
FLASH_TILE_Q = 128
FLASH_TILE_KV = 64
# FlashAttention 1.x took twice FlashAttention-2's time for the same attention: the
# flash-attention README's changelog entry "2.0: Complete rewrite, 2x faster" (fewer non-matmul
# FLOPs, work split over the sequence as well as batch x heads, and between warps).
FLASH1_SLOWDOWN = 2.0
# FlashAttention 1.x's CUDA kernels exist for head dimensions 32, 64 and 128; any other runs on
# the next one up, padded (csrc/flash_attn/fmha_api.cpp, run_fmha_fwd / run_fmha_bwd), as its
# Triton kernels pad to the next power of two (flash_attn_triton.py, BLOCK_HEADDIM).
FLASH1_HEAD_DIMS = (32, 64, 128)


@dataclass(frozen=True)
class KernelTime:
    time_s: float
    flops: float
    hbm_bytes: float


def _launch_s(hw: HardwareSpec) -> float:
    return hw.gpu.launch_overhead_s + hw.calibration.kernel_overhead_s


def stream_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth a long read stream reaches (a weight matrix, a KV-cache sweep)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.stream_efficiency


def mixed_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth of traffic that mixes reads with writes (elementwise kernels, outputs)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency


@lru_cache(maxsize=65536)
def gemm(hw: HardwareSpec, m: int, n: int, k: int, batch: int = 1, dtype: str = "",
         weights: bool = True) -> KernelTime:
    """C[m,n] = A[m,k] @ B[k,n], `batch` independent products, with operands in `dtype`
    (default: the hardware's compute dtype) at that dtype's peak. FP8 GEMMs write their
    output in BF16, as Transformer Engine's do. With `weights`, B is a weight matrix, swept
    from HBM as one long read stream (stream_efficiency); activations in and out move at the
    elementwise kernels' rate (memory_efficiency)."""
    gpu, cal = hw.gpu, hw.calibration
    dtype = dtype or hw.dtype
    in_bytes = DTYPE_BYTES[dtype]
    out_bytes = DTYPE_BYTES[activation_dtype(dtype)]
    peak = gpu.flops(dtype) * cal.compute_efficiency * (cal.fp8_efficiency if dtype == "fp8" else 1.0)
    per_sm_flops = peak / gpu.sm_count
    per_sm_sram = gpu.sram.bandwidth_bps / gpu.sm_count
    mixed_bw = mixed_bandwidth_bps(hw)
    b_bw = stream_bandwidth_bps(hw) if weights else mixed_bw
    unique_in = (m * k + k * n) * in_bytes * batch
    out_total = m * n * out_bytes * batch
    best = float("inf")
    best_hbm = unique_in + out_total
    for tm, tn, tk in GEMM_TILES:
        smem = (tm + tn) * tk * in_bytes * PIPELINE_STAGES
        accum = tm * tn * 4
        if smem > gpu.sram.capacity_bytes or accum > gpu.register_bytes_per_sm / 2:
            continue
        ctas_per_sm = max(1, min(int(gpu.sram.capacity_bytes // smem),
                                 int(gpu.register_bytes_per_sm / 2 // accum)))
        tiles_m, tiles_n = ceil(m / tm), ceil(n / tn)
        for split in SPLIT_K:
            k_part = ceil(k / split)
            if split > 1 and (k_part < 4 * tk or tiles_m * tiles_n * batch >= gpu.sm_count):
                break
            k_pad = ceil(k_part / tk) * tk
            tiles = tiles_m * tiles_n * batch * split
            per_sm_tiles = ceil(tiles / gpu.sm_count)
            compute_s = per_sm_tiles * 2.0 * tm * tn * k_pad / per_sm_flops
            sram_s = per_sm_tiles * (tm + tn) * k_pad * in_bytes / per_sm_sram
            l2_bytes = tiles * (tm + tn) * k_pad * in_bytes + out_total * split
            l2_s = l2_bytes / gpu.l2.bandwidth_bps
            a_reads = b_reads = 1
            if unique_in > gpu.l2.capacity_bytes * L2_USABLE_FRACTION:
                # Operands no longer stay resident: A is re-read once per group of tile
                # columns running together, B once per group of tile rows.
                slots = gpu.sm_count * ctas_per_sm
                rows = min(tiles_m, max(1, int(sqrt(slots))))
                cols = min(tiles_n, max(1, slots // rows))
                a_reads, b_reads = ceil(tiles_n / cols), ceil(tiles_m / rows)
            a_bytes = m * k * in_bytes * batch * a_reads
            b_bytes = k * n * in_bytes * batch * b_reads
            activation_bytes = a_bytes + out_total + (2 * m * n * 4 * batch * split if split > 1 else 0)
            hbm_s = activation_bytes / mixed_bw + b_bytes / b_bw
            time_s = max(compute_s, sram_s, l2_s, hbm_s)
            if time_s < best:
                best, best_hbm = time_s, activation_bytes + b_bytes
    return KernelTime(best + _launch_s(hw), 2.0 * m * n * k * batch, best_hbm)


def fp8_cast(hw: HardwareSpec, elements: float, transpose: bool = False) -> KernelTime:
    """Transformer Engine's quantization of a BF16 tensor to FP8 before a GEMM: read it,
    write the FP8 copy (and its transpose, for the backward GEMMs), with the amax
    reduction fused in. Zero time when the GEMMs do not run in FP8."""
    if hw.dtype != "fp8":
        return KernelTime(0.0, 0.0, 0.0)
    return pointwise(hw, elements * (hw.act_bytes + (2 if transpose else 1)))


@lru_cache(maxsize=65536)
def pointwise(hw: HardwareSpec, bytes_moved: float, flops: float = 0.0) -> KernelTime:
    """An elementwise or reduction kernel: bytes read plus written over HBM bandwidth."""
    memory_s = bytes_moved / mixed_bandwidth_bps(hw)
    compute_s = flops / hw.gpu.flops("fp32")
    return KernelTime(max(memory_s, compute_s) + _launch_s(hw), flops, bytes_moved)


def causal_fraction(kv_len: int) -> float:
    """Share of the score matrix a causal FlashAttention kernel computes: the lower triangle
    plus the diagonal tiles it runs in full."""
    return 0.5 * (1 + 1 / max(1, ceil(kv_len / FLASH_TILE_KV)))


@lru_cache(maxsize=65536)
def flash_attention(hw: HardwareSpec, batch_heads: int, q_len: int, kv_len: int, head_dim: int,
                    kv_groups: int, causal: bool, backward: bool = False, kernel: str = "flash") -> KernelTime:
    """One fused attention kernel (FlashAttention-2 style): scores stay in SRAM.

    `batch_heads` counts query heads; `kv_groups` is query heads per KV head (GQA).
    Backward does five tile matmuls to forward's two and recomputes the scores. `kernel`
    flash2 (FlashAttention-2) issues mma.sync, at the GPU's mma_sync_share of the rate; flash1
    (FlashAttention 1.x) does FlashAttention-2's work in FLASH1_SLOWDOWN times its time, its
    tile matmuls at the head dimension of the kernel it has (FLASH1_HEAD_DIMS)."""
    gpu, cal = hw.gpu, hw.calibration
    el = hw.act_bytes
    visible = causal_fraction(kv_len) if causal else 1.0
    scores = batch_heads * q_len * kv_len * visible
    matmuls = 5 if backward else 2
    flops = matmuls * 2.0 * scores * head_dim
    tile_dim = next((d for d in FLASH1_HEAD_DIMS if d >= head_dim), head_dim) if kernel == "flash1" else head_dim
    tiles = batch_heads * ceil(q_len / FLASH_TILE_Q)
    per_sm = ceil(tiles / gpu.sm_count) / (tiles / gpu.sm_count)  # tail-wave under-fill
    rate = gpu.flops(hw.act_dtype) * cal.compute_efficiency * cal.attention_efficiency
    if kernel in ("flash2", "flash1"):
        rate *= gpu.mma_sync_share
    tensor_s = flops * tile_dim / head_dim / rate * per_sm
    exp_rate = SFU_OPS_PER_SM_PER_CLOCK * gpu.sm_count * gpu.clock_hz
    softmax_s = (2 if backward else 1) * scores * SOFTMAX_FP32_OPS / gpu.flops("fp32") * per_sm
    softmax_s += scores / exp_rate * per_sm  # one exp per score, forward and recomputed in backward
    q_bytes = batch_heads * q_len * head_dim * el
    kv_bytes = 2 * (batch_heads // kv_groups) * kv_len * head_dim * el
    kv_passes = ceil(q_len / FLASH_TILE_Q) * visible
    l2_bytes = q_bytes * 2 + kv_bytes * max(1.0, kv_passes)
    hbm_bytes = (q_bytes * 2 + kv_bytes) * (2 if backward else 1)
    if kv_bytes > gpu.l2.capacity_bytes * L2_USABLE_FRACTION:
        hbm_bytes = max(hbm_bytes, l2_bytes)
    memory_s = max(hbm_bytes / mixed_bandwidth_bps(hw),
                   l2_bytes / gpu.l2.bandwidth_bps)
    busy_s = max(tensor_s + softmax_s, memory_s) * (FLASH1_SLOWDOWN if kernel == "flash1" else 1.0)
    return KernelTime(busy_s + _launch_s(hw), flops, hbm_bytes)


@lru_cache(maxsize=65536)
def decode_attention(hw: HardwareSpec, batch: int, heads: int, kv_heads: int, context: int,
                     head_dim: int, kv_bytes_per_element: float = 0.0) -> KernelTime:
    """One decode step's attention over a KV cache of `context` tokens. Memory sees the cache
    once, as one long read stream (query heads sharing a KV head under GQA hit it in L2). The
    kernel of this period (TensorRT-LLM's masked multi-head attention) runs one block per
    sequence and query head, so the SMs process every query head's copy of its KV head's
    cache: at `decode_attention_rate` elements per SM per cycle that, not bandwidth, bounds
    long contexts. The cache is in the activation dtype unless `kv_bytes_per_element` says
    otherwise; the step's queries in and outputs out move at the elementwise rate."""
    kv_bytes = 2 * batch * kv_heads * context * head_dim * (kv_bytes_per_element or hw.act_bytes)
    q_bytes = 2 * batch * heads * head_dim * hw.act_bytes
    flops = 4.0 * batch * heads * context * head_dim
    busy_s = max(kv_bytes / stream_bandwidth_bps(hw) + q_bytes / mixed_bandwidth_bps(hw),
                 flops / hw.gpu.flops("fp32"))
    rate = hw.calibration.decode_attention_rate
    if rate > 0:
        processed = 2.0 * batch * heads * context * head_dim
        busy_s = max(busy_s, processed / (rate * hw.gpu.sm_count * hw.gpu.clock_hz))
    return KernelTime(busy_s + _launch_s(hw), flops, kv_bytes + q_bytes)
