"""Multi-head latent attention's kernels: the decode kernel (FlashMLA-style, weights absorbed),
where every query head attends straight to the compressed cache, one latent of kv_lora_rank
plus a RoPE key per token, shared by all heads (MQA over the latent); and an inference
engine's prefill op, multi-head attention over the decompressed keys and values."""
from functools import lru_cache

from ..specs import HardwareSpec
from .attention import flash_attention
from .common import (KernelTime, fp8_cache_kernels, launch_s, mixed_bandwidth_bps, stream_bandwidth_bps,
                     tensor_rate_flops)

# The decode kernels (FlashMLA, TensorRT-LLM's MLA generation kernel) compute one sequence's
# query heads as the rows of one 64-row MMA tile: fewer heads per rank (DeepSeek-V3's 128 over
# tensor parallelism 8 leaves 16) run the tile part empty at the full tile's cost.
MLA_HEAD_TILE = 64
# The split-KV decode is a chain of dependent kernels (the tile scheduler's metadata, the
# attention over each split, the combine of the splits), each waiting for the last one's launch
# latency, which CUDA-graph replay does not remove. AIConfigurator's MLA generation tables
# (../shared/validation/kernels) floor at about four launches: 10.7 us on H200, 10.9 on H100,
# 8.7 on B200, 14.5 on A100, against 1.8-2.5 us for their smallest GEMM.
MLA_DECODE_CHAIN = 3  # dependent kernels beyond the one a decode layer counts


@lru_cache(maxsize=65536)
def mla_decode(hw: HardwareSpec, batch: int, heads: int, context: int, kv_lora_rank: int, rope_dim: int,
               kv_bytes_per_element: float = 0.0, engine: str = "") -> KernelTime:
    """One decode step's absorbed MLA over `context` cached tokens per sequence: scores over
    latent plus RoPE key (kv_lora_rank + rope_dim), values the latent itself (kv_lora_rank).
    The cache is read once per sequence (all heads share it); the matmuls run on the tensor
    cores, the heads padded to a whole MMA tile (MLA_HEAD_TILE). With an `engine` whose MLA
    decode kernel the preset describes (calibration.engine_attention, MlaDecode): its floor,
    its cost per sequence tile and its shares of HBM and of the peak (FP8's over an FP8 cache);
    else at the activation dtype's rate and attention_efficiency, after the split-KV chain's
    launch latencies (MLA_DECODE_CHAIN)."""
    cal, gpu = hw.calibration, hw.gpu
    el = kv_bytes_per_element or hw.act_bytes
    cache_bytes = batch * context * (kv_lora_rank + rope_dim) * el
    q_bytes = batch * heads * (2 * kv_lora_rank + rope_dim) * hw.act_bytes  # query in, latent output out
    flops = 2.0 * batch * heads * context * (2 * kv_lora_rank + rope_dim)
    tiles = -(-heads // MLA_HEAD_TILE)
    tiled = flops * tiles * MLA_HEAD_TILE / heads
    kernels = cal.engine_kernels(engine)
    mla = kernels.mla_decode if kernels is not None else None
    if mla is None:
        rate = tensor_rate_flops(hw, hw.act_dtype) * cal.attention_efficiency
        busy_s = max(cache_bytes / stream_bandwidth_bps(hw) + q_bytes / mixed_bandwidth_bps(hw), tiled / rate)
        return KernelTime(busy_s + MLA_DECODE_CHAIN * gpu.launch_overhead_s + launch_s(hw), flops,
                          cache_bytes + q_bytes)
    if fp8_cache_kernels(hw, kv_bytes_per_element):
        rate = gpu.flops("fp8") * cal.sustained_clock * mla.fp8_tensor_share
        bandwidth_share = mla.fp8_bandwidth_share
    else:
        rate = gpu.flops(hw.act_dtype) * cal.sustained_clock * mla.tensor_share
        bandwidth_share = mla.bandwidth_share
    sweep_s = cache_bytes / (gpu.hbm.bandwidth_bps * bandwidth_share) + q_bytes / mixed_bandwidth_bps(hw)
    busy_s = max(sweep_s, tiled / rate) + batch * tiles * mla.sequence_s / gpu.sm_count
    return KernelTime(mla.floor_s + busy_s + launch_s(hw), flops, cache_bytes + q_bytes)


@lru_cache(maxsize=65536)
def mla_prefill(hw: HardwareSpec, batch: int, heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int,
                kv_lora_rank: int, rope_dim: int, causal: bool, engine: str,
                kv_bytes_per_element: float = 0.0) -> KernelTime:
    """An inference engine's MLA prefill op (TensorRT-LLM's context MLA): its fused attention
    kernel over every head's decompressed keys (qk_dim wide) and values (v_dim), timed at their
    mean width, on the FP8 kernels where the cache is FP8; before it, one pass that ropes the
    new queries' and keys' RoPE parts and writes each new token's latent and RoPE key into the
    paged cache, at the engine's cache-write share of HBM bandwidth (calibration.engine_attention,
    which must describe `engine`), and for the FP8 kernels (on a GPU with an FP8 peak) one that
    casts every head's queries, keys and values to FP8, a kernel of its own with its launch. The
    attention runs at the engine's MLA context kernel's shares of the peaks and cost per query
    tile where fitted (EngineAttention.mla_prefill), else at its GQA prefill kernel's."""
    kernels = hw.calibration.engine_kernels(engine)
    if kernels is None:
        raise ValueError(f"{hw.name}: no attention kernels of {engine!r} to time MLA prefill by")
    # timed at the mean of its head dimensions (160), at which Blackwell's tensor memory holds one
    # query tile per CTA (ops.attention.cta_rows), as TensorRT-LLM's MLA context tables show: two,
    # which its value dimension alone would fit, put its short prompts of many heads +19 to +28 %
    # slow at 1-100 GFLOP, refitted; its kernels' tiling is not published
    attention = flash_attention(hw, batch * heads, q_len, kv_len, (qk_dim + v_dim) / 2, 1, causal, kernel=engine,
                                kv_bytes_per_element=kv_bytes_per_element, preprocess=False,
                                other_kernel=kernels.mla_prefill, softmax_exposed=False)
    el = hw.act_bytes
    rope_bytes = 2 * 2 * batch * q_len * heads * rope_dim * el  # queries' and keys' RoPE parts, in and out
    latent_bytes = batch * q_len * (kv_lora_rank + rope_dim) * (kv_bytes_per_element or el)
    cast_bytes = 0.0
    if fp8_cache_kernels(hw, kv_bytes_per_element):  # the FP8 kernels' own cast kernel
        cast_bytes = batch * heads * (q_len * qk_dim + kv_len * (qk_dim + v_dim)) * (el + kv_bytes_per_element)
    prepare_s = (rope_bytes + cast_bytes) / mixed_bandwidth_bps(hw) + (launch_s(hw) if cast_bytes else 0.0) + \
        2 * latent_bytes / (hw.gpu.hbm.bandwidth_bps * kernels.prefill_cache_share)
    return KernelTime(attention.time_s + prepare_s, attention.flops,
                      attention.hbm_bytes + rope_bytes + cast_bytes + 2 * latent_bytes)
