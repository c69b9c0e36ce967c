"""Multi-head latent attention's decode kernel (FlashMLA-style, weights absorbed): every query
head attends straight to the compressed cache, one latent of kv_lora_rank plus a RoPE key per
token, shared by all heads (MQA over the latent)."""
from functools import lru_cache

from ..specs import HardwareSpec
from .common import KernelTime, launch_s, mixed_bandwidth_bps, stream_bandwidth_bps


@lru_cache(maxsize=65536)
def mla_decode(hw: HardwareSpec, batch: int, heads: int, context: int, kv_lora_rank: int, rope_dim: int,
               kv_bytes_per_element: float = 0.0) -> KernelTime:
    """One decode step's absorbed MLA over `context` cached tokens per sequence: scores over
    latent plus RoPE key (kv_lora_rank + rope_dim), values the latent itself (kv_lora_rank).
    The cache is read once per sequence (all heads share it); the matmuls run on the tensor
    cores at the activation dtype (64 or 128 heads make a full MMA tile)."""
    cal = hw.calibration
    el = kv_bytes_per_element or hw.act_bytes
    cache_bytes = batch * context * (kv_lora_rank + rope_dim) * el
    q_bytes = batch * heads * (2 * kv_lora_rank + rope_dim) * hw.act_bytes  # query in, latent output out
    flops = 2.0 * batch * heads * context * (2 * kv_lora_rank + rope_dim)
    rate = hw.gpu.flops(hw.act_dtype) * cal.sustained_clock * cal.compute_efficiency * cal.attention_efficiency
    busy_s = max(cache_bytes / stream_bandwidth_bps(hw) + q_bytes / mixed_bandwidth_bps(hw), flops / rate)
    return KernelTime(busy_s + launch_s(hw), flops, cache_bytes + q_bytes)
