"""Where parallel groups land on the network, and which layouts are legal at all."""
from functools import lru_cache
from math import ceil, prod

from .memo import on_fields
from .specs import (KV_DTYPES, LOW_PRECISION_DTYPES, NO_RECIPE, RECIPES_BY_DTYPE, HardwareSpec, InferWorkload,
                    ModelSpec, Parallelism, TrainWorkload)

Span = tuple  # ((dim_index, ranks_in_that_dim), ...): a group's extent per network dimension
PLACEMENT = ("tp", "cp", "dp", "pp")


def axis_degrees(par: Parallelism) -> dict:
    return {"tp": par.tp, "cp": par.cp, "dp": par.dp, "pp": par.pp}


def group_spans(par: Parallelism, dims: tuple) -> dict:
    """For each parallel axis, how many of its ranks lie along each network dimension.

    Ranks are numbered with the first axis of `par.placement` fastest, and NPUs with
    network dimension 0 fastest, so an axis with stride S and degree D covers NPU
    strides [S, S*D) and splits across the dimensions whose strides overlap that range.
    The expert groups follow Megatron-Core's expert grid (expert_grid): `etp` ranks, then
    `ep` of those groups, over the ranks the dense layers spread tp, cp and dp over (MoE
    parallel folding when etp differs from tp). The expert data-parallel group ("edp", the
    ranks holding the same expert shard, whose gradients Megatron-Core reduces apart from the
    dense ones) is what remains of the tp*cp*dp ranks once the expert tensor and expert
    parallel groups are taken out, dimension by dimension.
    A fresh dict each call (callers extend it); the spans themselves are memoized."""
    return dict(_group_spans(par, dims))


@on_fields("tp", "cp", "dp", "pp", "ep", "etp", "placement", at=0)
def _group_spans(par: Parallelism, dims: tuple) -> tuple:
    degrees = axis_degrees(par)
    spans, stride = {}, 1
    for axis in par.placement:
        spans[axis] = _split(stride, degrees[axis], dims)
        stride *= degrees[axis]
    expert_tp, spans["ep"] = spans["tp"], ()
    if uses_experts(par):
        expert = _expert_spans(par, dims)
        expert_tp, spans["ep"] = expert["tp"], expert["ep"]
        if par.expert_tp != par.tp:
            spans["etp"] = expert_tp
    block = merge_spans(spans["tp"], spans["cp"], spans["dp"])
    spans["edp"] = _quotient(block, spans["ep"], expert_tp)
    return tuple(spans.items())


def uses_experts(par: Parallelism) -> bool:
    """Whether experts are laid out apart from the dense layers (expert or expert-tensor parallelism)."""
    return par.ep > 1 or par.expert_tp != par.tp


def expert_grid(par: Parallelism) -> tuple:
    """Megatron-Core's grid of expert ranks (core_v0.10+ initialize_model_parallel, its expert
    RankGenerator), as (axis, degree) from the fastest. Its orders (tp-cp-ep-dp-pp, or
    tp-cp-ep-pp-dp) without cp: expert tensor parallelism in tp's place, then expert
    parallelism, so ep spans the context-parallel ranks before the data-parallel ones, then
    the rest of the layout's order, dp standing for the expert data parallelism.
    check_layout holds layouts with experts to placements that start tp, cp."""
    degrees = {"tp": par.expert_tp, "ep": par.ep, "pp": par.pp,
               "dp": par.tp * par.cp * par.dp // (par.expert_tp * par.ep)}
    order = ("tp", "ep", *par.placement[2:])
    return tuple((axis, degrees[axis]) for axis in order)


def _expert_spans(par: Parallelism, dims: tuple) -> dict:
    spans, stride = {}, 1
    for axis, degree in expert_grid(par):
        spans[axis] = _split(stride, degree, dims)
        stride *= degree
    return spans


def _split(stride: int, degree: int, dims: tuple) -> Span:
    if degree <= 1:
        return ()
    parts, dim_stride = [], 1
    low, high = stride, stride * degree
    for index, dim in enumerate(dims):
        dim_low, dim_high = dim_stride, dim_stride * dim.size
        overlap_low, overlap_high = max(low, dim_low), min(high, dim_high)
        if overlap_high > overlap_low:
            parts.append((index, overlap_high / overlap_low))
        dim_stride = dim_high
    if high > dim_stride:  # more GPUs than the network holds: charge the outermost dimension
        last = len(dims) - 1
        extra = high / max(low, dim_stride)
        parts = [(i, r * extra if i == last else r) for i, r in parts] or [(last, extra)]
    return tuple(parts)


def merge_spans(*spans) -> Span:
    """The span of a group made of several axes' groups (e.g. gradients over dp and cp)."""
    ranks = {}
    for span in spans:
        for index, count in span:
            ranks[index] = ranks.get(index, 1.0) * count
    return tuple(sorted(ranks.items()))


def _quotient(span: Span, *parts: Span) -> Span:
    """The span left of a group once sub-groups laid inside it are taken out, per dimension."""
    ranks = dict(span)
    for part in parts:
        for index, count in part:
            ranks[index] = ranks.get(index, 1.0) / count
    return tuple((index, count) for index, count in sorted(ranks.items()) if count > 1)


def micro_batches(par: Parallelism, work) -> int:
    """Micro-batches each data-parallel rank runs per training step (gradient accumulation)."""
    return work.global_batch // (par.dp * par.micro_batch)


def stage_layers(layers: int, par: Parallelism) -> tuple:
    """Transformer layers on each pipeline stage (all its virtual chunks together)."""
    return _split_layers(layers, par.pp, par.virtual_stages, par.first_stage_layers, par.last_stage_layers)


@lru_cache(maxsize=1024)
def _split_layers(layers: int, pp: int, virtual: int, first: int, last: int) -> tuple:
    """Megatron-Core's split. Even when layers divide into pp * virtual chunks. Otherwise,
    when layers + 2 do, the embedding and the loss count as one layer each
    (account_for_embedding/loss_in_pipeline_split), so the first and last chunks hold one
    layer fewer (Llama 3 405B: 126 layers on 16 stages = 7, 8 x 14, 7). Otherwise the
    middle stages take ceil(layers / pp) and the first and last share the rest. An
    explicit first / last count (--decoder-first/last-pipeline-num-layers) splits the
    remainder evenly over the middle stages. A tuple with a zero or negative entry, or
    that does not add up, is an impossible split: check_layout reports it."""
    if pp == 1:
        return (layers,)
    if first or last:
        middle = pp - 2
        rest = layers - first - last
        if not first or not last or (middle and rest % middle) or (not middle and rest):
            return ()
        return (first, *([rest // middle] * middle if middle else []), last)
    chunks = pp * virtual
    if layers % chunks == 0:
        return (layers // pp,) * pp
    if (layers + 2) % chunks == 0:
        per_stage = (layers + 2) // pp
        return (per_stage - 1, *([per_stage] * (pp - 2)), per_stage - 1)
    per_stage = ceil(layers / pp)
    rest = layers - per_stage * (pp - 2)
    return (rest // 2, *([per_stage] * (pp - 2)), rest - rest // 2)


def stage_ranges(layers: int, par: Parallelism) -> tuple:
    """Per stage, the (start, stop) layer ranges it holds: one contiguous range, or under the
    interleaved schedule one per model chunk (chunk c of stage s is the model's chunk
    c * pp + s); what tells a stage's layer kinds where layers differ."""
    return _stage_ranges(layers, par.pp, par.virtual_stages, par.first_stage_layers, par.last_stage_layers,
                         chunk_layers(layers, par) if par.virtual_stages > 1 else ())


@lru_cache(maxsize=1024)
def _stage_ranges(layers: int, pp: int, virtual: int, first: int, last: int, chunks: tuple) -> tuple:
    if chunks:
        sizes = [chunks[stage][chunk] for chunk in range(virtual) for stage in range(pp)]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(tuple((starts[c * pp + s], starts[c * pp + s] + sizes[c * pp + s]) for c in range(virtual))
                     for s in range(pp))
    split = _split_layers(layers, pp, virtual, first, last)
    starts = [sum(split[:i]) for i in range(len(split))]
    return tuple(((start, start + n),) for start, n in zip(starts, split))


def stage_groups(model, par: Parallelism) -> tuple:
    """Per stage, ((uniform layer spec, count), ...) of the layers it holds: one group of its
    layer count when every layer is alike."""
    if model.uniform:
        return tuple(((model, n),) for n in stage_layers(model.layers, par))
    return _stage_groups(model, stage_ranges(model.layers, par))


@lru_cache(maxsize=1024)
def _stage_groups(model, ranges: tuple) -> tuple:
    """The stages' kinds; the MTP modules (each one layer of the last layer's kind) run on the
    last stage, after the main model's last layer."""
    out = []
    for stage in ranges:
        counts = {}
        for start, stop in stage:
            for spec, count in model.layer_groups(start, stop):
                counts[spec] = counts.get(spec, 0) + count
        out.append(counts)
    if model.mtp_layers:
        last = model.layer_groups(model.layers - 1)[0][0]
        out[-1][last] = out[-1].get(last, 0) + model.mtp_layers
    return tuple(tuple(counts.items()) for counts in out)


def chunk_runs(model, par: Parallelism, chunks: tuple, mtp: bool = True) -> tuple:
    """Per stage, per model chunk (`chunks`: chunk_layers), its layers in order as runs
    ((uniform layer spec, count), ...) of consecutive layers alike; with `mtp`, the MTP modules
    (one layer of the last layer's kind each) close the last stage's last chunk (training; a
    serving engine does not run them). What a replay lays out."""
    if model.uniform:
        return tuple(tuple(((model, n),) for n in stage) for stage in chunks)
    return _chunk_runs(model, tuple(tuple(stage) for stage in chunks), par.pp, mtp)


@lru_cache(maxsize=256)
def _chunk_runs(model, chunks: tuple, pp: int, mtp: bool) -> tuple:
    per_chunk = len(chunks[0])
    sizes = [chunks[s][c] for c in range(per_chunk) for s in range(pp)]  # model order: chunk c of stage s
    kinds = model.layer_kinds or (None,) * model.layers
    out = [[None] * per_chunk for _ in range(pp)]
    start = 0
    for position, size in enumerate(sizes):
        runs = []
        for kind in kinds[start:start + size]:
            spec = model.layer_groups()[0][0] if kind is None else model.kind_spec(kind)
            if runs and runs[-1][0] == spec:
                runs[-1][1] += 1
            else:
                runs.append([spec, 1])
        start += size
        out[position % pp][position // pp] = runs
    if model.mtp_layers and mtp:
        runs, last = out[-1][-1], model.layer_groups(model.layers - 1)[0][0]
        if runs and runs[-1][0] == last:
            runs[-1][1] += model.mtp_layers
        else:
            runs.append([last, model.mtp_layers])
    return tuple(tuple(tuple((spec, n) for spec, n in runs) for runs in stage) for stage in out)


def chunk_layers(layers: int, par: Parallelism) -> tuple:
    """Per stage, the transformer layers of each model chunk (virtual stage): a stage's layers
    shared evenly by its chunks; when Megatron-Core counts the embedding and the loss as
    layers (stage_layers), the first chunk and the last one hold one fewer. () for a split
    Megatron-Core would not make (chunks of a stage that differ otherwise)."""
    split, chunks = stage_layers(layers, par), par.virtual_stages
    if split and all(n % chunks == 0 for n in split):
        return tuple((n // chunks,) * chunks for n in split)
    if par.pp > 1 and not (par.first_stage_layers or par.last_stage_layers) and (layers + 2) % (par.pp * chunks) == 0:
        per_chunk = (layers + 2) // (par.pp * chunks)
        middle = ((per_chunk,) * chunks,) * (par.pp - 2)
        return ((per_chunk - 1,) + (per_chunk,) * (chunks - 1), *middle, (per_chunk,) * (chunks - 1) + (per_chunk - 1,))
    return ()


def warmup_forwards(schedule: str, pp: int, chunks: int, stage: int, micro: int) -> int:
    """Forward passes (of one model chunk each) a stage runs before its first backward: all
    of them under GPipe; pp - stage - 1 under 1F1B; 2 (pp - stage - 1) + (chunks - 1) pp under
    Megatron-Core's interleaved 1F1B (get_pp_rank_microbatches); never more than there are."""
    if schedule == "gpipe":
        return micro * chunks
    if schedule == "interleaved":
        return min(2 * (pp - stage - 1) + (chunks - 1) * pp, micro * chunks)
    return min(pp - stage - 1, micro)


def pipeline_order(schedule: str, pp: int, chunks: int, stage: int, micro: int) -> list:
    """(pass "F" or "B", model chunk, micro-batch) in the order one stage runs them: its
    warm-up forwards, then one forward and one backward by turns, then the remaining
    backwards. Interleaved (Megatron-Core's get_schedule_table), micro-batches go in groups
    of pp (check_layout has them divide), each group forward through the chunks in order and
    backward through them in reverse."""
    table = [(c, m) for first in range(0, micro, pp) for c in range(chunks)
             for m in range(first, min(first + pp, micro))]
    forward = [("F", c, m) for c, m in table]
    backward = [("B", chunks - 1 - c, m) for c, m in table]
    warmup = warmup_forwards(schedule, pp, chunks, stage, micro)
    order = forward[:warmup]
    for i in range(len(table) - warmup):
        order += [forward[warmup + i], backward[i]]
    return order + backward[len(table) - warmup:]


# Parallelism fields the inference model does not take (one micro-batch of requests, no
# optimizer; its timing runs experts unsplit, so ep and etp would shard their memory alone):
# set away from their defaults in inference they are refused rather than ignored, so a study
# does not write identical rows under different knobs.
TRAINING_ONLY = ("zero", "ep", "etp", "micro_batch", "recompute", "schedule", "virtual_stages", "overlap_grad_reduce",
                 "overlap_param_gather", "overlap_tp_comm", "overlap_p2p_comm", "grad_dtype",
                 "grad_accumulation_fusion", "fused_cross_entropy", "fp8_params", "master_weights",
                 "optimizer_dtype", "reshard_after_forward", "expandable_segments")
_TRAINING_DEFAULTS = {name: getattr(Parallelism(), name) for name in TRAINING_ONLY}
# of those, what the serving simulator models: experts split over an engine's tp GPUs by ep, each
# over tp / ep of them (as TensorRT-LLM's moe_ep_size x moe_tp_size = tp_size; sweep.study.space
# derives etp so when it is not set)
SERVING_TAKES = ("ep", "etp")


def serving_etp(tp, ep):
    """A serving engine's expert tensor parallelism when a study leaves it: its tp GPUs split by
    ep; works on integers and numpy arrays alike."""
    return (tp // ep).clip(1) if hasattr(tp, "clip") else max(1, tp // ep)


def served_etp(tp: int, ep: int, etp: int) -> int:
    """A serving point's etp: as set, or where it is left (0) with experts spread (ep > 1),
    serving_etp (a study's serve points and `rapid run --mode serve` alike)."""
    return etp or (serving_etp(tp, ep) if ep > 1 else 0)


def untaken_knobs(work) -> tuple:
    """The Parallelism knobs a non-training workload leaves at their defaults."""
    return TRAINING_ONLY if isinstance(work, InferWorkload) else tuple(n for n in TRAINING_ONLY if n not in SERVING_TAKES)


def recipe_mismatch(dtype: str, recipe: str) -> str:
    """Why a scaling recipe does not fit the dtype ("" when it does or none is set)."""
    allowed = RECIPES_BY_DTYPE.get(dtype, (NO_RECIPE,))
    if not recipe or recipe in allowed:
        return ""
    return f"dtype {dtype} takes " + (f"fp8_recipe {', '.join(allowed)}" if dtype in RECIPES_BY_DTYPE
                                      else f"fp8_recipe {NO_RECIPE} only (its GEMMs are not low-precision)")


def _knob_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_layout(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> str | None:
    """None if the layout can run at all, else the reason it cannot (memory aside)."""
    if recipe_mismatch(hw.dtype, hw.fp8_recipe):
        return f"fp8_recipe {hw.fp8_recipe}: {recipe_mismatch(hw.dtype, hw.fp8_recipe)}"
    if sorted(par.placement) != sorted(PLACEMENT):
        return f"placement {','.join(par.placement)} is not an order of {', '.join(PLACEMENT)}"
    if par.gpus != gpus:
        return f"dp*tp*pp*cp = {par.dp}*{par.tp}*{par.pp}*{par.cp} = {par.gpus}, not gpus = {gpus}"
    if not isinstance(work, TrainWorkload):  # inference or serving; first, so that no rule below suggests a training knob
        if par.cp > 1:
            return "context parallelism is modelled for training only"
        if work.kv_dtype == "nvfp4" and "nvfp4" not in dict(hw.gpu.peak_flops):
            others = ", ".join(d for d in KV_DTYPES if d != "nvfp4")
            return f"kv_dtype nvfp4 needs a GPU with an nvfp4 peak (Blackwell); on {hw.gpu.name} expected one of {others}"
        unused = [f"{name} = {_knob_text(getattr(par, name))}" for name in untaken_knobs(work)
                  if getattr(par, name) != _TRAINING_DEFAULTS[name]]
        if unused:
            taker = "inference model" if isinstance(work, InferWorkload) else "serving simulator"
            return f"{', '.join(unused)}: training knobs, which the {taker} does not take"
        if not isinstance(work, InferWorkload) and par.ep > 1 and (par.tp * par.pp) % par.ep:
            return (f"ep ({par.ep}) must divide an engine's tp*pp GPUs ({par.tp}*{par.pp}): a serving engine "
                    "splits its experts over its own GPUs")
    if model.heads % par.tp:
        return f"heads ({model.heads}) not divisible by tp ({par.tp})"
    if model.kv_heads % par.tp and par.tp % model.kv_heads:
        return f"kv_heads ({model.kv_heads}) and tp ({par.tp}) do not divide one another"
    recurrent = model.recurrent
    if recurrent is not None and any(spec.mixer in ("linear", "mamba") for spec, _ in model.layer_groups()):
        if recurrent.heads % par.tp or recurrent.key_heads % par.tp and par.tp % recurrent.key_heads:
            return (f"{recurrent.kind} heads ({recurrent.heads} value, {recurrent.key_heads} key/group) "
                    f"not divisible by tp ({par.tp})")
        if par.cp > 1:
            return f"cp = {par.cp}: context parallelism over {recurrent.kind} layers' recurrent scan is not modelled"
    if model.ffn_hidden % par.tp:
        return f"ffn_hidden ({model.ffn_hidden}) not divisible by tp ({par.tp})"
    if (par.first_stage_layers or par.last_stage_layers) and par.pp == 1:
        return "first/last stage layers need pp > 1 (with one stage every layer is on it)"
    if bool(par.first_stage_layers) != bool(par.last_stage_layers):
        return (f"first/last stage layers {par.first_stage_layers}/{par.last_stage_layers}: give both, "
                "the other layers then split evenly over the middle stages")
    split = stage_layers(model.layers, par)
    if not split or min(split) < par.virtual_stages:
        override = (f" with first/last stage layers {par.first_stage_layers}/{par.last_stage_layers}"
                    if par.first_stage_layers else "")
        return (f"layers ({model.layers}) cannot be split over pp={par.pp} stages of {par.virtual_stages} "
                f"virtual chunks{override} (each stage needs at least one layer per chunk)")
    if par.ep > 1:
        if model.moe is None:
            return f"ep = {par.ep} but the model has no experts"
        if model.moe.experts % par.ep:
            return f"experts ({model.moe.experts}) not divisible by ep ({par.ep})"
        expert_ranks = par.ep * par.expert_tp
        if (par.dp * par.cp * par.tp) % expert_ranks:
            return (f"ep*etp ({par.ep}*{par.expert_tp}) must divide dp*cp*tp "
                    f"({par.dp}*{par.cp}*{par.tp}), the ranks experts are folded over")
    if uses_experts(par):
        if tuple(par.placement[:2]) != ("tp", "cp"):
            return (f"placement {','.join(par.placement)} with experts: Megatron-Core's orders start "
                    "tp, cp (tp-cp-ep-dp-pp or tp-cp-ep-pp-dp)")
        if par.pp > 1 and par.placement[-1] != "pp" and par.ep * par.expert_tp != par.tp * par.cp:
            return (f"placement {','.join(par.placement)} with pp not outermost needs ep*etp = tp*cp, so that the "
                    "expert grid's pipelines are the dense ones (Megatron-Core)")
    if par.etp and model.moe is None:
        return f"etp = {par.etp} but the model has no experts"
    if par.fp8_params and hw.dtype not in LOW_PRECISION_DTYPES:
        return (f"fp8_params keeps the weights its low-precision GEMMs read: it needs dtype "
                f"{', '.join(LOW_PRECISION_DTYPES)}, not {hw.dtype}")
    if par.overlap_param_gather and par.zero == 0:
        return "overlap_param_gather gathers the distributed optimizer's parameter shards: it needs zero >= 1"
    if not par.reshard_after_forward and par.zero < 3:
        return "reshard_after_forward false keeps ZeRO-3's gathered parameters: it needs zero 3"
    if par.overlap_p2p_comm and par.schedule != "interleaved":
        return "overlap_p2p_comm hides a chunk's send behind the next chunk: it needs schedule interleaved"
    if par.overlap_tp_comm and not par.training_sp:
        return "overlap_tp_comm pipelines the sequence-parallel collectives with their GEMMs: it needs sp"
    if model.moe is not None and model.moe.expert_ffn_hidden % par.expert_tp:
        return f"expert_ffn_hidden ({model.moe.expert_ffn_hidden}) not divisible by etp ({par.expert_tp})"
    if par.etp < 0 or (par.etp and par.etp > par.tp * par.cp * par.dp):
        return f"etp ({par.etp}) must be 0 (= tp) or a positive degree no larger than dp*cp*tp"
    if par.sp is True and par.tp == 1:
        return "sequence parallelism needs tp > 1"
    if par.schedule == "interleaved" and par.virtual_stages < 2:
        return "the interleaved schedule needs virtual_stages >= 2"
    if par.schedule == "interleaved" and par.pp < 2:
        return "the interleaved schedule needs pp >= 2 (its model chunks take turns across pipeline stages)"
    if par.schedule != "interleaved" and par.virtual_stages != 1:
        return f"virtual_stages = {par.virtual_stages} needs schedule interleaved"
    if isinstance(work, TrainWorkload):
        per_step = par.dp * par.micro_batch
        if work.global_batch % per_step:
            return (f"global_batch ({work.global_batch}) not divisible by dp*micro_batch "
                    f"({par.dp}*{par.micro_batch} = {per_step})")
        if work.seq % par.cp:
            return f"seq ({work.seq}) not divisible by cp ({par.cp})"
        if par.training_sp and (work.seq // par.cp) % par.tp:
            return f"seq/cp ({work.seq // par.cp}) not divisible by tp ({par.tp}) for sequence parallelism"
        if par.schedule == "interleaved" and (work.global_batch // per_step) % par.pp:
            return "the interleaved schedule needs micro-batches divisible by pp"
    hw_gpus = prod(d.size for d in hw.network if d.size)
    if all(d.size for d in hw.network) and gpus > hw_gpus:
        return f"gpus ({gpus}) exceeds the {hw_gpus} NPUs of the hardware's network"
    return None
