"""Training iterations and inference requests replayed on the compiled network simulator.

`astra-hierarchical` replays one transformer layer's forward and backward passes on the
ranks of one pipeline stage, then a pipeline graph (stages x micro-batches, point-to-point
transfers, bucketed data-parallel gradients) whose stage work takes the layer times.
`astra-flattened` replays every op of every layer, micro-batch and rank in one graph."""
import math
from dataclasses import dataclass, replace

import numpy as np

from core.model.collectives import collective_time, protocol_startup_s
from core.model.graph import LayerShape, Op, build_decode_layer, build_layer, train_shape
from core.model.inference import decode_steps, lm_head_s, request_flops
from core.model.layout import (chunk_layers, chunk_runs, group_spans, merge_spans, micro_batches, pipeline_order,
                               stage_layers)
from core.model.memory import grad_bytes, layer_param_parts, stage_param_parts, weight_bytes
from .network import astra_network, rank_groups
from .programs import (RECV, SEND, Block, CommClasses, Program, assemble, compute_block, concat, frontier_increments,
                       ops_block)
from core.model.training import amax_sync, edge_ops, model_flops, optimizer_step_s, zero3_unhidden_share
from core.errors import SpecError

STAGE_FWD, STAGE_BWD, WAIT, OPTIMIZER, EDGE = -2, -3, -4, -5, -6
STAGE_PREFILL, STAGE_DECODE = -7, -8  # inference: a stage's replayed layers, as one block per pass
DP_BUCKETS = 4  # gradient buckets a model chunk's last backward pass is cut into


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
    algorithms: dict  # (axis, all-reduce bytes) -> the faster algorithm on this network

    def algorithm(self, axis: str, collective: str, bytes_: float) -> str:
        """Direct for all-to-all; for all-reduce, whichever of ring and double binary tree the
        simulator finishes first on this axis's first group; ring otherwise."""
        if collective == "all_to_all":
            return "direct"
        if collective != "all_reduce":
            return "ring"
        key = (axis, bytes_)
        if key not in self.algorithms:
            group = self.groups.members[self.groups.of[axis][0]]
            times = {name: self.network.collective(collective, bytes_, name, group).time_s
                     for name in ("ring", "double_binary_tree")}
            self.algorithms[key] = min(times, key=times.get)
        return self.algorithms[key]


def _context(model, hw, par, gpus) -> Context:
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    spans["dp"] = merge_spans(spans.get("dp", ()), spans.get("cp", ()))  # gradients reduce over dp*cp
    return Context(model, hw, par, gpus, dims, spans, rank_groups(par), astra_network(hw, gpus), {})


def _dim_shares(ctx: Context, classes: CommClasses) -> list:
    """For each communication class, the fraction of its time spent in each network dimension
    and, for point-to-point transfers, their uncontended seconds over the slowest dimension a
    pipeline crosses (else None)."""
    shares = []
    for axis, collective, bytes_ in classes.keys:
        span = ctx.spans["pp"][:1] if axis == "pp" else ctx.spans.get(axis, ())
        times = collective_time(ctx.hw, ctx.dims, collective, bytes_, span)
        total = sum(times.values())
        transfer_s = None
        if collective == "send_recv":
            transfer_s = max([total] + [sum(collective_time(ctx.hw, ctx.dims, collective, bytes_, (part,)).values())
                                        for part in ctx.spans.get(axis, ())])
        shares.append(({name: t / total for name, t in times.items()} if total else {}, transfer_s))
    return shares


def _attribute(ctx, classes, result, node_rank, label, stage_split=None) -> tuple:
    """(breakdown of the critical rank's time, busiest links): each node is charged with how
    far it pushed that rank's finish time, time that compute runs through counting as
    compute (communication only where it is exposed)."""
    critical = int(np.argmax(result.rank_finish_s))
    # Compute (and stage passes, edges, the optimizer) takes the time it runs; communication
    # beside it is hidden, as in the closed forms.
    computing = (label <= 0) & (label != WAIT)
    order, increments = frontier_increments(node_rank, result.node_end_s, critical, result.node_start_s, computing)
    labels = label[order]
    out = {"compute_s": float(increments[(labels == 0) | (labels == EDGE)].sum()),
           "bubble_s": float(increments[labels == WAIT].sum())}
    optimizer = float(increments[labels == OPTIMIZER].sum())
    if optimizer:
        out["optimizer_s"] = optimizer
    comm = {}
    for index, (shares, transfer_s) in enumerate(_dim_shares(ctx, classes)):
        pushed = increments[labels == index + 1]
        if transfer_s is not None:  # a send that ends late because its peer is busy: waiting, not traffic
            out["bubble_s"] += float(np.maximum(pushed - transfer_s, 0.0).sum())
            pushed = np.minimum(pushed, transfer_s)
        spent = float(pushed.sum())
        for name, share in shares.items():
            comm[name] = comm.get(name, 0.0) + spent * share
    if stage_split is not None:  # {label code: per stage, {breakdown key: share}}
        stage = int(ctx.groups.coords["pp"][critical])
        for code in stage_split:
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


def _layer_ops(ctx: Context, shape: LayerShape, spec=None) -> tuple:
    """(forward ops, backward ops with their recompute in front) of one layer of `spec` (a
    uniform layer spec of the model; the model itself by default)."""
    graph = build_layer(ctx.model if spec is None else spec, ctx.hw, shape)
    forward, backward = list(graph.forward), list(graph.backward)
    recompute = ctx.par.recompute
    if recompute == "full":
        backward = forward + backward
    elif recompute == "selective":
        backward = [op for op in forward if op.attention_core] + backward
    if ctx.par.zero >= 3:  # parameters gathered ahead of use, gradients scattered after
        parts, split = stage_param_parts(ctx.model, ctx.par), stage_layers(ctx.model.layers, ctx.par)
        heaviest = max(range(ctx.par.pp), key=lambda stage: sum(parts[stage]))  # as core.model.training does
        weights, grads = weight_bytes(ctx.hw, ctx.par), grad_bytes(ctx.par)

        def hidden(collective, bytes_per_param, ops_list, unhidden):
            overlapped = ctx.par.overlap_grad_reduce if collective == "reduce_scatter" else ctx.par.overlap_param_gather
            cover = sum(op.time_s for op in ops_list) if overlapped else 0.0  # off: the pass waits for it
            return [Op(f"zero3.{collective}", "comm", collective=collective, axis=axis,
                       bytes_=params / split[heaviest] * bytes_per_param, cover_s=cover, min_exposed=unhidden,
                       exposed_runs_alone=True)
                    for axis, params in _synced_parts(ctx, parts[heaviest])]
        # Each pass gathers its parameters ahead of use; the backward also scatters the
        # previous layer's gradients while it computes (the pass's last scatter, exposed, first).
        unhidden = zero3_unhidden_share(split[heaviest])
        forward = hidden("all_gather", weights, forward, unhidden) + forward
        backward = (hidden("reduce_scatter", grads, backward, unhidden) + hidden("all_gather", weights, backward, 0.0)
                    + backward)
    return forward, backward


def _synced_parts(ctx: Context, parts: tuple) -> list:
    """(axis, parameters) pairs a rank synchronises: dense parameters over the data-parallel
    group, experts over the expert data-parallel group (Megatron-Core's separate buffers),
    each only where its group has more than one rank."""
    groups = ctx.groups
    return [(axis, params) for axis, params in zip(("dp", "edp"), parts)
            if params and len(groups.members[groups.of[axis][0]]) > 1]


def layer_trace(ctx: Context, ops_list, stage: int = 0) -> tuple:
    """(trace, node ranks, node labels, classes) of one layer pass on every rank of `stage`."""
    classes = CommClasses()
    block = _ops_block(ctx, ops_list, classes)
    trace, node_rank, label, _ = assemble(ctx.groups, [(_stage_ranks(ctx, stage), block)])
    return trace, node_rank, label, classes


def _replay_layer(ctx: Context, ops_list) -> dict:
    """One layer pass on every rank of the first stage: {"time_s", "compute_s", dims...}."""
    trace, node_rank, label, classes = layer_trace(ctx, ops_list)
    result = ctx.network.replay(trace)
    parts, _ = _attribute(ctx, classes, result, node_rank, label)
    parts.pop("bubble_s")
    parts["time_s"] = float(result.time_s)
    return parts


def _downstream(stage: int, chunk: int, pp: int, chunks: int):
    """(stage, chunk) a model chunk's forward output goes to: the next stage, or from the
    last stage round to the first stage's next chunk; None after the model's last layer."""
    if stage < pp - 1:
        return stage + 1, chunk
    return (0, chunk + 1) if chunk < chunks - 1 else None


def _upstream(stage: int, chunk: int, pp: int, chunks: int):
    """(stage, chunk) a model chunk's forward input comes from; None before the first layer."""
    if stage > 0:
        return stage - 1, chunk
    return (pp - 1, chunk - 1) if chunk > 0 else None


@dataclass(frozen=True)
class StageWork:
    """Per-stage blocks for each pass, and how to split a pass's time for the breakdown."""
    forward: list  # per stage, per model chunk: one block
    backward: list  # per stage, per model chunk: sub-blocks; gradient buckets follow each on the last pass
    bucket_params: list  # per stage, per chunk: (dense, expert) parameters whose gradients follow each sub-block
    split: dict


def _pipeline(ctx: Context, work: StageWork, micro: int, message_bytes: float, classes: CommClasses, emit=None):
    """Replays the pipeline: every stage's schedule with transfers between stages and the
    data-parallel gradient synchronisation overlapping the last backward pass."""
    trace, node_rank, label = pipeline_trace(ctx, work, micro, message_bytes, classes)
    if emit is not None:
        emit(trace, ctx)
    result = ctx.network.replay(trace)
    return _attribute(ctx, classes, result, node_rank, label, work.split), float(result.time_s)


def pipeline_trace(ctx: Context, work: StageWork, micro: int, message_bytes: float, classes: CommClasses) -> tuple:
    """(trace, node ranks, node labels) of the whole pipeline schedule."""
    par = ctx.par
    pp, chunks, stride = par.pp, par.virtual_stages, ctx.groups.strides["pp"]
    p2p_label = classes.label("pp", "send_recv", message_bytes)
    dp_buckets = par.zero <= 2
    optimizer_s = optimizer_step_s(ctx.model, ctx.hw, ctx.par)
    reduce = "all_reduce" if par.zero == 0 else "reduce_scatter"
    gradients = grad_bytes(par)

    def sync(collective, parts, bytes_per_param, after):
        """The bucket's collectives, dense then expert, one after the other on the DP stream; the
        last one's exits, none when nothing is synced (the optimizer then waits on the backward
        alone: a node naming one dependency twice is never freed by ASTRA-sim's feeder)."""
        placed = ()
        for axis, params in _synced_parts(ctx, parts):
            after = placed = tuple(program.place(_comm_block(ctx, axis, collective, params * bytes_per_param,
                                                             classes), after))
        return list(placed)

    def tag(chunk, m, backward):  # one per transfer between two ranks, named by the receiving chunk
        return 2 * (m * chunks + chunk) + backward

    programs = []
    for stage in range(pp):
        program = Program()
        last, synced = (), []
        for kind, chunk, m in pipeline_order(par.schedule, pp, chunks, stage, micro):
            forward = kind == "F"
            source = (_upstream if forward else _downstream)(stage, chunk, pp, chunks)
            if source is not None:
                last = (program.p2p(RECV, (source[0] - stage) * stride, message_bytes, tag(chunk, m, not forward),
                                    last, WAIT),)
            if forward:
                last = tuple(program.place(work.forward[stage][chunk], last))
            else:
                for piece, bucket in zip(work.backward[stage][chunk], work.bucket_params[stage][chunk]):
                    last = tuple(program.place(piece, last))
                    if m == micro - 1 and dp_buckets and par.overlap_grad_reduce:
                        synced += sync(reduce, bucket, gradients, last)
            target = (_downstream if forward else _upstream)(stage, chunk, pp, chunks)
            if target is not None:
                program.p2p(SEND, (target[0] - stage) * stride, message_bytes, tag(target[1], m, not forward),
                            last, p2p_label)
        if dp_buckets and not par.overlap_grad_reduce:  # reduced once the backward is done
            for bucket in (b for chunk_buckets in work.bucket_params[stage] for b in chunk_buckets):
                synced += sync(reduce, bucket, gradients, last)
        last = tuple(program.place(compute_block(optimizer_s, OPTIMIZER), last + tuple(synced)))
        if dp_buckets and par.zero >= 1:
            sync("all_gather", stage_param_parts(ctx.model, par)[stage], weight_bytes(ctx.hw, par), last)
        programs.append((_stage_ranks(ctx, stage), program.block()))
    trace, node_rank, label, _ = assemble(ctx.groups, programs)
    return trace, node_rank, label


def _comm_block(ctx, axis, collective, bytes_, classes):
    return _ops_block(ctx, [Op(f"{axis}.{collective}", "comm", collective=collective, axis=axis, bytes_=bytes_)],
                      classes)


def _ops_block(ctx, ops_list, classes):
    """ops_block with each exposed collective preceded by the start-up NCCL's protocol adds to
    the bare algorithm the simulator runs, so replay and closed forms agree without contention.
    A hidden collective's share no overlap can hide (min_exposed), where it runs alone, runs
    exposed in the chain ahead of the rest, with that share of the whole one's start-up."""
    expanded, startups = [], []

    def exposed(op, share: float = 1.0, whole_bytes: float | None = None):
        """`op` in the chain behind `share` of its whole collective's start-up."""
        whole = op.bytes_ if whole_bytes is None else whole_bytes
        startup = share * protocol_startup_s(ctx.hw, ctx.dims, op.collective, whole, ctx.spans.get(op.axis, ()))
        if startup > 0:
            startups.append(len(expanded))
            expanded.append(Op(f"{op.name}.startup", "compute", time_s=startup))
        expanded.append(op)

    for op in ops_list:
        if op.kind == "comm" and op.cover_s > 0 and op.min_exposed > 0 and op.exposed_runs_alone:
            share = op.min_exposed
            exposed(replace(op, bytes_=op.bytes_ * share, cover_s=0.0, min_exposed=0.0), share, op.bytes_)
            expanded.append(replace(op, bytes_=op.bytes_ * (1 - share), min_exposed=0.0))
        elif op.kind == "comm" and op.cover_s <= 0:
            exposed(op)
        else:
            expanded.append(op)
    block = ops_block(expanded, ctx.algorithm, classes)
    if not startups:
        return block
    # The start-up is part of its collective's time (the closed form counts it so): a node per
    # op, it takes the label of the collective it precedes, not compute's.
    label = block.columns["label"].copy()
    label[startups] = label[np.asarray(startups) + 1]
    return Block({**block.columns, "label": label}, block.deps, block.entry, block.exits)


def _gradient_buckets(ctx, runs: tuple) -> list:
    """Per stage, per model chunk: the (dense, expert) parameters of each gradient bucket, a
    chunk holding its share of the stage's layers (by count where layers are alike, else by
    the parameters of the layers each bucket's backward covers)."""
    out = []
    for (dense, expert), stage in zip(stage_param_parts(ctx.model, ctx.par), runs):
        if ctx.model.uniform:
            layers = [sum(n for _, n in chunk) for chunk in stage]
            total = sum(layers)
            out.append([[(dense * n / total / pieces, expert * n / total / pieces)] * pieces
                         for n in layers for pieces in [_pieces(n)]])
            continue
        per_layer = {spec: layer_param_parts(spec, ctx.par.tp, ctx.par.ep, ctx.par.expert_tp)
                     for chunk in stage for spec, _ in chunk}
        pieces = [[_sum_parts(per_layer, piece) for piece in _backward_runs(chunk)] for chunk in stage]
        totals = [sum(p[i] for chunk in pieces for p in chunk) for i in (0, 1)]
        share = [part / total if total else 0.0 for part, total in zip((dense, expert), totals)]
        out.append([[(d * share[0], e * share[1]) for d, e in chunk] for chunk in pieces])
    return out


def _sum_parts(per_layer: dict, runs) -> tuple:
    """(dense, expert) parameters of the layers in `runs` ((spec, count), ...)."""
    return (sum(n * per_layer[spec][0] for spec, n in runs), sum(n * per_layer[spec][1] for spec, n in runs))


def _pieces(layers: int) -> int:
    """Backward sub-blocks of a model chunk's pass (its gradient buckets)."""
    return max(1, min(DP_BUCKETS, layers))


def _backward_runs(chunk: tuple) -> list:
    """A model chunk's backward pass cut into _pieces sub-passes, each ((spec, count), ...) of
    the layers it runs in backward order (last layer first): the gradient buckets follow them."""
    layers = [spec for spec, n in reversed(chunk) for _ in range(n)]
    out = []
    for part in np.array_split(np.arange(len(layers)), _pieces(len(layers))):
        runs = []
        for i in part.tolist():
            if runs and runs[-1][0] == layers[i]:
                runs[-1][1] += 1
            else:
                runs.append([layers[i], 1])
        out.append(tuple((spec, n) for spec, n in runs))
    return out


def _edge_block(seconds: float) -> list:
    return [compute_block(seconds, EDGE)] if seconds > 0 else []


def _stage_passes(step, stage: int, forward_stack, backward_pieces) -> tuple:
    """(forward block, backward sub-blocks) of each model chunk of one stage, from
    `forward_stack(runs)` and `backward_pieces(runs)` (runs: the chunk's ((layer spec, count),
    ...), TrainReplay.layers): the input embedding before the
    first chunk's layers on the first stage (its gradient after them), the LM head and loss
    after the last chunk's layers on the last stage (their gradient before them)."""
    embed_f, embed_b, head_f, head_b = step.edges
    chunks, last_stage = step.ctx.par.virtual_stages, step.ctx.par.pp - 1
    forward, backward = [], []
    for chunk, layers in enumerate(step.layers[stage]):
        first, last = stage == 0 and chunk == 0, stage == last_stage and chunk == chunks - 1
        forward.append(concat(_edge_block(embed_f if first else 0.0) + [forward_stack(layers)]
                              + _edge_block(head_f if last else 0.0)))
        pieces = list(backward_pieces(layers))
        if last:
            pieces[0] = concat(_edge_block(head_b) + [pieces[0]])
        if first:
            pieces[-1] = concat([pieces[-1]] + _edge_block(embed_b))
        backward.append(pieces)
    return forward, backward


@dataclass(frozen=True)
class TrainReplay:
    """A training step laid out for replay: the context, each layer kind's forward and
    backward ops, per-stage edge compute, and what the pipeline needs besides its stage work."""
    ctx: Context
    passes: dict  # uniform layer spec -> (forward ops, backward ops), each kind of layer once
    edges: tuple  # seconds of the input embedding (forward, backward), then of the LM head and loss
    layers: tuple  # per stage, per model chunk: ((layer spec, count), ...) in order (layout.chunk_runs)
    micro: int
    message_bytes: float


def _chunk_layers(model, par) -> tuple:
    """core.model.layout.chunk_layers, or the reason the replay cannot lay the chunks out."""
    layers = chunk_layers(model.layers, par)
    if not layers:
        overridden = par.first_stage_layers or par.last_stage_layers
        field, value = (("first/last stage layers", f"{par.first_stage_layers}/{par.last_stage_layers}") if overridden
                        else ("virtual_stages", par.virtual_stages))
        raise SpecError("", field, value,
                        f"a split of {model.layers} layers into pp x virtual stages that Megatron-Core makes evenly "
                        "(or with one layer fewer in the first and last chunk); other uneven model chunks are "
                        "modelled by the analytical backend only")
    return layers


def train_replay(model, hw, par, work, gpus) -> TrainReplay:
    ctx = _context(model, hw, par, gpus)
    shape = train_shape(par, work)
    tokens = shape.tokens
    runs = chunk_runs(model, par, _chunk_layers(model, par))
    specs = dict.fromkeys(spec for stage in runs for chunk in stage for spec, _ in chunk)
    return TrainReplay(ctx, {spec: _layer_ops(ctx, shape, spec) for spec in specs},
                       edge_ops(model, hw, tokens, par.tp), runs, micro_batches(par, work),
                       tokens * model.hidden * hw.act_bytes / par.tp)


def train_step_astra(model, hw, par, work, gpus, backend: str, emit=None):
    """(step seconds, breakdown, model FLOPs, busiest links) from a replay; `emit`,
    if given, is called with the replayed Trace and its Context first."""
    step = train_replay(model, hw, par, work, gpus)
    classes = CommClasses()
    if backend == "astra-hierarchical":
        replayed = {spec: tuple(_replay_layer(step.ctx, ops) for ops in pair) for spec, pair in step.passes.items()}
        fwd = {spec: f for spec, (f, _) in replayed.items()}
        bwd = {spec: b for spec, (_, b) in replayed.items()}
        stage_work = hierarchical_work(step, [fwd] * par.pp, [bwd] * par.pp)
    else:
        stage_work = flattened_work(step, classes)
    (breakdown, links), step_s = _pipeline(step.ctx, stage_work, step.micro, step.message_bytes, classes, emit)
    amax = amax_sync(model, hw, par, work, gpus)  # blocking, on every rank: added as the closed form has it
    for name, seconds in amax.items():
        breakdown[f"comm_{name}_s"] = breakdown.get(f"comm_{name}_s", 0.0) + seconds
    return step_s + sum(amax.values()), breakdown, model_flops(model, work), links


def hierarchical_work(step: TrainReplay, fwd: list, bwd: list) -> StageWork:
    """Stage work from each stage's replayed layer passes (`fwd[stage][layer spec]["time_s"]`,
    ...), a stage's pass the sum of its layers'."""
    forward, backward, split = [], [], {STAGE_FWD: [], STAGE_BWD: []}
    for stage in range(step.ctx.par.pp):
        f_s = {spec: layer["time_s"] for spec, layer in fwd[stage].items()}
        b_s = {spec: layer["time_s"] for spec, layer in bwd[stage].items()}
        if step.ctx.model.uniform:  # the layers' time, cut evenly into the pieces
            def backward_pieces(runs):
                layers = sum(n for _, n in runs)
                return [compute_block(layers * b_s[runs[0][0]] / _pieces(layers), STAGE_BWD)] * _pieces(layers)
        else:
            def backward_pieces(runs):
                return [compute_block(_runs_s(b_s, piece), STAGE_BWD) for piece in _backward_runs(runs)]
        chunk_f, chunk_b = _stage_passes(step, stage, lambda runs: compute_block(_runs_s(f_s, runs), STAGE_FWD),
                                         backward_pieces)
        forward.append(chunk_f)
        backward.append(chunk_b)
        counts = _stage_counts(step.layers[stage])
        split[STAGE_FWD].append(_stage_shares(fwd[stage], counts))
        split[STAGE_BWD].append(_stage_shares(bwd[stage], counts))
    return StageWork(forward, backward, _gradient_buckets(step.ctx, step.layers), split)


def _runs_s(seconds: dict, runs) -> float:
    """Seconds of the layers in `runs` ((spec, count), ...), `seconds` per layer of each spec
    (one run: count x seconds, the product the single-kind replay has always taken)."""
    if len(runs) == 1:
        spec, n = runs[0]
        return n * seconds[spec]
    return sum(n * seconds[spec] for spec, n in runs)


def _stage_counts(stage: tuple) -> dict:
    """{layer spec: layers of that spec} over a stage's model chunks."""
    counts = {}
    for chunk in stage:
        for spec, n in chunk:
            counts[spec] = counts.get(spec, 0) + n
    return counts


def _shares(layer: dict) -> dict:
    """How a layer pass's time divides into compute and each dimension's exposed comm."""
    shares = {key.removeprefix("comm_").removesuffix("_s"): v / layer["time_s"]
              for key, v in layer.items() if key.startswith("comm_")}
    shares["compute_s"] = 1.0 - sum(shares.values())
    return shares


def _stage_shares(layers: dict, counts: dict) -> dict:
    """_shares of a stage's pass: `layers` {layer spec: its replayed parts}, `counts` {layer
    spec: layers of it on the stage}, each kind weighted by its time on the stage."""
    if not counts:
        return {"compute_s": 1.0}
    if len(counts) == 1:
        return _shares(layers[next(iter(counts))])
    merged = {}
    for spec, n in counts.items():
        for key, value in layers[spec].items():
            if key == "time_s" or key.startswith("comm_"):
                merged[key] = merged.get(key, 0.0) + n * value
    return _shares(merged)


def flattened_work(step: TrainReplay, classes: CommClasses) -> StageWork:
    ctx = step.ctx
    blocks = {spec: tuple(_ops_block(ctx, ops, classes) for ops in pair) for spec, pair in step.passes.items()}

    def stack(runs, which):
        return _chain([blocks[spec][which].repeated(n) for spec, n in runs if n])

    def forward_stack(runs):
        return stack(runs, 0)

    def backward_pieces(runs):
        if ctx.model.uniform:
            layers = sum(n for _, n in runs)
            if not layers:
                return [compute_block(0.0)]
            bwd_layer = blocks[runs[0][0]][1]
            return [bwd_layer.repeated(len(part)) for part in np.array_split(np.arange(layers), _pieces(layers))]
        return [stack(piece, 1) for piece in _backward_runs(runs)]
    forward, backward = [], []
    for stage in range(ctx.par.pp):
        chunk_f, chunk_b = _stage_passes(step, stage, forward_stack, backward_pieces)
        forward.append(chunk_f)
        backward.append(chunk_b)
    return StageWork(forward, backward, _gradient_buckets(ctx, step.layers), None)


def infer_request_astra(model, hw, par, work, gpus, backend: str, emit=None):
    """(request seconds, TTFT, time per output token, breakdown, FLOPs, busiest links)
    from a replay of one replica: prefill, then every decode step, stage after stage."""
    ctx = _context(model, hw, par, gpus)
    b, prompt, steps = work.batch, work.prompt, decode_steps(work.decode)
    stages = tuple(chunks[0] for chunks in chunk_runs(model, par, tuple((n,) for n in stage_layers(model.layers, par)),
                                                      mtp=False))
    head_s = lm_head_s(model, hw, b, par.tp)
    classes = CommClasses()
    contexts = (prompt + 1, prompt + max(1, steps))
    layer_ops = {spec: (build_layer(spec, hw, LayerShape(b, prompt, prompt, par.tp, par.sp, 1, 1)).forward,
                        [build_decode_layer(spec, hw, b, c, par.tp, work.kv_bytes(hw)) for c in contexts])
                 for spec in dict.fromkeys(spec for runs in stages for spec, _ in runs)}
    passes, stage_split = {}, None  # a stage's runs -> (prefill block, decode step blocks)
    if backend == "astra-hierarchical":
        # Stage blocks labelled as such and split like the replayed layers, so their exposed
        # communication is not counted as compute.
        prefill, decode = {}, {}
        for spec, (prefill_ops, decode_ops) in layer_ops.items():
            prefill[spec] = _replay_layer(ctx, prefill_ops)
            first, last = (_replay_layer(ctx, o) for o in decode_ops)
            decode[spec] = {key: (first.get(key, 0.0) + last.get(key, 0.0)) / 2 for key in first.keys() | last.keys()}
        for runs in set(stages):
            passes[runs] = (compute_block(_runs_s({s: p["time_s"] for s, p in prefill.items()}, runs), STAGE_PREFILL),
                            [compute_block(_runs_s({s: d["time_s"] for s, d in decode.items()}, runs), STAGE_DECODE)])
        stage_split = {STAGE_PREFILL: [_stage_shares(prefill, dict(runs)) for runs in stages],
                       STAGE_DECODE: [_stage_shares(decode, dict(runs)) for runs in stages]}
    else:
        blocks = {spec: (_ops_block(ctx, prefill_ops, classes), [_ops_block(ctx, o, classes) for o in decode_ops])
                  for spec, (prefill_ops, decode_ops) in layer_ops.items()}
        for runs in set(stages):
            prefill = [blocks[spec][0].repeated(n) for spec, n in runs if n]
            decode = [[_decode_stack(*blocks[spec][1], n, k, steps) for spec, n in runs if n] for k in range(steps)]
            passes[runs] = (_chain(prefill), [_chain(step) for step in decode])
    el = hw.act_bytes
    stride = ctx.groups.strides["pp"]
    tokens = b * 4  # each decode step starts from the tokens the last stage sampled
    programs, first_token = [], None
    for stage in range(par.pp):
        program = Program()
        last = ()
        prefill, step_blocks = passes[stages[stage]]
        for step in range(steps + 1):
            message = b * (prompt if step == 0 else 1) * model.hidden * el
            label = classes.label("pp", "send_recv", message)
            if stage > 0:
                last = (program.p2p(RECV, -stride, message, 2 * step, last, label),)
            elif step > 0 and par.pp > 1:
                last = (program.p2p(RECV, (par.pp - 1) * stride, tokens, 2 * step - 1, last, WAIT),)
            last = tuple(program.place(prefill if step == 0 else step_blocks[(step - 1) % len(step_blocks)], last))
            if stage == par.pp - 1:
                last = tuple(program.place(compute_block(head_s), last))
                if step == 0:
                    first_token = list(last)
                if par.pp > 1 and step < steps:
                    program.p2p(SEND, -(par.pp - 1) * stride, tokens, 2 * step + 1, last, WAIT)
            else:
                program.p2p(SEND, stride, message, 2 * step, last, label)
        replica = np.flatnonzero((ctx.groups.coords["dp"] == 0) & (ctx.groups.coords["pp"] == stage))
        programs.append((replica, program.block()))
    trace, node_rank, label, starts = assemble(ctx.groups, programs)
    if emit is not None:
        emit(trace, ctx)
    result = ctx.network.replay(trace)
    breakdown, links = _attribute(ctx, classes, result, node_rank, label, stage_split)
    # What the critical rank waits is the other stages' passes, alike in make-up (even stages):
    # shared out over its own compute and communication, as the closed form counts them.
    waited = breakdown.pop("bubble_s", 0.0)
    own = {key: value for key, value in breakdown.items() if key == "compute_s" or key.startswith("comm_")}
    for key, value in own.items():
        breakdown[key] = value * (1.0 + waited / sum(own.values()))
    request_s = float(result.time_s)
    ttft_s = float(result.node_end_s[(starts[-1][:, None] + np.array(first_token)[None, :]).ravel()].max())
    breakdown.update({"prefill_s": ttft_s, "decode_s": request_s - ttft_s})
    tpot_s = (request_s - ttft_s) / steps if steps else math.nan  # one output token: none after the first
    return request_s, ttft_s, tpot_s, breakdown, request_flops(model, work), links


def _chain(blocks: list) -> Block:
    """Blocks one after another (concat), one block as it is, none as an empty pass."""
    if not blocks:
        return compute_block(0.0)
    return blocks[0] if len(blocks) == 1 else concat(blocks)


def _decode_stack(first: Block, last: Block, layers: int, step: int, steps: int) -> Block:
    """One decode step through a stage's layers, its durations interpolated between the first
    and the last step's (only attention grows with the context)."""
    weight = step / max(1, steps - 1)
    columns = dict(first.columns)
    columns["duration_s"] = first.columns["duration_s"] * (1 - weight) + last.columns["duration_s"] * weight
    return Block(columns, first.deps, first.entry, first.exits).repeated(layers)
