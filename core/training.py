"""Analytical training-iteration time: per-stage micro-batch times from the layer graph,
exposed tensor/context/expert communication per network dimension, a pipeline schedule
(GPipe, 1F1B, interleaved 1F1B), data-parallel gradient traffic under ZeRO, and the
optimizer step."""
from dataclasses import dataclass
from functools import lru_cache

from . import ops
from .collectives import collective_time
from .graph import LayerGraph, LayerShape, build_layer
from .layout import group_spans, merge_spans
from .memory import GRAD_BYTES, WEIGHT_BYTES, stage_params
from .specs import DTYPE_BYTES, HardwareSpec, ModelSpec, Parallelism, TrainWorkload

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


def time_ops(hw: HardwareSpec, dims: tuple, spans: dict, op_list, skip_core: bool = False) -> PassTime:
    """Sum a sequence of ops: compute in full, communication as far as it is not hidden."""
    compute = flops = 0.0
    comm = {}
    for op in op_list:
        if op.kind == "compute":
            if skip_core and op.attention_core:
                continue
            compute += op.time_s
            flops += op.flops
            continue
        per_dim = collective_time(hw, dims, op.collective, op.bytes_, spans.get(op.axis, ()))
        total = sum(per_dim.values())
        if total <= 0:
            continue
        exposed = max(0.0, total - op.cover_s) / total
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


@lru_cache(maxsize=4096)
def edge_ops(model: ModelSpec, hw: HardwareSpec, tokens: int, tp: int) -> tuple:
    """(first-stage forward, first backward, last-stage forward, last backward) seconds: embedding, final
    norm, LM head and the cross-entropy loss."""
    el = DTYPE_BYTES[hw.dtype]
    h, vocab = model.hidden, model.vocab // tp
    embed_fwd = ops.pointwise(hw, tokens * h * el * 2).time_s
    embed_bwd = ops.pointwise(hw, tokens * h * (el + 4) * 2).time_s
    head = ops.gemm(hw, tokens, vocab, h)
    loss_bytes = tokens * vocab * 4 * 2
    last_fwd = ops.pointwise(hw, tokens * h * el * 2).time_s + head.time_s + ops.pointwise(hw, loss_bytes).time_s
    last_bwd = (ops.gemm(hw, tokens, h, vocab).time_s + ops.gemm(hw, h, vocab, tokens).time_s
                + ops.pointwise(hw, loss_bytes).time_s + ops.pointwise(hw, tokens * h * el * 3).time_s)
    return embed_fwd, embed_bwd, last_fwd, last_bwd


def train_step(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int):
    """(step seconds, breakdown dict, model FLOPs per step); memory is estimate_memory's job."""
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    micro = work.global_batch // (par.dp * par.micro_batch)
    seq = work.seq // par.cp
    shape = LayerShape(par.micro_batch, seq, work.seq, par.tp, par.sp, par.cp, par.ep)
    spans_key = tuple(sorted((axis, spans.get(axis, ())) for axis in ("tp", "cp", "ep")))
    prof = layer_profile(model, hw, dims, shape, spans_key, par.recompute)
    tokens = par.micro_batch * seq

    layers = model.layers // par.pp
    embed_fwd, embed_bwd, last_fwd, last_bwd = edge_ops(model, hw, tokens, par.tp)
    layer_compute = prof.forward.compute_s + prof.backward.compute_s + prof.recompute.compute_s
    layer_comm = {}
    for part in (prof.forward, prof.backward, prof.recompute):
        add_times(layer_comm, dict(part.comm_s))
    el = DTYPE_BYTES[hw.dtype]
    p2p = {}
    if par.pp > 1:
        message = tokens * model.hidden * el / par.tp  # scatter-gather across the TP ranks
        pp_span = spans["pp"][:1]
        one_way = collective_time(hw, dims, "send_recv", message, pp_span)
        add_times(p2p, one_way, 2.0 * par.virtual_stages)  # activation forward, gradient backward

    stage_compute = [layers * layer_compute for _ in range(par.pp)]
    stage_compute[0] += embed_fwd + embed_bwd
    stage_compute[-1] += last_fwd + last_bwd
    comm_per_mb = dict(layer_comm)
    for name in comm_per_mb:
        comm_per_mb[name] *= layers
    add_times(comm_per_mb, p2p)
    comm_total = sum(comm_per_mb.values())
    stage_time = [c + comm_total for c in stage_compute]
    slowest = max(range(par.pp), key=stage_time.__getitem__)
    v = par.virtual_stages
    bottleneck = stage_time[slowest]
    pipeline_s = (micro - 1) * bottleneck + sum(stage_time) / v + bottleneck * (1 - 1 / v)
    bubble_s = pipeline_s - micro * bottleneck

    breakdown = {"compute_s": micro * stage_compute[slowest], "bubble_s": bubble_s}
    comm = {name: micro * seconds for name, seconds in comm_per_mb.items()}
    dp_comm, dp_exposed = _data_parallel(model, hw, par, dims, spans, prof, micro, layers)
    add_times(comm, dp_exposed)
    optimizer_s = optimizer_step_s(model, hw, par)
    breakdown["optimizer_s"] = optimizer_s
    step_s = pipeline_s + sum(dp_exposed.values()) + optimizer_s
    breakdown.update({f"comm_{name}_s": seconds for name, seconds in comm.items()})
    breakdown["dp_comm_total_s"] = dp_comm

    return step_s, breakdown, model_flops(model, work)


def optimizer_step_s(model: ModelSpec, hw: HardwareSpec, par: Parallelism) -> float:
    """The Adam update of the most loaded stage's (ZeRO-sharded) parameters, bandwidth-bound."""
    shard = par.dp * par.cp if par.zero >= 1 else 1
    return ops.pointwise(hw, max(stage_params(model, par)) / shard * ADAM_BYTES_PER_PARAM).time_s


def model_flops(model: ModelSpec, work: TrainWorkload) -> float:
    """Model FLOPs of one iteration for MFU: 6 per parameter per token (the tied output
    layer counted again), plus 12 * layers * q_dim * seq per token for attention's two
    matmuls, scaled to the share of scores the kernel executes (about half for causal
    FlashAttention; the unfused kernel computes every score), so MFU stays <= 100 %."""
    executed = ops.causal_fraction(work.seq) if model.attention_kernel == "flash" else 1.0
    per_token = 6.0 * model.active_params() + 12.0 * model.layers * model.q_dim * work.seq * executed
    if model.tied_embeddings:
        per_token += 6.0 * model.vocab * model.hidden
    return per_token * work.global_batch * work.seq


def _data_parallel(model, hw, par, dims, spans, prof, micro, layers):
    """(total DP communication seconds, exposed seconds per dimension)."""
    if par.dp * par.cp == 1:
        return 0.0, {}
    span = merge_spans(spans.get("dp", ()), spans.get("cp", ()))
    params = max(stage_params(model, par))
    exposed = {}
    if par.zero >= 3:
        # Per layer and micro-batch: the forward gathers parameters while it runs; the backward
        # gathers them again and scatters gradients while it runs (recompute included). Tensor-
        # parallel traffic on other links proceeds meanwhile, so the whole pass is the cover.
        per_layer = params / layers
        gather = collective_time(hw, dims, "all_gather", per_layer * WEIGHT_BYTES, span)
        scatter = collective_time(hw, dims, "reduce_scatter", per_layer * GRAD_BYTES, span)
        overlap = hw.calibration.dp_overlap
        forward_cover = overlap * prof.forward.total_s
        backward_cover = overlap * (prof.backward.total_s + prof.recompute.total_s)
        forward_total = sum(gather.values())
        backward = {}
        add_times(backward, gather)
        add_times(backward, scatter)
        backward_total = sum(backward.values())
        scale = micro * layers
        add_times(exposed, gather, scale * max(0.0, forward_total - forward_cover) / forward_total)
        add_times(exposed, backward, scale * max(0.0, backward_total - backward_cover) / backward_total)
        return scale * (forward_total + backward_total), exposed
    if par.zero == 0:
        reduce = collective_time(hw, dims, "all_reduce", params * GRAD_BYTES, span)
        regather = {}
    else:
        reduce = collective_time(hw, dims, "reduce_scatter", params * GRAD_BYTES, span)
        regather = collective_time(hw, dims, "all_gather", params * WEIGHT_BYTES, span)
    reduce_total = sum(reduce.values())
    cover = layers * (prof.backward.compute_s + prof.recompute.compute_s)
    hidden = min(reduce_total, hw.calibration.dp_overlap * cover)
    add_times(exposed, reduce, (reduce_total - hidden) / reduce_total if reduce_total else 0.0)
    add_times(exposed, regather)
    return reduce_total + sum(regather.values()), exposed
