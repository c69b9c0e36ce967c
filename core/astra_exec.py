"""Training iterations and inference requests replayed on the compiled network simulator.

`astra-hierarchical` replays one transformer layer's forward and backward passes on the
ranks of one pipeline stage, then a pipeline graph (stages x micro-batches, point-to-point
transfers, bucketed data-parallel gradients) whose stage work takes the layer times.
`astra-flattened` replays every op of every layer, micro-batch and rank in one graph."""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import ops
from .collectives import collective_time
from .graph import LayerShape, Op, build_layer
from .layout import group_spans
from .memory import GRAD_BYTES, WEIGHT_BYTES, stage_params, training_memory
from .network import astra_network, rank_groups
from .replay import CommClasses, TraceBuilder, compute_block, concat, frontier_increments, ops_block
from .specs import DTYPE_BYTES
from .training import ADAM_BYTES_PER_PARAM, _edge_ops
from .errors import SpecError

ASTRA_BACKENDS = ("astra-hierarchical", "astra-flattened")
STAGE_FWD, STAGE_BWD, WAIT, OPTIMIZER = -2, -3, -4, -5
DP_BUCKETS = 4  # gradient buckets the last backward pass is cut into


@dataclass(frozen=True)
class Context:
    """Everything a replay of one layout needs, resolved once."""
    model: object
    hw: object
    par: object
    gpus: int
    dims: tuple
    spans: dict
    groups: object
    network: object


def _context(model, hw, par, gpus) -> Context:
    if par.schedule == "interleaved":
        raise SpecError("", "schedule", "interleaved", "the astra backends replay gpipe and 1f1b schedules")
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    spans["dp"] = _merged(spans.get("dp", ()), spans.get("cp", ()))  # gradients reduce over dp*cp
    return Context(model, hw, par, gpus, dims, spans, rank_groups(par), astra_network(hw, gpus))


def _dim_shares(ctx: Context, classes: CommClasses) -> list:
    """For each communication class, the fraction of its time spent in each network dimension."""
    shares = []
    for axis, collective, bytes_ in classes.keys:
        span = ctx.spans["pp"][:1] if axis == "pp" else ctx.spans.get(axis, ())
        times = collective_time(ctx.hw, ctx.dims, collective, bytes_, span)
        total = sum(times.values())
        shares.append({name: t / total for name, t in times.items()} if total else {})
    return shares


def _merged(*spans) -> tuple:
    ranks = {}
    for span in spans:
        for index, count in span:
            ranks[index] = ranks.get(index, 1.0) * count
    return tuple(sorted(ranks.items()))


def _attribute(ctx, classes, result, node_rank, label, stage_split=None) -> tuple:
    """(breakdown of the critical rank's time, busiest links): each node is charged with how
    far it pushed that rank's finish time."""
    critical = int(np.argmax(result.rank_finish_s))
    order, increments = frontier_increments(node_rank, result.node_end_s, critical)
    labels = label[order]
    out = {"compute_s": float(increments[labels == 0].sum()), "bubble_s": float(increments[labels == WAIT].sum())}
    optimizer = float(increments[labels == OPTIMIZER].sum())
    if optimizer:
        out["optimizer_s"] = optimizer
    comm = {}
    for index, shares in enumerate(_dim_shares(ctx, classes)):
        spent = float(increments[labels == index + 1].sum())
        for name, share in shares.items():
            comm[name] = comm.get(name, 0.0) + spent * share
    if stage_split is not None:
        stage = int(ctx.groups.coords["pp"][critical])
        for code in (STAGE_FWD, STAGE_BWD):
            spent = float(increments[labels == code].sum())
            for key, share in stage_split[code][stage].items():
                if key == "compute_s":
                    out["compute_s"] += spent * share
                else:
                    comm[key] = comm.get(key, 0.0) + spent * share
    out.update({f"comm_{name}_s": seconds for name, seconds in comm.items()})
    return out, result.links.busiest(5)


def _stage_ranks(ctx: Context, stage: int) -> np.ndarray:
    return np.flatnonzero(ctx.groups.coords["pp"] == stage)


def _pp_stride(par) -> int:
    stride = 1
    for axis in par.placement:
        if axis == "pp":
            return stride
        stride *= {"tp": par.tp, "cp": par.cp, "dp": par.dp}[axis]
    return stride


def _layer_ops(ctx: Context, shape: LayerShape) -> tuple:
    """(forward ops, backward ops with their recompute in front) of one layer."""
    graph = build_layer(ctx.model, ctx.hw, shape)
    forward, backward = list(graph.forward), list(graph.backward)
    recompute = ctx.par.recompute
    if recompute == "full":
        backward = forward + backward
    elif recompute == "selective":
        backward = [op for op in forward if op.attention_core] + backward
    if ctx.par.zero >= 3:  # parameters gathered ahead of use, gradients scattered after
        per_layer = stage_params(ctx.model, ctx.par)[0] / (ctx.model.layers // ctx.par.pp)

        def gather(ops_list):
            return Op("zero3.param_allgather", "comm", collective="all_gather", axis="dp",
                      bytes_=per_layer * WEIGHT_BYTES, cover_s=sum(op.time_s for op in ops_list))
        scatter = Op("zero3.grad_reducescatter", "comm", collective="reduce_scatter", axis="dp",
                     bytes_=per_layer * GRAD_BYTES)
        forward, backward = [gather(forward)] + forward, [gather(backward)] + backward + [scatter]
    return forward, backward


def _replay_layer(ctx: Context, ops_list) -> dict:
    """One layer pass on every rank of the first stage: {"time_s", "compute_s", dims...}."""
    classes = CommClasses()
    block = ops_block(ops_list, ctx.hw, ctx.dims, ctx.spans, classes)
    builder = TraceBuilder(ctx.groups)
    for rank in _stage_ranks(ctx, 0):
        builder.place(int(rank), block, ())
    trace, node_rank, label = builder.build()
    result = ctx.network.replay(trace)
    parts, _ = _attribute(ctx, classes, result, node_rank, label)
    parts.pop("bubble_s")
    parts["time_s"] = float(result.time_s)
    return parts


def _schedule(par, stage: int, micro: int) -> list:
    """(pass, micro-batch) in the order one stage runs them."""
    if par.schedule == "gpipe":
        return [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    warmup = min(par.pp - stage - 1, micro)
    order = [("F", m) for m in range(warmup)]
    for i in range(micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", m) for m in range(micro - warmup, micro)]


@dataclass(frozen=True)
class StageWork:
    """Per-stage blocks for each pass, and how to split a pass's time for the breakdown."""
    forward: list
    backward: list  # per stage: list of sub-blocks; gradient buckets follow each on the last pass
    bucket_bytes: list  # per stage: gradient bytes after each backward sub-block
    split: dict


def _pipeline(ctx: Context, work: StageWork, micro: int, message_bytes: float, classes: CommClasses):
    """Replays the pipeline: every rank's schedule with transfers between stages and the
    data-parallel gradient synchronisation overlapping the last backward pass."""
    par = ctx.par
    builder = TraceBuilder(ctx.groups)
    stride = _pp_stride(par)
    p2p_label = classes.label("pp", "send_recv", message_bytes)
    dp_buckets = par.dp * par.cp > 1 and par.zero <= 2
    optimizer_s = _optimizer_s(ctx)
    for rank in range(ctx.gpus):
        stage = int(ctx.groups.coords["pp"][rank])
        last = ()
        for kind, m in _schedule(par, stage, micro):
            forward = kind == "F"
            source = stage - 1 if forward else stage + 1
            if 0 <= source < par.pp:
                peer = rank + (source - stage) * stride
                last = (builder.p2p(rank, 2, peer, message_bytes, 2 * m + (0 if forward else 1), last, WAIT),)
            if forward:
                last = tuple(builder.place(rank, work.forward[stage], last))
            else:
                final = m == _schedule(par, stage, micro)[-1][1]
                buckets = []
                for piece, bucket in zip(work.backward[stage], work.bucket_bytes[stage]):
                    last = tuple(builder.place(rank, piece, last))
                    if final and dp_buckets:
                        kind_ = "all_reduce" if par.zero == 0 else "reduce_scatter"
                        buckets += list(builder.place(rank, _comm_block(ctx, "dp", kind_, bucket, classes), last))
                if final:
                    last = tuple(builder.place(rank, compute_block(optimizer_s, OPTIMIZER), last + tuple(buckets)))
                    if dp_buckets and par.zero >= 1:
                        params = sum(work.bucket_bytes[stage]) / GRAD_BYTES * WEIGHT_BYTES
                        last = tuple(builder.place(rank, _comm_block(ctx, "dp", "all_gather", params, classes), last))
            target = stage + 1 if forward else stage - 1
            if 0 <= target < par.pp:
                builder.p2p(rank, 1, rank + (target - stage) * stride, message_bytes,
                            2 * m + (0 if forward else 1), last, p2p_label)
    trace, node_rank, label = builder.build()
    result = ctx.network.replay(trace)
    return _attribute(ctx, classes, result, node_rank, label, work.split), float(result.time_s)


def _comm_block(ctx, axis, collective, bytes_, classes):
    return ops_block([Op(f"{axis}.{collective}", "comm", collective=collective, axis=axis, bytes_=bytes_)],
                     ctx.hw, ctx.dims, ctx.spans, classes)


def _optimizer_s(ctx: Context) -> float:
    params = max(stage_params(ctx.model, ctx.par))
    shard = ctx.par.dp * ctx.par.cp if ctx.par.zero >= 1 else 1
    return ops.pointwise(ctx.hw, params / shard * ADAM_BYTES_PER_PARAM).time_s


def _edges(ctx, tokens) -> tuple:
    """Per stage: extra (forward, backward) compute for embedding and LM head."""
    embed_f, embed_b, last_f, last_b = _edge_ops(ctx.model, ctx.hw, tokens, ctx.par.tp)
    extra = [[0.0, 0.0] for _ in range(ctx.par.pp)]
    extra[0][0] += embed_f
    extra[0][1] += embed_b
    extra[-1][0] += last_f
    extra[-1][1] += last_b
    return extra


def _gradient_buckets(ctx, pieces: int) -> list:
    return [[params * GRAD_BYTES / pieces] * pieces for params in stage_params(ctx.model, ctx.par)]


def train_step_astra(model, hw, par, work, gpus, backend: str):
    """(step seconds, breakdown, memory, model FLOPs, busiest links) from a replay."""
    ctx = _context(model, hw, par, gpus)
    micro = work.global_batch // (par.dp * par.micro_batch)
    seq = work.seq // par.cp
    shape = LayerShape(par.micro_batch, seq, work.seq, par.tp, par.sp, par.cp, par.ep)
    tokens = par.micro_batch * seq
    layers = model.layers // par.pp
    memory = training_memory(model, hw, par, build_layer(model, hw, shape), micro, tokens)
    forward_ops, backward_ops = _layer_ops(ctx, shape)
    edges = _edges(ctx, tokens)
    classes = CommClasses()
    if backend == "astra-hierarchical":
        stage_work = _hierarchical_work(ctx, forward_ops, backward_ops, edges, layers)
    else:
        stage_work = _flattened_work(ctx, forward_ops, backward_ops, edges, layers, classes)
    message = tokens * model.hidden * DTYPE_BYTES[hw.dtype] / par.tp
    (breakdown, links), step_s = _pipeline(ctx, stage_work, micro, message, classes)
    flops_per_token = 6.0 * model.active_params() + 12.0 * model.layers * model.hidden * work.seq
    if model.tied_embeddings:
        flops_per_token += 6.0 * model.vocab * model.hidden
    return step_s, breakdown, memory, flops_per_token * work.global_batch * work.seq, links


def _hierarchical_work(ctx, forward_ops, backward_ops, edges, layers):
    fwd = _replay_layer(ctx, forward_ops)
    bwd = _replay_layer(ctx, backward_ops)
    forward, backward, split = [], [], {STAGE_FWD: [], STAGE_BWD: []}
    pieces = min(DP_BUCKETS, layers)
    for stage in range(ctx.par.pp):
        f_s = layers * fwd["time_s"] + edges[stage][0]
        b_s = layers * bwd["time_s"] + edges[stage][1]
        forward.append(compute_block(f_s, STAGE_FWD))
        backward.append([compute_block(b_s / pieces, STAGE_BWD)] * pieces)
        split[STAGE_FWD].append(_shares(fwd, layers, edges[stage][0], f_s))
        split[STAGE_BWD].append(_shares(bwd, layers, edges[stage][1], b_s))
    return StageWork(forward, backward, _gradient_buckets(ctx, pieces), split)


def _shares(layer: dict, layers: int, edge_s: float, total_s: float) -> dict:
    """How a stage pass's time divides into compute and each dimension's exposed comm."""
    shares = {key.removeprefix("comm_").removesuffix("_s"): layers * v / total_s
              for key, v in layer.items() if key.startswith("comm_")}
    shares["compute_s"] = 1.0 - sum(shares.values())
    return shares


def _flattened_work(ctx, forward_ops, backward_ops, edges, layers, classes):
    fwd_layer = ops_block(forward_ops, ctx.hw, ctx.dims, ctx.spans, classes)
    bwd_layer = ops_block(backward_ops, ctx.hw, ctx.dims, ctx.spans, classes)
    fwd_stack = fwd_layer.repeated(layers)
    pieces = min(DP_BUCKETS, layers)
    bucket_layers = [len(chunk) for chunk in np.array_split(np.arange(layers), pieces)]
    forward, backward = [], []
    for stage in range(ctx.par.pp):
        head, tail = edges[stage]
        forward.append(concat([fwd_stack, compute_block(head)]) if head else fwd_stack)
        chunks = [bwd_layer.repeated(count) for count in bucket_layers]
        if tail:
            chunks[-1] = concat([chunks[-1], compute_block(tail)])
        backward.append(chunks)
    return StageWork(forward, backward, _gradient_buckets(ctx, pieces), None)
