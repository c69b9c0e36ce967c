"""One transformer layer as the operators one rank runs, forward and backward, under
Megatron-style tensor / sequence / context / expert parallelism: compute kernels with
their modelled times and the bytes each keeps alive for backward, and communication
nodes with their group axis, collective and size."""
from dataclasses import dataclass, replace
from functools import lru_cache

from . import ops
from .ops.mla import mla_decode
from .ops.recurrent import SCAN_CHUNK, STATE_BYTES, chunked_scan, recurrent_step
from .specs import (DTYPE_BYTES, LOW_PRECISION_DTYPES, WEIGHT_FORMAT_BYTES, HardwareSpec, ModelSpec, hash_once,
                    quantized_bytes)


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    kind: str  # "compute" or "comm"
    time_s: float = 0.0
    flops: float = 0.0
    collective: str = ""
    axis: str = ""  # tp | cp | ep | etp
    bytes_: float = 0.0
    saved_bytes: float = 0.0  # activation kept from forward for backward
    cover_s: float = 0.0  # compute this communication overlaps with
    attention_core: bool = False  # recomputed under selective recompute
    min_exposed: float = 0.0  # share of the communication no overlap can hide
    # The replays run that share as a collective of its own where it is one (ZeRO-3's first
    # gather and last scatter of a pass); a chunk of a pipelined exchange (userbuffers) stays
    # inside its hidden collective there, the closed form's share standing for it.
    exposed_runs_alone: bool = False
    hbm_bytes: float = 0.0  # HBM traffic of a compute op (the power model's, core/model/power.py)
    # Share of the bytes that leave the group's first network dimension (node): group-limited
    # routing sends a token to experts on at most groups_per_token nodes, one copy per node
    # (DeepEP), not one per expert; 1 = every byte, as the collective has it.
    outer_share: float = 1.0


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
    etp: int = 0  # expert tensor parallelism; 0 = tp
    tp_overlap: bool = False  # SP collectives pipelined with their GEMMs (userbuffers)
    document: int = 0  # tokens per packed document; 0 = the whole sequence
    # main-gradient dtype a separate kernel adds each weight gradient into; "" = fused into the
    # weight-gradient GEMM (Megatron's gradient-accumulation fusion)
    grad_accumulate: str = ""

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq


def train_shape(par, work) -> LayerShape:
    """The layer one rank runs per training micro-batch."""
    return LayerShape(par.micro_batch, work.seq // par.cp, work.seq, par.tp, par.training_sp, par.cp, par.ep,
                      etp=par.expert_tp, tp_overlap=par.overlap_tp_comm and par.training_sp and par.tp > 1,
                      document=work.document,
                      grad_accumulate="" if par.grad_accumulation_fusion else par.grad_dtype)


@hash_once
@dataclass(frozen=True)
class LayerGraph:
    forward: tuple
    backward: tuple


def _comm(name: str, collective: str, axis: str, bytes_: float, cover_s: float = 0.0,
          min_exposed: float = 0.0) -> Op:
    return Op(name, "comm", collective=collective, axis=axis, bytes_=bytes_, cover_s=cover_s,
              min_exposed=min_exposed)


def _compute(name: str, kernel: ops.KernelTime, saved: float = 0.0, core: bool = False) -> Op:
    return Op(name, "compute", time_s=kernel.time_s, flops=kernel.flops, saved_bytes=saved,
              attention_core=core, hbm_bytes=kernel.hbm_bytes)


def _plus(*kernels: ops.KernelTime) -> ops.KernelTime:
    return ops.KernelTime(sum(k.time_s for k in kernels), sum(k.flops for k in kernels),
                          sum(k.hbm_bytes for k in kernels))


def _gemm_ops(hw, name, m, n, k, saved, batch=1, core=False, accumulate=""):
    """Forward op plus its two backward GEMMs (input gradient, weight gradient), each with
    the quantizations it needs under low-precision training (ops.fp8_cast, by recipe): the
    input (with its columnwise copy, kept for the weight gradient) before the forward, the
    output gradient (and its columnwise copy) before the backward. Weights are quantized once
    per step (Transformer Engine caches them across micro-batches): the optimizer step's
    (training.weight_quantize_s).
    `batch` GEMMs of one shape run as Transformer Engine's GroupedLinear runs a rank's
    experts: one cuBLAS GEMM each, spread over 4 streams (nvte_multi_stream_cublas_gemm)
    that fill one another's tail waves, so the batched GEMM's time plus a launch per extra
    GEMM. With `accumulate` (a dtype), two kernels of their own then add the 16-bit weight
    gradient into the main gradient of that dtype, every micro-batch, as PyTorch autocast does:
    the cast to the parameter's dtype (read, write) and AccumulateGrad's in-place add (read
    both, write the sum). Megatron's gradient-accumulation fusion does it in the GEMM's
    epilogue, under the GEMM's own time."""
    rows = m * batch
    launches = [ops.pointwise(hw, 0.0)] * (batch - 1)
    fwd = _compute(name, _plus(ops.gemm(hw, m, n, k, batch), *launches, ops.fp8_cast(hw, rows * k, True)),
                   saved, core)
    dgrad = _compute(name + ".dgrad", _plus(ops.gemm(hw, m, k, n, batch), *launches,
                                            ops.fp8_cast(hw, rows * n, True)), core=core)
    wgrad_kernels = [ops.gemm(hw, k, n, m, batch, weights=False), *launches]
    if accumulate:
        elements, grad_bytes = batch * k * n, DTYPE_BYTES[accumulate]
        wgrad_kernels += [ops.pointwise(hw, elements * (hw.act_bytes + grad_bytes)),
                          ops.pointwise(hw, elements * 3 * grad_bytes)]
    wgrad = _compute(name + ".wgrad", _plus(*wgrad_kernels), core=core)
    return fwd, (dgrad, wgrad)


def gemm_input_bytes(hw: HardwareSpec) -> float:
    """Bytes per element of a linear layer's input kept for its weight gradient: under a
    low-precision recipe Transformer Engine saves the quantized copy the weight-gradient GEMM
    reads (with its block scales), not the BF16 input."""
    if hw.dtype in LOW_PRECISION_DTYPES:
        return quantized_bytes(hw.dtype, hw.recipe)
    return hw.act_bytes


def _attention_gemm_ops(hw, name, m, n, k, batch):
    """Unfused attention's batched matmuls: they run in the activation dtype even under FP8,
    on activations only (no weight matrix)."""
    dtype = hw.act_dtype
    fwd = _compute(name, ops.gemm(hw, m, n, k, batch, dtype, weights=False), core=True)
    dgrad = _compute(name + ".dgrad", ops.gemm(hw, m, k, n, batch, dtype, weights=False), core=True)
    wgrad = _compute(name + ".wgrad", ops.gemm(hw, k, n, m, batch, dtype, weights=False), core=True)
    return fwd, (dgrad, wgrad)


def _pointwise_ops(hw, name, read_bytes, write_bytes, saved, core=False):
    fwd = _compute(name, ops.pointwise(hw, read_bytes + write_bytes), saved, core)
    bwd = _compute(name + ".bwd", ops.pointwise(hw, 2 * read_bytes + write_bytes), core=core)
    return fwd, (bwd,)


@lru_cache(maxsize=4096)
def build_layer(model: ModelSpec, hw: HardwareSpec, shape: LayerShape) -> LayerGraph:
    if not model.uniform:
        raise ValueError(f"{model.name}: its layers differ; build each spec of model.layer_groups()")
    el = hw.act_bytes
    t, T, h = shape.tp, shape.tokens, model.hidden
    T_norm = T // t if shape.sp else T  # tokens a rank holds outside the TP region
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
            fwd.append(_comm(f"{tag}.allgather", "all_gather", "tp", T * h * el, *overlap(forward)))
            bwd.append((_comm(f"{tag}.allgather.bwd", "all_gather", "tp", T * h * el, dgrad.time_s),
                        dgrad, wgrad, _comm(f"{tag}.reducescatter.bwd", "reduce_scatter", "tp", T * h * el,
                                            *overlap(wgrad))))
        elif t > 1:
            bwd.append((dgrad, wgrad, _comm(f"{tag}.allreduce.bwd", "all_reduce", "tp", T * h * el)))
        else:
            bwd.append((dgrad, wgrad))
        fwd.append(forward)

    def overlap(gemm):
        """(cover seconds, least exposed share) of an SP collective next to `gemm`. With
        userbuffers (TE's tp_comm_overlap) the collective is split into t chunks exchanged
        ring-wise while the GEMM runs on the chunks already there (forward all-gather and
        reduce-scatter, backward output-gradient all-gather), or runs in bulk beside the
        weight-gradient GEMM (backward reduce-scatter): hidden up to the GEMM's time, except
        the one chunk that has to arrive before the first GEMM chunk can start (or leave
        after the last one ends). Without it the collective is exposed."""
        return (gemm.time_s, 1.0 / t) if shape.tp_overlap else (0.0, 0.0)

    def leave_tp(tag, gemm_pair):
        """Megatron's g after a row-parallel GEMM: all-reduce, or reduce-scatter with SP
        (whose backward is an all-gather)."""
        forward, (dgrad, _) = gemm_pair
        if t > 1 and shape.sp:
            fwd.append(_comm(f"{tag}.reducescatter", "reduce_scatter", "tp", T * h * el, *overlap(forward)))
            bwd.append((_comm(f"{tag}.allgather.bwd", "all_gather", "tp", T * h * el, *overlap(dgrad)),))
        elif t > 1:
            fwd.append(_comm(f"{tag}.allreduce", "all_reduce", "tp", T * h * el))

    norm_io = T_norm * h * el
    gin = gemm_input_bytes(hw)
    mask = T_norm * h if model.dropout else 0.0
    if model.mixer != "none":
        add(_pointwise_ops(hw, "norm1", norm_io, norm_io, norm_io))
        if model.mixer != "attention":
            out_proj = _recurrent_mixer(model, hw, shape, add, enter_tp)
        else:
            if model.mla is not None:
                attn_fwd, attn_bwd, kv_bytes, o_in = _mla_mixer(model, hw, shape, add, enter_tp)
            else:
                attn_fwd, attn_bwd, kv_bytes, o_in = _gqa_mixer(model, hw, shape, add, enter_tp)
            if shape.cp > 1:
                cover = sum(op.time_s for op in attn_fwd)
                fwd.append(_comm("cp.kv_allgather", "all_gather", "cp", kv_bytes, cover))
                attn_bwd = (_comm("cp.kv_allgather.bwd", "all_gather", "cp", kv_bytes, cover), *attn_bwd,
                            _comm("cp.dkv_reducescatter.bwd", "reduce_scatter", "cp", kv_bytes, cover))
            fwd.extend(attn_fwd)
            bwd.append(attn_bwd)
            if model.attention_gate:  # output * sigmoid(gate), the gate from the query projection
                gated = T * o_in * el
                add(_pointwise_ops(hw, "attn_gate", 2 * gated, gated, 2 * gated))
            out_proj = _gemm_ops(hw, "attn_out", T, h, o_in, T * o_in * gin, accumulate=shape.grad_accumulate)
        add(out_proj)
        leave_tp("attn", out_proj)
        add(_pointwise_ops(hw, "residual1", 2 * norm_io, norm_io + mask, mask))
    if model.moe is not None or model.ffn_hidden:
        add(_pointwise_ops(hw, "norm2", norm_io, norm_io, norm_io))
        _mlp(model, hw, shape, add, enter_tp, leave_tp, fwd, bwd, T_norm)
        add(_pointwise_ops(hw, "residual2", 2 * norm_io, norm_io + mask, mask))
    backward = tuple(op for group in reversed(bwd) for op in group)
    return LayerGraph(tuple(fwd), backward)


def attended_keys(kv_len: int, window: int) -> int:
    """Keys a query sees on average under causal attention limited to the last `window`
    tokens (sliding window; DeepSeek sparse attention's top-k alike): all before it up to
    the window, then the window; 0 when the window does not bind (the causal kernel applies)."""
    if not 0 < window < kv_len:
        return 0
    return max(1, round(window * (1 - window / (2 * kv_len))))


def _flash_pair(model, hw, shape, blocks_per_doc, d, groups, window):
    """The fused attention kernel and its backward over the layer's documents (packed THD
    documents, or Llama 4's attention chunks: attention within each only), each causal or
    limited to `window` keys per query (attended_keys)."""
    span = shape.kv_seq
    if 0 < shape.document < span:
        span = shape.document
    if 0 < model.chunk < span:
        span = model.chunk
    docs = max(1, shape.kv_seq // span)
    blocks, q_len, kv_len = blocks_per_doc * docs, max(1, shape.seq // docs), shape.kv_seq // docs
    keys = attended_keys(kv_len, window)
    causal = not keys
    kv_len = keys or kv_len
    kernel = ops.flash_attention(hw, blocks, q_len, kv_len, d, groups, causal, kernel=model.attention_kernel)
    back = ops.flash_attention(hw, blocks, q_len, kv_len, d, groups, causal, backward=True,
                               kernel=model.attention_kernel)
    return kernel, back


@dataclass(frozen=True)
class GqaWidths:
    """One TP rank's share of a (grouped-query) attention layer: its query and KV heads, the
    widths of Q, of one of K/V, of the output gate (0 where the model does not gate) and of the
    K/V tensors the projection writes (one where keys are the values)."""
    heads: int
    kv_heads: int
    head_dim: int
    q_dim: int
    kv_dim: int
    gate: int
    kv: int

    @property
    def projection(self) -> int:
        """Output width of the fused QKV (and gate) projection."""
        return self.q_dim + self.gate + self.kv


def gqa_widths(model: ModelSpec, tp: int) -> GqaWidths:
    heads, kv_heads, d = model.heads // tp, max(1, model.kv_heads // tp), model.head_dim
    q_dim, kv_dim = heads * d, kv_heads * d
    return GqaWidths(heads, kv_heads, d, q_dim, kv_dim, q_dim if model.attention_gate else 0,
                     model.kv_tensors * kv_dim)


def _gqa_mixer(model, hw, shape, add, enter_tp):
    """Multi-head / grouped-query attention (full, sliding-window or chunked): the fused QKV
    projection (with the output gate's columns where the model gates), rotary, the attention
    kernel. Returns (forward ops, backward ops, K+V bytes a context-parallel group gathers,
    the output projection's input width)."""
    el, t, T, h = hw.act_bytes, shape.tp, shape.tokens, model.hidden
    T_norm = T // t if shape.sp else T
    w = gqa_widths(model, t)
    heads, kv_heads, d, q_dim, kv_dim, kv = w.heads, w.kv_heads, w.head_dim, w.q_dim, w.kv_dim, w.kv
    qkv_out = T * w.projection * el  # Q, K, V (and gate): kept for attention's backward
    enter_tp("attn", _gemm_ops(hw, "qkv", T, w.projection, h, T_norm * h * gemm_input_bytes(hw) + qkv_out,
                                accumulate=shape.grad_accumulate))
    if model.position_embedding == "rotary":
        rot = T * (q_dim + kv_dim) * el
        add(_pointwise_ops(hw, "rotary", rot, rot, 0.0))
    batch_heads = shape.micro_batch * heads
    if model.attention_kernel != "standard":
        groups = max(1, heads // kv_heads)
        kernel, back = _flash_pair(model, hw, shape, batch_heads, d, groups, model.window)
        logsumexp = batch_heads * shape.seq * 4
        attn_fwd = [_compute("attention", kernel, logsumexp)]
        attn_bwd = (_compute("attention.bwd", back),)
    else:
        scores = batch_heads * shape.seq * shape.kv_seq
        qk = _attention_gemm_ops(hw, "scores", shape.seq, shape.kv_seq, d, batch_heads)
        core = [qk, _pointwise_ops(hw, "softmax", scores * el, scores * el, scores * el, core=True)]
        if model.dropout:
            core.append(_pointwise_ops(hw, "attn_dropout", scores * el, scores * (el + 1),
                                       scores * (el + 1), core=True))
        core.append(_attention_gemm_ops(hw, "context", shape.seq, d, shape.kv_seq, batch_heads))
        attn_fwd = [pair[0] for pair in core]
        attn_bwd = tuple(op for pair in reversed(core) for op in pair[1])
    return attn_fwd, attn_bwd, T * kv * el * shape.cp, q_dim


def _mla_mixer(model, hw, shape, add, enter_tp):
    """Multi-head latent attention as Megatron-Core runs it in training: the query and latent
    down-projections duplicated on every TP rank (their outputs are narrow), their norms, the
    column-parallel up-projections to per-head queries and to keys and values, rotary on the
    RoPE parts, then attention over qk_head_dim-wide keys and v_head_dim-wide values (costed
    at their mean width, which gives the two matmuls' FLOPs exactly). DeepSeek sparse attention
    adds the indexer (its projections and its score matmul over every earlier token, causal)
    and attends to index_topk keys per query."""
    mla, el, t, T, h = model.mla, hw.act_bytes, shape.tp, shape.tokens, model.hidden
    T_norm = T // t if shape.sp else T
    gin = gemm_input_bytes(hw)
    heads = model.heads // t
    down = mla.q_lora_rank + mla.latent_dim
    enter_tp("attn", _gemm_ops(hw, "mla_down", T, down, h, T_norm * h * gin + T * down * el,
                                accumulate=shape.grad_accumulate))
    latent_norms = T * (mla.q_lora_rank + mla.kv_lora_rank) * el
    add(_pointwise_ops(hw, "mla_norms", latent_norms, latent_norms, latent_norms))
    q_in = mla.q_lora_rank or h
    q_out, kv_out = heads * mla.qk_head_dim, heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    add(_gemm_ops(hw, "q_up", T, q_out, q_in, T * q_in * gin + T * q_out * el, accumulate=shape.grad_accumulate))
    add(_gemm_ops(hw, "kv_up", T, kv_out, mla.kv_lora_rank, T * mla.kv_lora_rank * gin + T * kv_out * el,
                  accumulate=shape.grad_accumulate))
    rot = T * (heads + 1) * mla.qk_rope_head_dim * el
    add(_pointwise_ops(hw, "rotary", rot, rot, 0.0))
    batch_heads = shape.micro_batch * heads
    if mla.index_topk:
        index_heads = max(1, mla.index_heads // t)
        add(_gemm_ops(hw, "indexer_proj", T, index_heads * (mla.index_head_dim + 1) + mla.index_head_dim, q_in,
                      T * q_in * gin, accumulate=shape.grad_accumulate))
        scores = _attention_gemm_ops(hw, "indexer_scores", shape.seq, max(1, shape.kv_seq // 2), mla.index_head_dim,
                                     shape.micro_batch * index_heads)
        add(scores)
        add(_pointwise_ops(hw, "indexer_topk", shape.micro_batch * shape.seq * shape.kv_seq // 2 * el,
                           shape.micro_batch * shape.seq * mla.index_topk * 4, 0.0))
    d = (mla.qk_head_dim + mla.v_head_dim) / 2
    kernel, back = _flash_pair(model, hw, shape, batch_heads, d, 1, mla.index_topk)
    logsumexp = batch_heads * shape.seq * 4
    kv_bytes = T * heads * (mla.qk_head_dim + mla.v_head_dim) * el * shape.cp
    return [_compute("attention", kernel, logsumexp)], (_compute("attention.bwd", back),), kv_bytes, \
        heads * mla.v_head_dim


def _recurrent_mixer(model, hw, shape, add, enter_tp):
    """Gated DeltaNet or Mamba-2 (heads split over TP): the column-parallel input projection,
    the causal depthwise convolution, the chunked scan, the gated RMSNorm; returns the
    row-parallel output projection's ops for the caller to add."""
    rec, el, t, T, h = model.recurrent, hw.act_bytes, shape.tp, shape.tokens, model.hidden
    T_norm = T // t if shape.sp else T
    gin = gemm_input_bytes(hw)
    heads, key_heads = rec.heads // t, max(1, rec.key_heads // t)
    conv = (2 * key_heads * rec.key_dim + heads * rec.value_dim)
    width = heads * rec.value_dim
    gates = 2 * heads if rec.kind == "gated_deltanet" else heads
    proj = conv + width + gates
    enter_tp("attn", _gemm_ops(hw, "in_proj", T, proj, h, T_norm * h * gin + T * proj * el,
                                accumulate=shape.grad_accumulate))
    conv_io = T * conv * el
    add(_pointwise_ops(hw, "conv1d", conv_io, conv_io, conv_io))
    chunk = SCAN_CHUNK if rec.kind == "gated_deltanet" else 2 * SCAN_CHUNK
    seq = shape.seq * shape.micro_batch
    scan = chunked_scan(hw, shape.micro_batch, shape.seq, heads, rec.key_dim, rec.value_dim, chunk)
    scan_bwd = chunked_scan(hw, shape.micro_batch, shape.seq, heads, rec.key_dim, rec.value_dim, chunk,
                                backward=True)
    checkpoints = shape.micro_batch * -(-shape.seq // chunk) * heads * rec.key_dim * rec.value_dim * STATE_BYTES
    add((_compute("scan", scan, seq * width * el + checkpoints), (_compute("scan.bwd", scan_bwd),)))
    out = T * width * el
    add(_pointwise_ops(hw, "gated_norm", 2 * out, out, 2 * out))
    return _gemm_ops(hw, "out_proj", T, h, width, out, accumulate=shape.grad_accumulate)


def _mlp(model, hw, shape, add, enter_tp, leave_tp, fwd, bwd, T_norm):
    t, T, h = shape.tp, shape.tokens, model.hidden
    gated = model.activation == "swiglu"
    width = 2 if gated else 1
    if model.moe is None or model.moe.shared_expert_ffn_hidden:
        ffn = (model.moe.shared_expert_ffn_hidden if model.moe else model.ffn_hidden) // t
        enter_tp("mlp", _gemm_ops(hw, "mlp_up", T, ffn * width, h, T_norm * h * gemm_input_bytes(hw),
                                     accumulate=shape.grad_accumulate))
        _activation(hw, add, "mlp", T * ffn, gated)
        down = _gemm_ops(hw, "mlp_down", T, h, ffn, T * ffn * gemm_input_bytes(hw), accumulate=shape.grad_accumulate)
        add(down)
        leave_tp("mlp", down)
    if model.moe is not None:
        _experts(model, hw, shape, add, fwd, bwd, T_norm)


def _activation(hw, add, tag, elements, gated):
    act_in = elements * hw.act_bytes
    if gated:
        add(_pointwise_ops(hw, f"{tag}.swiglu", 2 * act_in, act_in, 2 * act_in))
    else:
        add(_pointwise_ops(hw, f"{tag}.gelu", act_in, act_in, act_in))


def routed_rows(model: ModelSpec, tokens: int) -> float:
    """Token copies a rank sends to experts: top_k per token, fewer when token-drop routing
    caps each expert at capacity_factor times its fair share (a factor below one drops that
    fraction; at one or above, balanced routing keeps every copy)."""
    moe = model.moe
    kept = min(1.0, moe.capacity_factor) if moe.capacity_factor > 0 else 1.0
    return tokens * moe.top_k * kept


# Small kernels Megatron-Core (core_v0.10, the token-drop TopKRouter with its aux loss and the
# alltoall dispatcher, unfused) launches per MoE layer on the [tokens, experts] routing tensors
# and the split counts, counted in its source: forward, the top-k softmax with capacity (17:
# top-k, softmax, the probability and map scatters, the per-expert top-k over tokens, their
# masks), the aux loss and its tracker (7), the dispatcher's split counts and their copies to
# the host (14), the index builds of permute and unpermute (9); backward, their gradients (20).
ROUTING_KERNELS = (47, 20)
# Element sizes of what autograd keeps from that routing and permutation besides activations:
# token indices are int64 (torch.topk's indices, and permute's masked_select over an arange),
# routing maps bool.
INDEX_BYTES = 8
MASK_BYTES = 1


def _experts(model, hw, shape, add, fwd, bwd, T_norm):
    """Megatron-Core's all-to-all token dispatcher with expert tensor parallelism: each rank
    routes the tokens it holds (its sequence-parallel share), permutes their top-k copies by
    expert, sends them over the EP group, gathers them across the ETP group, sorts them by
    local expert, runs its local experts' GEMMs (FFN split by etp), and undoes all of it:
    sort back, reduce-scatter over ETP, send back, unpermute (weighting by the router's
    probabilities and summing each token's copies). For backward, besides the GEMM and
    activation inputs, the routing and the permutations keep what routing_saved_bytes,
    permute and unpermute_saved_bytes say; the all-to-alls, the ETP all-gather and the chunk
    sorts keep nothing (their gradients need only the split sizes), so their outputs are freed
    once consumed."""
    moe, el, h = model.moe, hw.act_bytes, model.hidden
    etp = shape.etp or shape.tp
    etp_axis = "tp" if etp == shape.tp else "etp"
    gated = model.activation == "swiglu"
    local_experts = moe.experts // shape.ep
    sent = routed_rows(model, T_norm)
    # Without sequence parallelism every TP rank holds all the tokens (tensor-parallel inference
    # engines' MoE): with etp = tp each runs its share of every expert's FFN on all of them, no
    # ETP gather, and the partial outputs are all-reduced over TP as after a row-parallel GEMM.
    replicated = etp > 1 and etp == shape.tp and not shape.sp
    received = sent if replicated else sent * etp  # balanced routing: as many rows received as sent, per ETP peer
    rows = max(1, round(received / local_experts))
    ffn = moe.expert_ffn_hidden // etp
    add(_gemm_ops(hw, "router", T_norm, moe.experts, h, T_norm * h * el, accumulate=shape.grad_accumulate))
    add(_routing_ops(hw, routing_saved_bytes(moe, T_norm)))
    add(_permute_ops(hw, T_norm * h * el, sent * h * el, sent * INDEX_BYTES))
    a2a = sent * h * el
    outer = node_limited_share(moe)
    if shape.ep > 1:
        fwd.append(replace(_comm("moe.dispatch", "all_to_all", "ep", a2a), outer_share=outer))
        bwd.append((replace(_comm("moe.dispatch.bwd", "all_to_all", "ep", a2a), outer_share=outer),))
    if etp > 1 and not replicated:
        fwd.append(_comm("moe.etp_allgather", "all_gather", etp_axis, received * h * el))
        bwd.append((_comm("moe.etp_reducescatter.bwd", "reduce_scatter", etp_axis, received * h * el),))
    if local_experts > 1:
        add(_copy_ops(hw, "moe.sort_chunks", received * h * el))
    gin = gemm_input_bytes(hw)
    add(_gemm_ops(hw, "expert_up", rows, ffn * (2 if gated else 1), h, received * h * gin,
                  batch=local_experts, accumulate=shape.grad_accumulate))
    _activation(hw, add, "experts", rows * local_experts * ffn, gated)
    add(_gemm_ops(hw, "expert_down", rows, h, ffn, rows * local_experts * ffn * gin,
                  batch=local_experts, accumulate=shape.grad_accumulate))
    if local_experts > 1:
        add(_copy_ops(hw, "moe.unsort_chunks", received * h * el))
    if etp > 1 and not replicated:
        fwd.append(_comm("moe.etp_reducescatter", "reduce_scatter", etp_axis, received * h * el))
        bwd.append((_comm("moe.etp_allgather.bwd", "all_gather", etp_axis, received * h * el),))
    if shape.ep > 1:
        fwd.append(replace(_comm("moe.combine", "all_to_all", "ep", a2a), outer_share=outer))
        bwd.append((replace(_comm("moe.combine.bwd", "all_to_all", "ep", a2a), outer_share=outer),))
    add(_unpermute_ops(hw, T_norm * h * el, sent * h * el, unpermute_saved_bytes(moe, T_norm, sent, h, el)))
    if replicated:
        fwd.append(_comm("moe.allreduce", "all_reduce", "tp", T_norm * h * el))
        bwd.append((_comm("moe.allreduce.bwd", "all_reduce", "tp", T_norm * h * el),))


def node_limited_share(moe) -> float:
    """Share of a token's top_k expert copies that cross nodes under group-limited routing
    (DeepSeek-V3: 8 groups, one per node of its EP group, a token's experts in at most 4):
    one copy per node reached, groups_per_token of them, instead of top_k; 1 without a limit."""
    if not moe.groups_per_token:
        return 1.0
    return min(1.0, moe.groups_per_token / moe.top_k)


def ranks_per_token(moe, ep: int) -> float:
    """EP ranks a token's top_k experts land on, expected under balanced routing (experts split
    evenly, a token's drawn without replacement): the copies an all-to-all that sends a token
    once per destination rank (DeepEP's normal dispatch, TensorRT-LLM's wide-EP all-to-all)
    moves, against top_k for one that sends a copy per expert."""
    local = max(1, moe.experts // ep)
    missed = 1.0
    for i in range(moe.top_k):
        missed *= max(0.0, (moe.experts - local - i) / (moe.experts - i))
    return min(float(moe.top_k), ep * (1.0 - missed))


def routing_saved_bytes(moe, tokens: float) -> float:
    """What the top-k router (core_v0.10 moe_utils.topk_softmax_with_capacity with the aux loss)
    keeps per MoE layer for backward: the aux loss's FP32 softmax over all experts, the top-k
    indices (for topk's and scatter's gradients) and the FP32 top-k softmax, and under a
    capacity the kept-copy mask the probabilities are multiplied by."""
    fp32 = DTYPE_BYTES["fp32"]
    capacity_mask = moe.experts * MASK_BYTES if moe.capacity_factor > 0 else 0
    return tokens * (moe.experts * fp32 + moe.top_k * (INDEX_BYTES + fp32) + capacity_mask)


def unpermute_saved_bytes(moe, tokens: float, copies: float, hidden: int, el: int) -> float:
    """What unpermute keeps: the token copies back from the experts, for the probabilities'
    gradient, and those probabilities, for the copies' gradient (the weighting multiply keeps
    both), and what masked_select, which picks the probabilities, keeps: its input (the
    probabilities transposed to experts x tokens) and the transposed routing map."""
    return copies * (hidden + 1) * el + tokens * moe.experts * (el + MASK_BYTES)


def _routing_ops(hw, saved_bytes: float):
    """The router's and dispatcher's bookkeeping kernels (ROUTING_KERNELS): launch-bound, on
    tensors of tokens x experts elements."""
    forward, backward = ROUTING_KERNELS
    one = ops.pointwise(hw, 0.0)
    return (_compute("moe.routing", _plus(*[one] * forward), saved_bytes),
            (_compute("moe.routing.bwd", _plus(*[one] * backward)),))


def _permute_ops(hw, token_bytes, copy_bytes, index_bytes):
    """permute: gather each token's top-k copies into expert order (read and write the
    copies), keeping only the gather's int64 indices (unpermute's scatter-add reuses them);
    backward, scatter-add the copies' gradients into zeroed token gradients."""
    return (_compute("moe.permute", ops.pointwise(hw, 2 * copy_bytes), index_bytes),
            (_compute("moe.permute.bwd", ops.pointwise(hw, 2 * copy_bytes + token_bytes)),))


def _copy_ops(hw, name, copy_bytes):
    """sort_chunks_by_idxs: the received rows regrouped by local expert (split and cat), a copy
    each way."""
    return (_compute(name, ops.pointwise(hw, 2 * copy_bytes)),
            (_compute(name + ".bwd", ops.pointwise(hw, 2 * copy_bytes)),))


def _unpermute_ops(hw, token_bytes, copy_bytes, saved_bytes):
    """unpermute: weight the copies by their routing probabilities (read, write) and
    scatter-add them into zeroed tokens (read, accumulate); backward, gather the token
    gradients back to the copies, weight them, and reduce gradient times copy over hidden for
    the probabilities' gradient."""
    forward = ops.pointwise(hw, 4 * copy_bytes + token_bytes)
    return (_compute("moe.unpermute", forward, saved_bytes),
            (_compute("moe.unpermute.bwd", ops.pointwise(hw, 6 * copy_bytes)),))


def decode_context(model: ModelSpec, context: int) -> int:
    """Tokens one decode step's attention reads at `context` tokens: all of them, the last
    `window` (sliding window), those of the current chunk (chunked attention), or DeepSeek
    sparse attention's index_topk."""
    if model.window:
        return min(model.window, context)
    if model.chunk:
        return (context - 1) % model.chunk + 1
    if model.mla is not None and model.mla.index_topk:
        return min(model.mla.index_topk, context)
    return context


@lru_cache(maxsize=16384)
def build_decode_layer(model: ModelSpec, hw: HardwareSpec, batch: int, context: int, tp: int,
                       kv_bytes: float, ep: int = 1, dispatched: int = 0, mla_engine: str = "") -> tuple:
    """One layer of one decode step (a single new token per sequence) on one rank,
    reading a KV cache of `context` tokens stored at `kv_bytes` per element (its window's or
    chunk's share under sliding or chunked attention, decode_context; a fixed state for linear
    attention and Mamba). `ep` of the tp ranks split the routed experts between them (each
    expert over tp / ep GPUs), a rank running its experts' share of the `batch` tokens' expert
    copies; the rank's own `dispatched` tokens (attention data parallelism) travel to their
    experts' ranks and back by all-to-all, once per rank they reach (ranks_per_token), as the
    serving engines' dispatch sends them, else every rank holds all the tokens and the
    experts' partial outputs are summed by the all-reduce over tp. MLA's decode attention runs
    `mla_engine`'s kernel where the preset fits one (ops.mla.mla_decode)."""
    if not model.uniform:
        raise ValueError(f"{model.name}: its layers differ; build each spec of model.layer_groups()")
    el = hw.act_bytes
    h = model.hidden
    row = batch * h * el
    # weights stored narrower than the compute dtype are read so (the layers' and the experts')
    dense = narrower_weight_bytes(model.weight_dtype, hw.dtype)
    out = []
    if model.mixer != "none":
        out.append(_compute("norm1", ops.pointwise(hw, 2 * row)))
        if model.mixer != "attention":
            out.extend(_decode_recurrent(model, hw, batch, tp, dense))
        elif model.mla is not None:
            out.extend(_decode_mla(model, hw, batch, decode_context(model, context), context, tp, kv_bytes, dense,
                                   mla_engine))
        else:
            out.extend(_decode_gqa(model, hw, batch, decode_context(model, context), tp, kv_bytes, dense))
        if tp > 1:
            out.append(_comm("attn.allreduce", "all_reduce", "tp", row))
        out.append(_compute("residual1", ops.pointwise(hw, 3 * row)))
    if model.moe is None and not model.ffn_hidden:
        return tuple(out)
    # with attention data parallelism a rank normalizes, routes and runs the shared expert (its
    # weights whole on every rank) on its own tokens; only the FFN proper sees every rank's tokens
    own = dispatched or batch
    own_row = own * h * el
    out.append(_compute("norm2", ops.pointwise(hw, 2 * own_row)))
    gated = model.activation == "swiglu"
    width = 2 if gated else 1
    if model.moe is not None and model.moe.shared_expert_ffn_hidden:
        shared = model.moe.shared_expert_ffn_hidden // (1 if dispatched else tp)
        out.append(_compute("shared_up", ops.gemm(hw, own, shared * width, h, weight_bytes=dense)))
        out.append(_compute("shared_activation", ops.pointwise(hw, (3 if gated else 2) * own * shared * el)))
        out.append(_compute("shared_down", ops.gemm(hw, own, h, shared, weight_bytes=dense)))
    if model.moe is None:
        ffn, rows, experts = model.ffn_hidden // tp, batch, 1
    else:
        etp = max(1, tp // ep)
        ffn = model.moe.expert_ffn_hidden // etp
        routed = -(-batch * model.moe.top_k // ep)  # expert copies of the tokens this rank's experts take
        experts = min(model.moe.experts // ep, routed)  # experts a step's tokens actually touch
        rows = -(-routed // experts)
        out.append(_compute("router", ops.gemm(hw, own, model.moe.experts, h, dtype=hw.act_dtype)))
    a2a = dispatched * ranks_per_token(model.moe, ep) * h * el if model.moe is not None and ep > 1 and dispatched else 0
    if a2a:
        out.append(replace(_comm("moe.dispatch", "all_to_all", "ep", a2a), outer_share=node_limited_share(model.moe)))
    stored = narrower_weight_bytes(model.expert_format, hw.dtype) if model.moe else dense
    out.append(_compute("mlp_up", ops.gemm(hw, rows, ffn * width, h, experts, weight_bytes=stored)))
    act = rows * experts * ffn * el
    out.append(_compute("activation", ops.pointwise(hw, (3 if gated else 2) * act)))
    out.append(_compute("mlp_down", ops.gemm(hw, rows, h, ffn, experts, weight_bytes=stored)))
    if a2a:
        out.append(replace(_comm("moe.combine", "all_to_all", "ep", a2a), outer_share=node_limited_share(model.moe)))
    if tp > 1 and not (a2a and ep == tp):
        out.append(_comm("mlp.allreduce", "all_reduce", "tp", row))
    out.append(_compute("residual2", ops.pointwise(hw, 3 * own_row)))
    return tuple(out)


def narrower_weight_bytes(weight_format: str, dtype: str) -> float:
    """Bytes per weight a GEMM in `dtype` reads from a checkpoint stored in `weight_format`
    (WEIGHT_FORMAT_BYTES, its block scales in), where narrower than the dtype's: the experts of
    gpt-oss (MXFP4) and Kimi-K2.5 (INT4), DeepSeek-V3's FP8 blocks in a BF16 engine, which the
    engines widen inside their kernels; else 0 (the dtype's own bytes). Decode and serving
    iterations read them so (build_decode_layer); the weight-absorbed MLA products keep the
    dtype's width, as the engines widen those weights once at load."""
    stored = WEIGHT_FORMAT_BYTES.get(weight_format, 0.0)
    return stored if 0 < stored < DTYPE_BYTES[dtype] else 0.0


def _decode_gqa(model, hw, batch, context, tp, kv_bytes, stored):
    el, h = hw.act_bytes, model.hidden
    w = gqa_widths(model, tp)
    heads, kv_heads, d, q_dim, kv_dim, gate, kv = w.heads, w.kv_heads, w.head_dim, w.q_dim, w.kv_dim, w.gate, w.kv
    out = [_compute("qkv", ops.gemm(hw, batch, w.projection, h, weight_bytes=stored))]
    if model.position_embedding == "rotary":
        out.append(_compute("rotary", ops.pointwise(hw, 2 * batch * (q_dim + kv_dim) * el)))
    out.append(_compute("kv_append", ops.pointwise(hw, batch * kv * (el + kv_bytes))))
    out.append(_compute("attention", ops.decode_attention(hw, batch, heads, kv_heads, context, d, kv_bytes)))
    if gate:
        out.append(_compute("attn_gate", ops.pointwise(hw, 3 * batch * q_dim * el)))
    out.append(_compute("attn_out", ops.gemm(hw, batch, h, q_dim, weight_bytes=stored)))
    return out


def _decode_mla(model, hw, batch, attended, context, tp, kv_bytes, stored, engine=""):
    """Weight-absorbed MLA decode (DeepSeek's inference, FlashMLA): the down-projections
    (every TP rank keeps the whole latent cache), the query's up-projection, the query's
    non-RoPE part absorbed into the latent space through each head's key up-projection, MQA
    over the cached latents, and the latent output taken back through each head's value
    up-projection before the output projection, the MQA by `engine`'s kernel where the preset
    fits one. DeepSeek sparse attention first scores every cached token with the indexer (its
    key cache is index_head_dim per token)."""
    mla, el, h = model.mla, hw.act_bytes, model.hidden
    heads = model.heads // tp
    q_in = mla.q_lora_rank or h
    out = [_compute("mla_down", ops.gemm(hw, batch, mla.q_lora_rank + mla.latent_dim, h, weight_bytes=stored)),
           _compute("q_up", ops.gemm(hw, batch, heads * mla.qk_head_dim, q_in, weight_bytes=stored)),
           _compute("rotary", ops.pointwise(hw, 2 * batch * (heads + 1) * mla.qk_rope_head_dim * el)),
           _compute("kv_append", ops.pointwise(hw, batch * mla.latent_dim * (el + kv_bytes))),
           _compute("absorb_k", ops.gemm(hw, batch, mla.kv_lora_rank, mla.qk_nope_head_dim, heads))]
    if mla.index_topk:
        index_heads = max(1, mla.index_heads // tp)
        out.append(_compute("indexer_proj", ops.gemm(hw, batch, index_heads * (mla.index_head_dim + 1)
                                                     + mla.index_head_dim, q_in)))
        out.append(_compute("indexer", ops.decode_attention(hw, batch, index_heads, 1, context,
                                                            mla.index_head_dim / 2, kv_bytes)))
    out.append(_compute("attention", mla_decode(hw, batch, heads, attended, mla.kv_lora_rank,
                                                mla.qk_rope_head_dim, kv_bytes, engine)))
    out.append(_compute("absorb_v", ops.gemm(hw, batch, mla.v_head_dim, mla.kv_lora_rank, heads)))
    out.append(_compute("attn_out", ops.gemm(hw, batch, h, heads * mla.v_head_dim, weight_bytes=stored)))
    return out


def _decode_recurrent(model, hw, batch, tp, stored):
    """One token through Gated DeltaNet or Mamba-2: projections, the convolution's step
    over its cached taps, the state update and readout, the gated norm."""
    rec, el, h = model.recurrent, hw.act_bytes, model.hidden
    heads, key_heads = rec.heads // tp, max(1, rec.key_heads // tp)
    conv = 2 * key_heads * rec.key_dim + heads * rec.value_dim
    width = heads * rec.value_dim
    gates = 2 * heads if rec.kind == "gated_deltanet" else heads
    return [_compute("in_proj", ops.gemm(hw, batch, conv + width + gates, h, weight_bytes=stored)),
            _compute("conv1d", ops.pointwise(hw, batch * conv * (rec.conv_kernel + 1) * el)),
            _compute("state_update", recurrent_step(hw, batch, heads, rec.key_dim, rec.value_dim)),
            _compute("gated_norm", ops.pointwise(hw, 3 * batch * width * el)),
            _compute("out_proj", ops.gemm(hw, batch, h, width, weight_bytes=stored))]
