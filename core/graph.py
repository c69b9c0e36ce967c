"""One transformer layer as the operators one rank runs, forward and backward, under
Megatron-style tensor / sequence / context / expert parallelism: compute kernels with
their modelled times and the bytes each keeps alive for backward, and communication
nodes with their group axis, collective and size."""
from dataclasses import dataclass
from functools import lru_cache

from . import ops
from .specs import DTYPE_BYTES, HardwareSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    kind: str  # "compute" or "comm"
    time_s: float = 0.0
    flops: float = 0.0
    collective: str = ""
    axis: str = ""  # tp | cp | ep
    bytes_: float = 0.0
    saved_bytes: float = 0.0  # activation kept from forward for backward
    cover_s: float = 0.0  # compute this communication overlaps with
    attention_core: bool = False  # recomputed under selective recompute


@dataclass(frozen=True)
class LayerShape:
    """What one rank computes for one layer and one micro-batch."""
    micro_batch: int
    seq: int  # local query tokens per sequence (after context parallelism)
    kv_seq: int  # tokens attended to
    tp: int
    sp: bool
    cp: int
    ep: int
    causal: bool = True

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq


@dataclass(frozen=True)
class LayerGraph:
    forward: tuple
    backward: tuple


def _comm(name: str, collective: str, axis: str, bytes_: float, cover_s: float = 0.0) -> Op:
    return Op(name, "comm", collective=collective, axis=axis, bytes_=bytes_, cover_s=cover_s)


def _compute(name: str, kernel: ops.KernelTime, saved: float = 0.0, core: bool = False) -> Op:
    return Op(name, "compute", time_s=kernel.time_s, flops=kernel.flops, saved_bytes=saved,
              attention_core=core)


def _gemm_ops(hw, name, m, n, k, saved, batch=1, core=False):
    """Forward op plus its two backward GEMMs (input gradient, weight gradient)."""
    fwd = _compute(name, ops.gemm(hw, m, n, k, batch), saved, core)
    dgrad = _compute(name + ".dgrad", ops.gemm(hw, m, k, n, batch), core=core)
    wgrad = _compute(name + ".wgrad", ops.gemm(hw, k, n, m, batch), core=core)
    return fwd, (dgrad, wgrad)


def _pointwise_ops(hw, name, read_bytes, write_bytes, saved, core=False):
    fwd = _compute(name, ops.pointwise(hw, read_bytes + write_bytes), saved, core)
    bwd = _compute(name + ".bwd", ops.pointwise(hw, 2 * read_bytes + write_bytes), core=core)
    return fwd, (bwd,)


@lru_cache(maxsize=4096)
def build_layer(model: ModelSpec, hw: HardwareSpec, shape: LayerShape) -> LayerGraph:
    el = DTYPE_BYTES[hw.dtype]
    t, T, h = shape.tp, shape.tokens, model.hidden
    T_norm = T // t if shape.sp else T  # tokens a rank holds outside the TP region
    heads = model.heads // t
    kv_heads = max(1, model.kv_heads // t)
    d = model.head_dim
    q_dim, kv_dim = heads * d, kv_heads * d
    fwd, bwd = [], []  # bwd: groups of backward ops in time order, the groups in forward order

    def add(pair):
        fwd.append(pair[0])
        bwd.append(pair[1])

    def enter_tp(tag, gemm_pair):
        """Megatron's f / g before a column-parallel GEMM: gather (SP) or identity forward,
        reduce backward. With SP the backward re-gathers the input for the weight
        gradient while the input gradient is computed."""
        forward, (dgrad, wgrad) = gemm_pair
        if t > 1 and shape.sp:
            fwd.append(_comm(f"{tag}.allgather", "all_gather", "tp", T * h * el))
            bwd.append((_comm(f"{tag}.allgather.bwd", "all_gather", "tp", T * h * el, dgrad.time_s),
                        dgrad, wgrad, _comm(f"{tag}.reducescatter.bwd", "reduce_scatter", "tp", T * h * el)))
        elif t > 1:
            bwd.append((dgrad, wgrad, _comm(f"{tag}.allreduce.bwd", "all_reduce", "tp", T * h * el)))
        else:
            bwd.append((dgrad, wgrad))
        fwd.append(forward)

    def leave_tp(tag):
        """Megatron's g after a row-parallel GEMM: all-reduce, or reduce-scatter with SP
        (whose backward is an all-gather)."""
        if t > 1 and shape.sp:
            fwd.append(_comm(f"{tag}.reducescatter", "reduce_scatter", "tp", T * h * el))
            bwd.append((_comm(f"{tag}.allgather.bwd", "all_gather", "tp", T * h * el),))
        elif t > 1:
            fwd.append(_comm(f"{tag}.allreduce", "all_reduce", "tp", T * h * el))

    norm_io = T_norm * h * el
    add(_pointwise_ops(hw, "norm1", norm_io, norm_io, norm_io))
    qkv_out = T * (q_dim + 2 * kv_dim) * el  # Q, K, V: kept for attention's backward
    enter_tp("attn", _gemm_ops(hw, "qkv", T, q_dim + 2 * kv_dim, h, T_norm * h * el + qkv_out))
    if model.position_embedding == "rotary":
        rot = T * (q_dim + kv_dim) * el
        add(_pointwise_ops(hw, "rotary", rot, rot, 0.0))
    batch_heads = shape.micro_batch * heads
    if model.attention_kernel == "flash":
        groups = max(1, heads // kv_heads)
        kernel = ops.flash_attention(hw, batch_heads, shape.seq, shape.kv_seq, d, groups, shape.causal)
        back = ops.flash_attention(hw, batch_heads, shape.seq, shape.kv_seq, d, groups,
                                   shape.causal, backward=True)
        logsumexp = batch_heads * shape.seq * 4
        attn_fwd = [_compute("attention", kernel, logsumexp)]
        attn_bwd = (_compute("attention.bwd", back),)
    else:
        scores = batch_heads * shape.seq * shape.kv_seq
        qk = _gemm_ops(hw, "scores", shape.seq, shape.kv_seq, d, 0.0, batch=batch_heads, core=True)
        core = [qk, _pointwise_ops(hw, "softmax", scores * el, scores * el, scores * el, core=True)]
        if model.dropout:
            core.append(_pointwise_ops(hw, "attn_dropout", scores * el, scores * (el + 1),
                                       scores * (el + 1), core=True))
        core.append(_gemm_ops(hw, "context", shape.seq, d, shape.kv_seq, 0.0, batch=batch_heads,
                              core=True))
        attn_fwd = [pair[0] for pair in core]
        attn_bwd = tuple(op for pair in reversed(core) for op in pair[1])
    cover = sum(op.time_s for op in attn_fwd)
    if shape.cp > 1:
        kv_bytes = 2 * T * kv_dim * el * shape.cp
        fwd.append(_comm("cp.kv_allgather", "all_gather", "cp", kv_bytes, cover))
        attn_bwd = (_comm("cp.kv_allgather.bwd", "all_gather", "cp", kv_bytes, cover), *attn_bwd,
                    _comm("cp.dkv_reducescatter.bwd", "reduce_scatter", "cp", kv_bytes, cover))
    fwd.extend(attn_fwd)
    bwd.append(attn_bwd)
    add(_gemm_ops(hw, "attn_out", T, h, q_dim, T * q_dim * el))
    leave_tp("attn")
    mask = T_norm * h if model.dropout else 0.0
    add(_pointwise_ops(hw, "residual1", 2 * norm_io, norm_io + mask, mask))
    add(_pointwise_ops(hw, "norm2", norm_io, norm_io, norm_io))
    _mlp(model, hw, shape, add, enter_tp, fwd, bwd, T_norm)
    leave_tp("mlp")
    add(_pointwise_ops(hw, "residual2", 2 * norm_io, norm_io + mask, mask))
    backward = tuple(op for group in reversed(bwd) for op in group)
    return LayerGraph(tuple(fwd), backward)


def _mlp(model, hw, shape, add, enter_tp, fwd, bwd, T_norm):
    el = DTYPE_BYTES[hw.dtype]
    t, T, h = shape.tp, shape.tokens, model.hidden
    gated = model.activation == "swiglu"
    if model.moe is None:
        rows, ffn, local_experts = T, model.ffn_hidden // t, 1
        enter_tp("mlp", _gemm_ops(hw, "mlp_up", T, ffn * (2 if gated else 1), h, T_norm * h * el))
    else:
        moe = model.moe
        local_experts = moe.experts // shape.ep
        routed = T * moe.top_k
        rows = max(1, routed * shape.ep // moe.experts)
        ffn = moe.expert_ffn_hidden // t
        enter_tp("mlp", _gemm_ops(hw, "router", T, moe.experts, h, T_norm * h * el))
        if shape.ep > 1:
            a2a = routed * h * el
            fwd.append(_comm("moe.dispatch", "all_to_all", "ep", a2a))
            bwd.append((_comm("moe.dispatch.bwd", "all_to_all", "ep", a2a),))
        add(_gemm_ops(hw, "expert_up", rows, ffn * (2 if gated else 1), h, routed * h * el,
                      batch=local_experts))
    act_in = rows * local_experts * ffn * el
    if gated:
        add(_pointwise_ops(hw, "swiglu", 2 * act_in, act_in, 2 * act_in))
    else:
        add(_pointwise_ops(hw, "gelu", act_in, act_in, act_in))
    if model.moe is None:
        add(_gemm_ops(hw, "mlp_down", T, h, ffn, act_in))
    else:
        add(_gemm_ops(hw, "expert_down", rows, h, ffn, act_in, batch=local_experts))
        if shape.ep > 1:
            a2a = T * model.moe.top_k * h * el
            fwd.append(_comm("moe.combine", "all_to_all", "ep", a2a))
            bwd.append((_comm("moe.combine.bwd", "all_to_all", "ep", a2a),))


@lru_cache(maxsize=16384)
def build_decode_layer(model: ModelSpec, hw: HardwareSpec, batch: int, context: int, tp: int) -> tuple:
    """One layer of one decode step (a single new token per sequence) on one rank,
    reading a KV cache of `context` tokens."""
    el = DTYPE_BYTES[hw.dtype]
    h = model.hidden
    heads = model.heads // tp
    kv_heads = max(1, model.kv_heads // tp)
    d = model.head_dim
    q_dim, kv_dim = heads * d, kv_heads * d
    row = batch * h * el
    out = [
        _compute("norm1", ops.pointwise(hw, 2 * row)),
        _compute("qkv", ops.gemm(hw, batch, q_dim + 2 * kv_dim, h)),
    ]
    if model.position_embedding == "rotary":
        out.append(_compute("rotary", ops.pointwise(hw, 2 * batch * (q_dim + kv_dim) * el)))
    out.append(_compute("kv_append", ops.pointwise(hw, 4 * batch * kv_dim * el)))
    out.append(_compute("attention", ops.decode_attention(hw, batch, heads, kv_heads, context, d)))
    out.append(_compute("attn_out", ops.gemm(hw, batch, h, q_dim)))
    if tp > 1:
        out.append(_comm("attn.allreduce", "all_reduce", "tp", row))
    out.append(_compute("residual1", ops.pointwise(hw, 3 * row)))
    out.append(_compute("norm2", ops.pointwise(hw, 2 * row)))
    gated = model.activation == "swiglu"
    if model.moe is None:
        ffn, rows, experts = model.ffn_hidden // tp, batch, 1
    else:
        ffn = model.moe.expert_ffn_hidden // tp
        routed = batch * model.moe.top_k
        experts = min(model.moe.experts, routed)  # experts a step's tokens actually touch
        rows = -(-routed // experts)
        out.append(_compute("router", ops.gemm(hw, batch, model.moe.experts, h)))
    out.append(_compute("mlp_up", ops.gemm(hw, rows, ffn * (2 if gated else 1), h, experts)))
    act = rows * experts * ffn * el
    out.append(_compute("activation", ops.pointwise(hw, (3 if gated else 2) * act)))
    out.append(_compute("mlp_down", ops.gemm(hw, rows, h, ffn, experts)))
    if tp > 1:
        out.append(_comm("mlp.allreduce", "all_reduce", "tp", row))
    out.append(_compute("residual2", ops.pointwise(hw, 3 * row)))
    return tuple(out)
