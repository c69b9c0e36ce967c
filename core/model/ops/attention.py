"""Fused attention: FlashAttention-style prefill and training kernels, and the decode step's
sweep of the KV cache."""
from functools import lru_cache
from math import ceil

from ..specs import DTYPE_BYTES, EngineAttention, HardwareSpec, MlaPrefill
from .common import (KernelTime, fp8_cache_kernels, launch_s, mixed_bandwidth_bps, stream_bandwidth_bps,
                     tensor_rate_flops)
from .gemm import L2_USABLE_FRACTION

SOFTMAX_FP32_OPS = 5  # scale, max, subtract, sum, rescale per attention score (the exp is apart)
# The exponential runs on the special-function units (gpu.exp_per_sm_per_clock: 16 results per
# SM per clock from Volta to Blackwell). On H100 that is 3.9 T exp/s against 989 TFLOP/s of BF16
# matmul (the FlashAttention-3 paper's point): a FlashAttention-2-style kernel, which does not
# overlap the softmax with the matmuls, spends a quarter (A100) to a half (H100) of its matmul
# time on exponentials; on B200 a head of 128 takes as long in its exponentials as in its
# matmuls, which Blackwell Ultra's doubled rate relieves.
FLASH_TILE_Q = 128
FLASH_TILE_KV = 64
SCORE_TILE_COLUMNS = 128  # tensor-memory columns of a query tile's 128 x 128 FP32 scores
SOFTMAX_TILES_PER_CTA = 2  # query tiles a Blackwell forward CTA holds, one per softmax warpgroup
# FlashAttention 1.x took twice FlashAttention-2's time for the same attention: the
# flash-attention README's changelog entry "2.0: Complete rewrite, 2x faster" (fewer non-matmul
# FLOPs, work split over the sequence as well as batch x heads, and between warps).
FLASH1_SLOWDOWN = 2.0
# FlashAttention 1.x's CUDA kernels exist for head dimensions 32, 64 and 128; any other runs on
# the next one up, padded (csrc/flash_attn/fmha_api.cpp, run_fmha_fwd / run_fmha_bwd), as its
# Triton kernels pad to the next power of two (flash_attn_triton.py, BLOCK_HEADDIM).
FLASH1_HEAD_DIMS = (32, 64, 128)
DQ_ACCUMULATOR_BYTES = 4  # the backward accumulates dQ in FP32 across KV tiles


def cta_rows(gpu, value_dim: float) -> int:
    """Query rows one CTA of the fused attention forward holds: two 128-row tiles where the
    GPU's tensor memory holds both tiles' scores and outputs (Blackwell's 512 columns, value
    head dimensions up to 128), else one."""
    fit = int(gpu.tensor_memory_columns // (SCORE_TILE_COLUMNS + value_dim))
    return FLASH_TILE_Q * max(1, min(SOFTMAX_TILES_PER_CTA, fit))


def overlaps_softmax(gpu) -> bool:
    """Whether the GPU's fused attention kernels can hide the softmax under the matmuls: it has
    warpgroup MMA (Hopper on), which the pre-Hopper mma.sync runs at a share of (mma_sync_share)."""
    return gpu.mma_sync_share < 1


def causal_fraction(kv_len: int) -> float:
    """Share of the score matrix a causal FlashAttention kernel computes: the lower triangle
    plus the diagonal tiles it runs in full."""
    return 0.5 * (1 + 1 / max(1, ceil(kv_len / FLASH_TILE_KV)))


@lru_cache(maxsize=65536)
def flash_attention(hw: HardwareSpec, batch_heads: int, q_len: int, kv_len: int, head_dim: int,
                    kv_groups: int, causal: bool, backward: bool = False, kernel: str = "flash",
                    kv_bytes_per_element: float = 0.0, preprocess: bool = True,
                    other_kernel: MlaPrefill | None = None, softmax_exposed: bool = True) -> KernelTime:
    """One fused attention kernel (FlashAttention-2 style): scores stay in SRAM.

    `batch_heads` counts query heads; `kv_groups` is query heads per KV head (GQA).
    Backward does five tile matmuls to forward's two, recomputes the scores, runs its tensor
    cores at attention_backward_share of the forward's rate, and adds the memory-bound passes
    around it (backward_pass_bytes). Each 128-row query tile costs attention_tile_s
    (attention_backward_tile_s in the backward), spread over the SMs. `kernel` flash2
    (FlashAttention-2) issues mma.sync, at the GPU's mma_sync_share of the rate; flash1
    (FlashAttention 1.x) does FlashAttention-2's work in FLASH1_SLOWDOWN times its time, its
    tile matmuls at the head dimension of the kernel it has (FLASH1_HEAD_DIMS). An inference
    engine's name (calibration.engine_attention) times that engine's prefill op: its tensor-core
    share (on the FP8 peak where `kv_bytes_per_element` says the cache is FP8), tile cost and
    floor, and its preprocessing pass over the new queries, keys and values (without
    `preprocess`, the attention kernel alone: MLA's engines prepare a latent cache instead);
    `other_kernel`'s shares and tile cost stand for the engine's prefill kernel's where the op
    runs another of its kernels (MLA's context kernel, EngineAttention.mla_prefill); without
    `softmax_exposed` the op hides its softmax whole (MLA's context kernel), else the engine's
    prefill_softmax_exposed share shows.
    A CTA holds the query rows cta_rows gives the forward at `head_dim` (two tiles on Blackwell),
    one tile for the backward (its tensor memory full with one tile's scores, their gradients and
    the key and value gradients) and for FlashAttention 1 and 2 (mma.sync from registers)."""
    gpu, cal = hw.gpu, hw.calibration
    el = hw.act_bytes
    visible = causal_fraction(kv_len) if causal else 1.0
    scores = batch_heads * q_len * kv_len * visible
    matmuls = 5 if backward else 2
    flops = matmuls * 2.0 * scores * head_dim
    engine = cal.engine_kernels(kernel)
    tile_dim = next((d for d in FLASH1_HEAD_DIMS if d >= head_dim), head_dim) if kernel == "flash1" else head_dim
    tiles = batch_heads * ceil(q_len / FLASH_TILE_Q)
    one_tile = backward or kernel in ("flash2", "flash1")
    ctas = batch_heads * ceil(q_len / (FLASH_TILE_Q if one_tile else cta_rows(gpu, head_dim)))
    per_sm = ceil(ctas / gpu.sm_count) / (ctas / gpu.sm_count)  # tail-wave under-fill
    # a causal kernel's last CTA sees every key, 1 / visible times the mean CTA's work: with fewer
    # CTAs than that many waves' worth of SMs, that CTA, not the mean, sets the time
    longest = gpu.sm_count / ctas / visible if causal else 0.0
    work_per_sm = max(per_sm, longest)
    clock = cal.sustained_clock
    if engine is None:
        rate = tensor_rate_flops(hw, hw.act_dtype) * cal.attention_efficiency
    elif fp8_cache_kernels(hw, kv_bytes_per_element):
        share = other_kernel.fp8_tensor_share if other_kernel else engine.prefill_fp8_tensor_share
        rate = gpu.flops("fp8") * clock * share
    else:
        share = other_kernel.tensor_share if other_kernel else engine.prefill_tensor_share
        rate = gpu.flops(hw.act_dtype) * clock * share
    if backward:
        rate *= cal.attention_backward_share
    if kernel in ("flash2", "flash1"):
        rate *= gpu.mma_sync_share
    tensor_s = flops * tile_dim / head_dim / rate * work_per_sm
    exp_rate = gpu.exp_per_sm_per_clock * gpu.sm_count * gpu.clock_hz * clock
    softmax_s = (2 if backward else 1) * scores * SOFTMAX_FP32_OPS / (gpu.flops("fp32") * clock) * work_per_sm
    softmax_s += scores / exp_rate * work_per_sm  # one exp per score, forward and recomputed in backward
    # On GPUs with asynchronous warpgroup MMA (attention_softmax_overlap) the fused kernels
    # (FlashAttention-3, cuDNN's, the engines') hide one warpgroup's softmax under another's
    # matmuls; FlashAttention-2's forward hides it as well (it takes 1 / mma_sync_share of the
    # fused time, softmax and all), its backward does not (our H100 rows: -4 % median run in
    # turn, -12 % overlapped); FlashAttention 1 and GPUs before Hopper run the two in turn.
    # (The engines' kernels overlap wherever the GPU has warpgroup MMA.)
    overlapped = overlaps_softmax(gpu) if engine is not None else \
        cal.attention_softmax_overlap and (kernel == "flash" or kernel == "flash2" and not backward)
    compute_s = max(tensor_s, softmax_s) if overlapped else tensor_s + softmax_s
    if overlapped and engine is not None and softmax_exposed:
        compute_s += engine.prefill_softmax_exposed * min(tensor_s, softmax_s)
    tile_cost_s = (cal.attention_backward_tile_s if backward else cal.attention_tile_s) if engine is None \
        else other_kernel.tile_s if other_kernel else engine.prefill_tile_s
    compute_s += tiles * tile_cost_s / gpu.sm_count * per_sm / clock  # cycles: longer at a lower clock
    q_bytes = batch_heads * q_len * head_dim * el
    kv_bytes = 2 * (batch_heads // kv_groups) * kv_len * head_dim * el
    kv_passes = ceil(q_len / FLASH_TILE_Q) * visible
    l2_bytes = q_bytes * 2 + kv_bytes * max(1.0, kv_passes)
    hbm_bytes = (q_bytes * 2 + kv_bytes) * (2 if backward else 1)
    # the engines' kernels walk the tiles head by head, so a head's keys and values stay in L2
    if engine is None and kv_bytes > gpu.l2.capacity_bytes * L2_USABLE_FRACTION:
        hbm_bytes = max(hbm_bytes, l2_bytes)
    memory_s = max(hbm_bytes / mixed_bandwidth_bps(hw),
                   l2_bytes / gpu.l2.bandwidth_bps)
    # an engine's op loads each tile's operands before its matmuls: at short sequences, with few
    # key blocks per tile, nothing hides the loads, so its traffic adds to its compute
    if engine is not None:
        compute_s += (q_bytes * 2 + kv_bytes) / mixed_bandwidth_bps(hw)
    busy_s = max(compute_s, memory_s) * (FLASH1_SLOWDOWN if kernel == "flash1" else 1.0)
    if backward and cal.attention_backward_passes:
        passes = backward_pass_bytes(batch_heads * q_len * head_dim, el)
        busy_s += passes / mixed_bandwidth_bps(hw)
        hbm_bytes += passes
    floor_s = cal.attention_floor_s
    if engine is not None:
        floor_s = engine.prefill_floor_s
    if engine is not None and preprocess:  # the engine's op also ropes Q and K and writes K and V into its paged cache
        busy_s += 2 * q_bytes / mixed_bandwidth_bps(hw) + \
            2 * kv_bytes / (gpu.hbm.bandwidth_bps * engine.prefill_cache_share)
        hbm_bytes += 2 * (q_bytes + kv_bytes)
        if engine.prefill_fp8_query_cast and fp8_cache_kernels(hw, kv_bytes_per_element):
            cast_bytes = q_bytes * (1 + DTYPE_BYTES["fp8"] / el)  # the queries read, and written in FP8
            busy_s += cast_bytes / mixed_bandwidth_bps(hw) + gpu.graph_launch_overhead_s
            hbm_bytes += cast_bytes
    return KernelTime(floor_s + busy_s + launch_s(hw), flops, hbm_bytes)


def backward_pass_bytes(q_elements: float, el: float) -> float:
    """HBM bytes of the memory-bound passes a FlashAttention backward runs beside its main
    kernel: reading O and dO for their row-wise dot product (the softmax gradient's D), zeroing
    the FP32 dQ accumulator the main kernel adds into, and converting it to the activation
    dtype (FlashAttention-2's flash_bwd_preprocess / convert_dQ kernels; cuDNN does alike)."""
    return q_elements * (2 * el + DQ_ACCUMULATOR_BYTES + DQ_ACCUMULATOR_BYTES + el)


@lru_cache(maxsize=65536)
def decode_attention(hw: HardwareSpec, batch: int, heads: int, kv_heads: int, context: int,
                     head_dim: int, kv_bytes_per_element: float = 0.0, engine: str = "") -> KernelTime:
    """One decode step's attention over a KV cache of `context` tokens. With an `engine` the
    preset describes (calibration.engine_attention), that engine's kernels (engine_decode_s).
    Otherwise memory sees the cache once, as one long read stream (query heads sharing a KV
    head under GQA hit it in L2), and the kernel of 2023's engines (TensorRT-LLM's masked
    multi-head attention) runs one block per sequence and query head, so the SMs process every
    query head's copy of its KV head's cache: at `decode_attention_rate` elements per SM per
    cycle that, not bandwidth, bounds long contexts. The cache is in the activation dtype unless
    `kv_bytes_per_element` says otherwise; the step's queries in and outputs out move at the
    elementwise rate."""
    clock = hw.calibration.sustained_clock
    kv_el = kv_bytes_per_element or hw.act_bytes
    kv_bytes = 2 * batch * kv_heads * context * head_dim * kv_el
    q_bytes = 2 * batch * heads * head_dim * hw.act_bytes
    flops = 4.0 * batch * heads * context * head_dim
    kernels = hw.calibration.engine_kernels(engine)
    if kernels is not None:
        return KernelTime(float(engine_decode_s(kernels, hw, batch, heads, kv_heads, context, head_dim, kv_el)),
                          flops, kv_bytes + q_bytes)
    busy_s = max(kv_bytes / stream_bandwidth_bps(hw) + q_bytes / mixed_bandwidth_bps(hw),
                 flops / (hw.gpu.flops("fp32") * clock))
    rate = hw.calibration.decode_attention_rate
    if rate > 0:
        processed = 2.0 * batch * heads * context * head_dim
        busy_s = max(busy_s, processed / (rate * hw.gpu.sm_count * hw.gpu.clock_hz * clock))
    return KernelTime(busy_s + launch_s(hw), flops, kv_bytes + q_bytes)


def engine_decode_s(k: EngineAttention, hw: HardwareSpec, batch, heads, kv_heads, context, head_dim, kv_el):
    """Seconds of an engine's decode attention op (EngineAttention says what each term is).
    Plain arithmetic on numbers or numpy arrays alike, so scripts/fit_engine_attention.py fits the
    very function `rapid run` times. The op's preprocessing (RoPE on the new queries and keys,
    the new keys and values written to the cache) moves its bytes at the elementwise rate."""
    gpu, clock = hw.gpu, hw.calibration.sustained_clock
    per_head = (k.decode_max_group > 0) & (heads > k.decode_max_group * kv_heads)
    streams = _pick(per_head, heads, kv_heads)  # cache reads: per KV head, or per query head
    pairs = batch * streams
    splits = _least(-(-context // k.decode_split_tokens), k.decode_max_splits)
    in_flight = pairs * splits / (k.decode_saturation * gpu.sm_count)
    fill = in_flight / (1.0 + in_flight)
    share = _pick(kv_el < 2, k.decode_fp8_bandwidth_share, k.decode_bandwidth_share)
    bandwidth_bps = share * fill * _pick(per_head, gpu.l2.bandwidth_bps, gpu.hbm.bandwidth_bps)
    sweep_s = 2.0 * pairs * context * head_dim * kv_el / bandwidth_bps
    grouped = (heads > kv_heads) * (1 - per_head)
    widened = (kv_el < 2) * (1 - grouped * k.decode_fp8_group_native)
    widen_s = widened * 2.0 * pairs * context * head_dim * k.decode_fp8_widen_s / (fill * gpu.sm_count * clock)
    sweep_s = _pick(widen_s > sweep_s, widen_s, sweep_s)
    prep_s = 2.0 * batch * (heads + 2 * kv_heads) * head_dim * hw.act_bytes / mixed_bandwidth_bps(hw)
    group_pair_s = k.decode_pair_s if k.decode_group_pair_s is None else k.decode_group_pair_s
    cycles_s = (_pick(grouped * (kv_el >= 2), group_pair_s, k.decode_pair_s) * pairs
                + k.decode_score_s * batch * heads * context) / (gpu.sm_count * clock)
    group_floor_s = k.decode_floor_s if k.decode_fp8_group_floor_s is None else k.decode_fp8_group_floor_s
    floor_s = _pick(grouped * (kv_el < 2), group_floor_s, k.decode_floor_s)
    return floor_s + launch_s(hw) + prep_s + sweep_s + cycles_s


def _pick(condition, if_true, otherwise):
    """`if_true` where `condition` holds, else `otherwise`: exact for numbers and numpy arrays
    alike, so the operator model needs no numpy (whose import `rapid run` would pay)."""
    return condition * if_true + (1 - condition) * otherwise


def _least(a, b):
    """The smaller of `a` and `b`, element by element on arrays."""
    return _pick(a <= b, a, b)
