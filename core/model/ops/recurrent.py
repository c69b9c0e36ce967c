"""Fixed-state sequence mixers' kernels: the chunked scan of Gated DeltaNet and Mamba-2's
SSD (training and prefill), and their one-token state update (decode)."""
from functools import lru_cache

from ..specs import DTYPE_BYTES, HardwareSpec
from .common import KernelTime, launch_s, mixed_bandwidth_bps, tensor_rate_flops

SCAN_CHUNK = 64  # tokens per chunk of the chunked scan (flash-linear-attention's GDN kernels; Mamba-2 runs 128)
STATE_BYTES = DTYPE_BYTES["fp32"]  # the recurrent state, kept and checkpointed in FP32


@lru_cache(maxsize=65536)
def chunked_scan(hw: HardwareSpec, sequences: int, tokens: int, heads: int, key_dim: int, value_dim: int,
                 chunk: int = SCAN_CHUNK, backward: bool = False) -> KernelTime:
    """The chunked form of a linear recurrence over `tokens` per sequence: within a chunk a
    causal (chunk x chunk) attention-like product on the tensor cores, across chunks the
    key_dim x value_dim state carried from chunk to chunk (read, updated, applied to the
    queries), its value at each chunk's start written for the backward. Backward recomputes
    the chunk states and runs about twice the forward's matmuls."""
    cal = hw.calibration
    el = hw.act_bytes
    per_token = 2.0 * chunk * (key_dim + value_dim) + 6.0 * key_dim * value_dim
    flops = sequences * tokens * heads * per_token * (3 if backward else 1)
    rate = tensor_rate_flops(hw, hw.act_dtype) * cal.attention_efficiency
    io = sequences * tokens * heads * (2 * key_dim + 2 * value_dim) * el
    states = sequences * -(-tokens // chunk) * heads * key_dim * value_dim * STATE_BYTES
    moved = (2 * io + 2 * states) if backward else (io + states)
    busy_s = max(flops / rate, moved / mixed_bandwidth_bps(hw))
    return KernelTime(busy_s + launch_s(hw), flops, moved)


@lru_cache(maxsize=65536)
def recurrent_step(hw: HardwareSpec, batch: int, heads: int, key_dim: int, value_dim: int,
                   state_bytes: float = STATE_BYTES) -> KernelTime:
    """One decode token's state update and readout per sequence: the state read and written
    back, a rank-one update and a matrix-vector product per head (bandwidth-bound)."""
    state = batch * heads * key_dim * value_dim * state_bytes
    flops = 6.0 * batch * heads * key_dim * value_dim
    moved = 2 * state + batch * heads * (2 * key_dim + 2 * value_dim) * hw.act_bytes
    busy_s = max(moved / mixed_bandwidth_bps(hw), flops / (hw.gpu.flops("fp32") * hw.calibration.sustained_clock))
    return KernelTime(busy_s + launch_s(hw), flops, moved)
