"""Analytical training-iteration time: per-stage micro-batch times from the layer graph,
exposed tensor/context/expert communication per network dimension, a pipeline schedule
(GPipe, 1F1B, interleaved 1F1B), data-parallel gradient traffic under ZeRO, and the
optimizer step."""
import math
from dataclasses import dataclass
from functools import lru_cache

from . import ops
from .collectives import collective_time, engine_all_reduce_s
from .graph import LayerGraph, LayerShape, attended_keys, build_layer, train_shape
from .ops.recurrent import SCAN_CHUNK
from .layout import group_spans, merge_spans, micro_batches, pipeline_order, stage_groups, stage_layers
from . import memory
from .memory import expert_data_parallel, stage_param_parts
from .memo import on_fields
from .specs import LOW_PRECISION_DTYPES, HardwareSpec, ModelSpec, Parallelism, TrainWorkload

ADAM_BYTES_PER_PARAM = 30  # read fp32 master, moments and gradient; write them and the bf16 copy


@dataclass(frozen=True)
class PassTime:
    """One layer pass (forward, backward or recompute) for one micro-batch on one rank."""
    compute_s: float
    comm_s: tuple  # ((dimension name, exposed seconds), ...)
    flops: float

    @property
    def total_s(self) -> float:
        return self.compute_s + sum(s for _, s in self.comm_s)


def add_times(into: dict, times: dict, scale: float = 1.0) -> None:
    for name, seconds in times.items():
        into[name] = into.get(name, 0.0) + seconds * scale


def time_ops(hw: HardwareSpec, dims: tuple, spans: dict, op_list, skip_core: bool = False,
             allreduce_engine: str = "") -> PassTime:
    """Sum a sequence of ops: compute in full, communication as far as it is not hidden; the
    all-reduces of an inference engine (`allreduce_engine`) run its own kernel where it has one
    (engine_all_reduce_s)."""
    compute = flops = 0.0
    comm = {}
    for op in op_list:
        if op.kind == "compute":
            if skip_core and op.attention_core:
                continue
            compute += op.time_s
            flops += op.flops
            continue
        span = spans.get(op.axis, ())
        if allreduce_engine and op.collective == "all_reduce":
            per_dim = engine_all_reduce_s(hw, dims, allreduce_engine, op.bytes_, span)
        else:
            per_dim = collective_time(hw, dims, op.collective, op.bytes_, span, outer_share=op.outer_share)
        total = sum(per_dim.values())
        if total <= 0:
            continue
        exposed = max(op.min_exposed * total, total - op.cover_s) / total
        add_times(comm, per_dim, exposed)
    return PassTime(compute, tuple(sorted(comm.items())), flops)


@dataclass(frozen=True)
class LayerProfile:
    forward: PassTime
    backward: PassTime
    recompute: PassTime  # extra forward work re-run in backward
    graph: LayerGraph


@lru_cache(maxsize=8192)
def layer_profile(model: ModelSpec, hw: HardwareSpec, dims: tuple, shape: LayerShape,
                  spans_key: tuple, recompute: str) -> LayerProfile:
    spans = dict(spans_key)
    graph = build_layer(model, hw, shape)
    forward = time_ops(hw, dims, spans, graph.forward)
    backward = time_ops(hw, dims, spans, graph.backward)
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = time_ops(hw, dims, spans, [op for op in graph.forward if op.attention_core])
    else:
        again = PassTime(0.0, (), 0.0)
    return LayerProfile(forward, backward, again, graph)


@dataclass(frozen=True)
class StageProfile:
    """A pipeline stage's layers for one micro-batch: the sum of its layer kinds' passes,
    each kind costed once (layer_profile) and counted as often as the stage holds it."""
    forward: PassTime
    backward: PassTime
    recompute: PassTime
    layers: int


def _scaled(passes) -> PassTime:
    """Sum of (PassTime, count) pairs."""
    compute = flops = 0.0
    comm = {}
    for part, count in passes:
        compute += count * part.compute_s
        flops += count * part.flops
        add_times(comm, dict(part.comm_s), count)
    return PassTime(compute, tuple(sorted(comm.items())), flops)


@lru_cache(maxsize=4096)
def stage_profiles(model: ModelSpec, hw: HardwareSpec, dims: tuple, shape: LayerShape, spans_key: tuple,
                   recompute: str, par: Parallelism) -> tuple:
    """StageProfile of every pipeline stage (layout.stage_groups)."""
    out = []
    for groups in stage_groups(model, par):
        profs = [(layer_profile(spec, hw, dims, shape, spans_key, recompute), count) for spec, count in groups]
        out.append(StageProfile(_scaled((p.forward, n) for p, n in profs), _scaled((p.backward, n) for p, n in profs),
                                _scaled((p.recompute, n) for p, n in profs), sum(n for _, n in groups)))
    return tuple(out)


@lru_cache(maxsize=4096)
def edge_ops(model: ModelSpec, hw: HardwareSpec, tokens: int, tp: int) -> tuple:
    """(first-stage forward, first backward, last-stage forward, last backward) seconds: embedding, final
    norm, LM head and the cross-entropy loss; on the last stage also each MTP module's own work
    beside its transformer layer (mtp_edge_s)."""
    el = hw.act_bytes
    h, vocab = model.hidden, model.vocab // tp
    embed_fwd = ops.pointwise(hw, tokens * h * el * 2).time_s
    embed_bwd = ops.pointwise(hw, tokens * h * (el + 4) * 2).time_s
    head = ops.gemm(hw, tokens, vocab, h, dtype=hw.act_dtype)  # the output layer stays in BF16 under FP8
    loss_bytes = tokens * vocab * 4 * 2
    last_fwd = ops.pointwise(hw, tokens * h * el * 2).time_s + head.time_s + ops.pointwise(hw, loss_bytes).time_s
    last_bwd = (ops.gemm(hw, tokens, h, vocab, dtype=hw.act_dtype).time_s
                + ops.gemm(hw, h, vocab, tokens, dtype=hw.act_dtype, weights=False).time_s
                + ops.pointwise(hw, loss_bytes).time_s + ops.pointwise(hw, tokens * h * el * 3).time_s)
    if model.mtp_layers:
        mtp_fwd, mtp_bwd = mtp_edge_s(model, hw, tokens, tp)
        last_fwd += model.mtp_layers * (mtp_fwd + last_fwd)
        last_bwd += model.mtp_layers * (mtp_bwd + last_bwd)
    return embed_fwd, embed_bwd, last_fwd, last_bwd


def mtp_edge_s(model: ModelSpec, hw: HardwareSpec, tokens: int, tp: int) -> tuple:
    """(forward, backward) seconds of one MTP module's work beside its transformer layer and
    its own output layer and loss (which cost what the model's do, edge_ops): the next tokens'
    embedding lookup, the RMSNorms of it and of the hidden state, and the projection of their
    concatenation [2 hidden] back to hidden (column-parallel over tp), as Megatron-Core's
    MultiTokenPredictionLayer runs them."""
    el, h = hw.act_bytes, model.hidden
    lookup_and_norms = ops.pointwise(hw, tokens * h * el * 2).time_s + 2 * ops.pointwise(hw, tokens * h * el * 2).time_s
    forward = lookup_and_norms + ops.gemm(hw, tokens, h // tp, 2 * h).time_s
    backward = (ops.gemm(hw, tokens, 2 * h, h // tp).time_s + ops.gemm(hw, 2 * h, h // tp, tokens, weights=False).time_s
                + ops.pointwise(hw, tokens * h * (el + 4) * 2).time_s + 2 * ops.pointwise(hw, tokens * h * el * 3).time_s)
    return forward, backward


# The layout fields a step's pipeline reads (its layer shape and groups, stages, schedule and
# sends): not the ZeRO stage, the data-parallel overlaps or the optimizer's buffers, which only
# data_parallel and optimizer_step_s see.
PIPELINE_FIELDS = ("dp", "tp", "pp", "cp", "ep", "sp", "micro_batch", "recompute", "schedule", "virtual_stages",
                   "placement", "etp", "first_stage_layers", "last_stage_layers", "overlap_tp_comm",
                   "overlap_p2p_comm", "grad_dtype", "grad_accumulation_fusion")


def train_step(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int):
    """(step seconds, breakdown dict, model FLOPs per step); memory is estimate_memory's job."""
    (dims, micro, split, stage_compute, slowest, pipeline_s, bubble_s, pipe_comm, stage_forward,
     stage_backward) = _pipeline(model, hw, par, work, gpus)
    breakdown = {"compute_s": micro * stage_compute[slowest], "bubble_s": bubble_s}
    comm = dict(pipe_comm)
    dp_comm, dp_exposed = data_parallel(model, hw, par, dims, stage_forward, stage_backward, split, micro)
    add_times(comm, dp_exposed)
    amax = amax_sync(model, hw, par, work, gpus)
    add_times(comm, amax)
    optimizer_s = optimizer_step_s(model, hw, par)
    breakdown["optimizer_s"] = optimizer_s
    step_s = pipeline_s + sum(dp_exposed.values()) + sum(amax.values()) + optimizer_s
    breakdown.update({f"comm_{name}_s": seconds for name, seconds in comm.items()})
    breakdown["dp_comm_total_s"] = dp_comm

    return step_s, breakdown, model_flops(model, work)


@on_fields(*PIPELINE_FIELDS)
def _pipeline(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int) -> tuple:
    """The step up to its data-parallel traffic and optimizer: (dims, micro-batches,
    layers per stage, each stage's compute per micro-batch, the slowest stage, pipeline and
    bubble seconds, the slowest stage's exposed communication per dimension ((name, seconds),
    ...), each stage's forward and backward seconds per micro-batch). Shared by the layouts
    that differ only in what data_parallel and optimizer_step_s read."""
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    micro = micro_batches(par, work)
    shape = train_shape(par, work)
    spans_key = tuple(sorted((axis, spans.get(axis, ())) for axis in ("tp", "cp", "ep", "etp")))
    tokens = shape.tokens
    split = stage_layers(model.layers, par)
    if model.uniform:
        prof = layer_profile(model, hw, dims, shape, spans_key, par.recompute)
        layer_comm = {}
        for part in (prof.forward, prof.backward, prof.recompute):
            add_times(layer_comm, dict(part.comm_s))
        layer_compute = prof.forward.compute_s + prof.backward.compute_s + prof.recompute.compute_s
        layer_comm_s = sum(layer_comm.values())
        stage_layer_compute = [layers * layer_compute for layers in split]
        stage_layer_comm = [layers * layer_comm_s for layers in split]
        forward_s, backward_s = prof.forward.total_s, prof.backward.total_s + prof.recompute.total_s
        stage_forward = [layers * forward_s for layers in split]
        stage_backward = [layers * backward_s for layers in split]
    else:
        stages = stage_profiles(model, hw, dims, shape, spans_key, par.recompute, par)
        comms = []
        for st in stages:
            comm = {}
            for part in (st.forward, st.backward, st.recompute):
                add_times(comm, dict(part.comm_s))
            comms.append(comm)
        stage_layer_compute = [st.forward.compute_s + st.backward.compute_s + st.recompute.compute_s for st in stages]
        stage_layer_comm = [sum(comm.values()) for comm in comms]
        stage_forward = [st.forward.total_s for st in stages]
        stage_backward = [st.backward.total_s + st.recompute.total_s for st in stages]

    embed_fwd, embed_bwd, last_fwd, last_bwd = edge_ops(model, hw, tokens, par.tp)
    p2p = {}
    if par.pp > 1:
        message = tokens * model.hidden * hw.act_bytes / par.tp  # scatter-gather across the TP ranks
        pp_span = spans["pp"][:1]
        one_way = collective_time(hw, dims, "send_recv", message, pp_span)
        exposed = 1.0
        if par.overlap_p2p_comm and par.virtual_stages > 1:
            # each send hides behind the next chunk's pass (the shortest stage's, forward)
            chunk_s = min(stage_forward) / par.virtual_stages
            exposed = _uncovered(sum(one_way.values()), chunk_s)
        add_times(p2p, one_way, 2.0 * par.virtual_stages * exposed)  # activation forward, gradient backward

    stage_compute = list(stage_layer_compute)
    stage_compute[0] += embed_fwd + embed_bwd
    stage_compute[-1] += last_fwd + last_bwd
    p2p_s = sum(p2p.values())
    stage_time = [c + comm + p2p_s for c, comm in zip(stage_compute, stage_layer_comm)]
    slowest = max(range(par.pp), key=stage_time.__getitem__)
    v = par.virtual_stages
    bottleneck = stage_time[slowest]
    if par.schedule == "1f1b" and stage_time[-1] < bottleneck:  # an earlier stage sets the pace
        forward = [f + p2p_s / 2 for f in stage_forward]  # with its sends
        forward[0] += embed_fwd
        forward[-1] += last_fwd
        pipeline_s = one_f_one_b_s(tuple(forward), tuple(stage_time), micro)
    else:
        pipeline_s = (micro - 1) * bottleneck + sum(stage_time) / v + bottleneck * (1 - 1 / v)
    bubble_s = pipeline_s - micro * bottleneck

    comm = {}
    if model.uniform:
        add_times(comm, layer_comm, micro * split[slowest])
    else:
        add_times(comm, comms[slowest], micro)
    add_times(comm, p2p, micro)
    return (dims, micro, split, tuple(stage_compute), slowest, pipeline_s, bubble_s, tuple(comm.items()),
            tuple(stage_forward), tuple(stage_backward))


# FP8 delayed scaling (Transformer Engine's DelayedScaling, the "hybrid" recipe of NeMo's and
# Megatron's FP8 runs) keeps an amax history per FP8 tensor and all-reduces the new amaxes over
# Megatron-Core's amax-reduction group (parallel_state.get_amax_reduction_group(
# with_context_parallel=True): a stage's tp x cp x dp ranks) when an fp8_autocast region exits,
# and the gradients' amaxes when its backward ends (FP8GlobalStateManager.
# reduce_and_update_fp8_tensors, "delayed scaling only", all_reduce with async_op=False, in
# transformer_engine/pytorch/fp8.py, quantization.py in later releases). Megatron-Core enters
# one region per model chunk per micro-batch (TransformerBlock.forward).
AMAX_FIELDS = ("dp", "tp", "pp", "cp", "placement", "virtual_stages", "micro_batch", "first_stage_layers",
               "last_stage_layers")
AMAX_BYTES_PER_LAYER = 4 * 3 * 4  # four GEMMs x (input, weight, gradient) amaxes x FP32


@on_fields(*AMAX_FIELDS)
def amax_sync(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int) -> dict:
    """Seconds per network dimension a step spends in delayed scaling's amax all-reduces (none
    under other recipes and dtypes): two per model chunk per micro-batch, each its latency over
    the amax-reduction group and, where the group spans n > 1 nodes, the wait for its latest
    rank (calibration.sync_skew_s x sqrt(2 ln n)) on the outermost dimension it crosses."""
    if hw.dtype != "fp8" or hw.recipe != "delayed":
        return {}
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    group = merge_spans(spans.get("tp", ()), spans.get("cp", ()), spans.get("dp", ()))
    if not group:
        return {}
    regions = 2 * micro_batches(par, work) * par.virtual_stages
    chunk_layers = max(stage_layers(model.layers, par)) / par.virtual_stages
    times = dict(collective_time(hw, dims, "all_reduce", AMAX_BYTES_PER_LAYER * chunk_layers, group))
    nodes = math.prod(count for index, count in group if index > 0)
    if nodes > 1:
        outer = dims[group[-1][0]].name
        times[outer] = times.get(outer, 0.0) + hw.calibration.sync_skew_s * math.sqrt(2 * math.log(nodes))
    return {name: regions * seconds for name, seconds in times.items()}


@lru_cache(maxsize=4096)
def one_f_one_b_s(forward: tuple, passes: tuple, micro: int) -> float:
    """Seconds of a 1F1B pipeline whose stages take `passes` seconds per micro-batch, `forward`
    of them forward, stepped through in each stage's order (layout.pipeline_order): a forward
    starts once the previous stage's forward of that micro-batch is done, a backward once the
    next stage's backward is. Used where a stage before the last is the slowest, where the
    closed form (micro - 1) * slowest + every stage runs up to 18 % long; within 0.15 % of the
    replayed schedule (which adds the transfers between stages), about 1 ms at 8 stages and
    64 micro-batches."""
    stages = len(passes)
    seconds = {"F": forward, "B": [p - f for p, f in zip(passes, forward)]}
    orders = [pipeline_order("1f1b", stages, 1, stage, micro) for stage in range(stages)]
    done = {}  # (stage, pass, micro-batch) -> end
    clock, position = [0.0] * stages, [0] * stages
    remaining = stages * 2 * micro
    while remaining:
        for stage in range(stages):
            while position[stage] < len(orders[stage]):
                kind, _, m = orders[stage][position[stage]]
                source = stage - 1 if kind == "F" else stage + 1
                ready = done.get((source, kind, m)) if 0 <= source < stages else 0.0
                if ready is None:
                    break
                clock[stage] = max(clock[stage], ready) + seconds[kind][stage]
                done[(stage, kind, m)] = clock[stage]
                position[stage] += 1
                remaining -= 1
    return max(clock)


# The layout fields the optimizer step reads: the stages' parameters and their shards.
OPTIMIZER_FIELDS = ("dp", "tp", "pp", "cp", "ep", "zero", "virtual_stages", "etp", "first_stage_layers",
                    "last_stage_layers", "grad_dtype", "fp8_params")


@on_fields(*OPTIMIZER_FIELDS)
def optimizer_step_s(model: ModelSpec, hw: HardwareSpec, par: Parallelism) -> float:
    """The Adam update of the most loaded stage's (ZeRO-sharded) parameters, bandwidth-bound,
    and the zeroing of the main-gradient buffer for the next step (Megatron's
    zero_grad_buffer: a write of the whole buffer, sharded only from ZeRO 2). Dense
    parameters shard over the dp*cp replicas, experts over their expert data-parallel ones."""
    adam = ops.pointwise(hw, _sharded_stage_params(model, par, par.zero >= 1) * ADAM_BYTES_PER_PARAM)
    zero_grads = ops.pointwise(hw, _sharded_stage_params(model, par, par.zero >= 2) * memory.grad_bytes(par))
    return adam.time_s + zero_grads.time_s + weight_quantize_s(model, hw, par)


def weight_quantize_s(model: ModelSpec, hw: HardwareSpec, par: Parallelism) -> float:
    """Transformer Engine's quantization of the updated weights, once per step (its copies are
    cached across micro-batches): read the working copy, write the quantized copies
    (memory.fp8_weight_bytes), after an amax pass where the recipe scales per tensor from the
    tensor itself (current; NVFP4's per-tensor scale). With fp8_params the optimizer writes the
    quantized weights and only the columnwise copy is made. ZeRO-3 quantizes each rank's shard."""
    if hw.dtype not in LOW_PRECISION_DTYPES:
        return 0.0
    params = _sharded_stage_params(model, par, par.zero >= 3)
    read = params * memory.weight_bytes(hw, par)
    cast = ops.pointwise(hw, read + params * memory.fp8_weight_bytes(hw, par)).time_s
    amax = ops.pointwise(hw, read).time_s if hw.recipe == "current" or hw.dtype == "nvfp4" else 0.0
    return cast + amax


def _sharded_stage_params(model: ModelSpec, par: Parallelism, sharded: bool) -> float:
    """The most loaded stage's parameters per rank, ZeRO-sharded or whole."""
    dense_shard, expert_shard = (par.dp * par.cp, expert_data_parallel(par)) if sharded else (1, 1)
    return max(dense / dense_shard + expert / expert_shard for dense, expert in stage_param_parts(model, par))


@lru_cache(maxsize=4096)  # asked once per point, the same for every layout
def model_flops(model: ModelSpec, work: TrainWorkload, score_share: float | None = None) -> float:
    """Model FLOPs of one iteration for MFU, as the kernels execute them: 6 per parameter per
    token outside the embedding tables, 6 * hidden * vocab for the output layer's matmul (tied
    or not), none for the input embedding (a table lookup; Megatron-LM's and NeMo's FLOP
    formulas leave it out too), plus 12 * layers * q_dim * seq per token for attention's two
    matmuls (seq: the document's length when a fused kernel packs documents), scaled to the
    share of scores the kernel executes (about half for causal FlashAttention; the unfused
    kernel computes every score of the whole sequence), so MFU stays <= 100 %.
    `score_share` replaces that share with a framework's convention (1 in NeMo's 2024 FLOP
    formulas, 0.5 in Megatron-LM's of 2025)."""
    fused = model.attention_kernel != "standard"
    attended = min(work.document or work.seq, work.seq) if fused else work.seq
    if score_share is None:
        score_share = ops.causal_fraction(attended) if fused else 1.0
    return _flops_per_token(model, attended, score_share) * work.global_batch * work.seq


@lru_cache(maxsize=4096)
def _flops_per_token(model: ModelSpec, seq: int, score_share: float) -> float:
    matmul_params = model.active_params() - model.embedding_params() - model.lm_head_params()
    output_layer = model.vocab * model.hidden
    if model.uniform and model.mixer == "attention" and model.mla is None and not (model.window or model.chunk):
        return 6.0 * (matmul_params + output_layer) + 12.0 * model.layers * model.q_dim * seq * score_share
    mixing = sum(count * _mixer_flops_per_token(spec, seq, score_share) for spec, count in model.layer_groups())
    return 6.0 * (matmul_params + output_layer) + mixing + _mtp_flops_per_token(model, seq, score_share)


def _mtp_flops_per_token(model: ModelSpec, seq: int, score_share: float) -> float:
    """The MTP modules' forward and backward FLOPs per token: each one's transformer layer (its
    active weights and its mixing), its 2 hidden -> hidden projection and its output layer, as
    Megatron-LM's num_floating_point_operations adds the projection and one more output layer
    per module (its norms' FLOPs are left out here, as for the model's own norms)."""
    if not model.mtp_layers:
        return 0.0
    last = model.layer_groups(model.layers - 1)[0][0]
    active = last.layer_params()
    if last.moe is not None:
        active -= (last.moe.experts - last.moe.top_k) * last.mlp_matrices * last.hidden * last.moe.expert_ffn_hidden
    per_module = (6.0 * (active + 2 * model.hidden * model.hidden + model.vocab * model.hidden)
                  + _mixer_flops_per_token(last, seq, score_share))
    return model.mtp_layers * per_module


def _mixer_flops_per_token(spec: ModelSpec, seq: int, score_share: float) -> float:
    """Forward and backward FLOPs per token of one layer's mixing beyond its weights: the two
    attention matmuls over the keys a query sees (the window's, the chunk's, DeepSeek sparse
    attention's top-k), or a recurrent mixer's chunked scan."""
    if spec.mixer == "none":
        return 0.0
    if spec.mixer != "attention":
        rec = spec.recurrent
        chunk = SCAN_CHUNK if rec.kind == "gated_deltanet" else 2 * SCAN_CHUNK
        return 3.0 * rec.heads * (2.0 * chunk * (rec.key_dim + rec.value_dim) + 6.0 * rec.key_dim * rec.value_dim)
    width = spec.heads * (spec.mla.qk_head_dim + spec.mla.v_head_dim) if spec.mla else 2 * spec.q_dim
    span = min(seq, spec.chunk) if spec.chunk else seq
    limit = spec.window or (spec.mla.index_topk if spec.mla else 0)
    keys = attended_keys(span, limit)
    if keys:
        attended = keys
    elif span != seq:  # causal within each chunk
        attended = span * ops.causal_fraction(span)
    else:
        attended = span * score_share
    return 6.0 * width * attended


def ddp_bucket_params(dp: int) -> float:
    """Megatron-Core's default gradient bucket: max(40M, 1M * dp) parameters."""
    return max(40e6, 1e6 * dp)


def data_parallel(model, hw, par, dims, stage_forward, stage_backward, split, micro) -> tuple:
    """(total DP communication seconds, exposed seconds per dimension) as the framework runs it.

    Dense parameters synchronise over the data-parallel (and context-parallel) group, expert
    parameters over the expert data-parallel group: Megatron-Core keeps expert gradients in
    buffers of their own and reduces them there (its DistributedDataParallel's expert-parallel
    buffers), so both collectives run, one after the other, on the DP communication stream.
    ZeRO-3 / FSDP prefetches each layer's parameters while the layer before runs
    (overlap_param_gather) and scatters its gradients during the backward (overlap_grad_reduce),
    so a layer's traffic hides behind its pass; with an overlap off, the pass waits for that traffic;
    with reshard_after_forward off it gathers each layer once per step, in the first
    micro-batch's forward, and keeps it for every later pass.
    Otherwise gradients are all-reduced (ZeRO 0) or reduce-scattered (ZeRO 1-2, the
    distributed optimizer, which then all-gathers the updated parameters):
    - without overlap (2021-era Megatron), after the pipeline drains, on every
      stage at once: fully exposed;
    - with overlap_grad_reduce, bucket by bucket while the last micro-batch's backward runs:
      what the backward cannot cover is exposed, and never less than the last bucket;
    - with overlap_param_gather, during the next step's first forward, likewise.
    Each rank starts as soon as its own pipeline work is done, and a later stage finishes its
    backward earlier (stage s by s of its backward chunks): that head start hides as much.
    The most exposed stage sets the step. `stage_forward` / `stage_backward`: each stage's
    layers' forward and backward (with recompute) seconds per micro-batch.
    The collectives come from _dp_syncs, shared by the layouts apart in what sets the passes'
    times or the overlaps; only how much of them the passes hide is worked out here."""
    syncs = _dp_syncs(model, hw, par, dims)
    if syncs is None:
        return 0.0, {}
    if par.zero >= 3:
        stage, gather, scatter, gather_s, scatter_s, unhidden = syncs
        # reshard_after_forward: every layer of every micro-batch gathers again, forward and
        # backward; kept gathered, each layer gathers once per step, in the first forward
        regather = par.reshard_after_forward
        hides_gather, hides_scatter = par.overlap_param_gather, par.overlap_grad_reduce
        # beside a layer's backward: the gather and what of the scatter can hide (each where its
        # overlap is on; off, the pass waits for it), one after the other
        behind_backward = _uncovered((gather_s if regather and hides_gather else 0.0)
                                     + ((1 - unhidden) * scatter_s if hides_scatter else 0.0),
                                     stage_backward[stage] / split[stage])
        scale = micro * split[stage]
        gathers = scale if regather else split[stage]
        exposed = {}
        forward_share = max(unhidden, _uncovered(gather_s, stage_forward[stage] / split[stage])) if hides_gather else 1.0
        add_times(exposed, gather, gathers * forward_share)
        if regather:
            add_times(exposed, gather, scale * (behind_backward if hides_gather else 1.0))
        add_times(exposed, scatter, scale * (unhidden + (1 - unhidden) * behind_backward if hides_scatter else 1.0))
        return gathers * gather_s * (2 if regather else 1) + scale * scatter_s, exposed
    worst = None
    for stage, layers, reduce, reduce_total, gather, gather_total, last_bucket, head_start in syncs:
        backward_s, forward_s = stage_backward[stage] / layers, stage_forward[stage] / layers  # per layer
        reduce_s = _exposed_overlapped(reduce_total, stage_backward[stage], last_bucket, head_start * backward_s,
                                       par.overlap_grad_reduce)
        gather_s = _exposed_overlapped(gather_total, stage_forward[stage], last_bucket, head_start * forward_s,
                                       par.overlap_param_gather)
        if worst is None or reduce_s + gather_s > worst[0]:
            worst = (reduce_s + gather_s, reduce, reduce_total, reduce_s, gather, gather_total, gather_s)
    _, reduce, reduce_total, reduce_s, gather, gather_total, gather_s = worst
    exposed = {}
    for times, total, seconds in ((reduce, reduce_total, reduce_s), (gather, gather_total, gather_s)):
        if total:
            add_times(exposed, times, seconds / total)
    return reduce_total + gather_total, exposed


# The layout fields data_parallel's collectives read (the groups, each stage's parameters and
# layers, the bytes per parameter, the ZeRO stage): not the overlaps, nor what sets the passes'
# times (micro-batch, recompute, schedule).
DP_SYNC_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "placement", "zero", "virtual_stages", "first_stage_layers",
                  "last_stage_layers", "grad_dtype", "fp8_params")


@on_fields(*DP_SYNC_FIELDS)
def _dp_syncs(model: ModelSpec, hw: HardwareSpec, par: Parallelism, dims: tuple):
    """data_parallel's collectives, none of them timed against a pass yet: None without a
    data-parallel group; under ZeRO 3 (the most loaded stage, its per-layer gather and
    scatter ((dimension, seconds) dicts), their totals, the unhidden share); else per stage
    unlike the earlier ones (stage, layers, gradient reduction, its total, parameter gather,
    its total, the last bucket's share, the stage's head start in layers)."""
    spans = group_spans(par, dims)
    dense_span = merge_spans(spans.get("dp", ()), spans.get("cp", ()))
    expert_span = spans.get("edp", ())
    if not dense_span and not expert_span:
        return None
    parts = stage_param_parts(model, par)
    split = stage_layers(model.layers, par)
    weight_bytes, gradient_bytes = memory.weight_bytes(hw, par), memory.grad_bytes(par)

    def sync(kind, dense, expert, bytes_per_param):
        return dict(_sync(hw, dims, kind, dense, expert, bytes_per_param, dense_span, expert_span))

    if par.zero >= 3:
        stage = max(range(par.pp), key=lambda s: sum(parts[s]))
        dense, expert = (count / split[stage] for count in parts[stage])
        gather = sync("all_gather", dense, expert, weight_bytes)
        scatter = sync("reduce_scatter", dense, expert, gradient_bytes)
        return stage, gather, scatter, sum(gather.values()), sum(scatter.values()), zero3_unhidden_share(split[stage])
    bucket = ddp_bucket_params(par.dp * par.cp)
    stages, seen = [], set()
    for stage, ((dense, expert), layers) in enumerate(zip(parts, split)):
        if (dense, expert, layers) in seen:  # an identical earlier stage has less head start
            continue
        seen.add((dense, expert, layers))
        kind = "all_reduce" if par.zero == 0 else "reduce_scatter"
        reduce = sync(kind, dense, expert, gradient_bytes)
        gather = sync("all_gather", dense, expert, weight_bytes) if par.zero else {}
        stages.append((stage, layers, reduce, sum(reduce.values()), gather, sum(gather.values()),
                       min(1.0, bucket / (dense + expert)), stage * layers / par.virtual_stages))
    return tuple(stages)


@lru_cache(maxsize=16384)
def _sync(hw: HardwareSpec, dims: tuple, kind: str, dense: float, expert: float, bytes_per_param: float,
          dense_span: tuple, expert_span: tuple) -> tuple:
    """((dimension, seconds), ...) of one data-parallel collective over the dense parameters'
    group and the experts' (memoized: layouts apart only in their overlaps share it)."""
    times = {}
    for params, span in ((dense, dense_span), (expert, expert_span)):
        if params:
            add_times(times, collective_time(hw, dims, kind, params * bytes_per_param, span))
    return tuple(times.items())


def zero3_unhidden_share(layers: int) -> float:
    """The share of each layer's ZeRO-3 parameter gather (forward) and gradient scatter
    (backward) that no compute hides: a pass's first gather has no layer before it to run
    behind, its last scatter none after it, so one layer's worth of each runs exposed per
    micro-batch, spread here over the pass's layers."""
    return 1.0 / layers


def _uncovered(comm_s: float, cover_s: float) -> float:
    """Fraction of a communication left exposed by `cover_s` of concurrent work."""
    return max(0.0, comm_s - cover_s) / comm_s if comm_s else 0.0


def _exposed_overlapped(total_s: float, cover_s: float, last_bucket: float, head_start_s: float,
                        overlap: bool) -> float:
    """Exposed seconds of bucketed DP traffic: all of it without overlap; with overlap, what
    the concurrent pass does not cover (at least the last bucket); either less the head
    start a later stage has (it finishes its backward, and starts its forward, earlier)."""
    exposed = max(total_s - cover_s, last_bucket * total_s) if overlap else total_s
    return max(0.0, exposed - head_start_s)
