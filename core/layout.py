"""Where parallel groups land on the network, and which layouts are legal at all."""
from math import prod

from .specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism, TrainWorkload

Span = tuple  # ((dim_index, ranks_in_that_dim), ...): a group's extent per network dimension
PLACEMENT = ("tp", "cp", "dp", "pp")


def axis_degrees(par: Parallelism) -> dict:
    return {"tp": par.tp, "cp": par.cp, "dp": par.dp, "pp": par.pp}


def group_spans(par: Parallelism, dims: tuple) -> dict:
    """For each parallel axis, how many of its ranks lie along each network dimension.

    Ranks are numbered with the first axis of `par.placement` fastest, and NPUs with
    network dimension 0 fastest, so an axis with stride S and degree D covers NPU
    strides [S, S*D) and splits across the dimensions whose strides overlap that range.
    Expert parallelism takes the innermost `ep` ranks of the data-parallel axis."""
    degrees = axis_degrees(par)
    spans, stride = {}, 1
    for axis in par.placement:
        spans[axis] = _split(stride, degrees[axis], dims)
        if axis == "dp":
            spans["ep"] = _split(stride, par.ep, dims)
        stride *= degrees[axis]
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


def check_layout(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> str | None:
    """None if the layout can run at all, else the reason it cannot (memory aside)."""
    if sorted(par.placement) != sorted(PLACEMENT):
        return f"placement {','.join(par.placement)} is not an order of {', '.join(PLACEMENT)}"
    if par.gpus != gpus:
        return f"dp*tp*pp*cp = {par.dp}*{par.tp}*{par.pp}*{par.cp} = {par.gpus}, not gpus = {gpus}"
    if model.heads % par.tp:
        return f"heads ({model.heads}) not divisible by tp ({par.tp})"
    if model.kv_heads % par.tp and par.tp % model.kv_heads:
        return f"kv_heads ({model.kv_heads}) and tp ({par.tp}) do not divide one another"
    if model.ffn_hidden % par.tp:
        return f"ffn_hidden ({model.ffn_hidden}) not divisible by tp ({par.tp})"
    if model.layers % (par.pp * par.virtual_stages):
        return f"layers ({model.layers}) not divisible by pp*virtual_stages ({par.pp * par.virtual_stages})"
    if par.ep > 1:
        if model.moe is None:
            return f"ep = {par.ep} but the model has no experts"
        if model.moe.experts % par.ep:
            return f"experts ({model.moe.experts}) not divisible by ep ({par.ep})"
        if par.dp % par.ep:
            return f"ep ({par.ep}) must divide dp ({par.dp})"
    if par.sp and par.tp == 1:
        return "sequence parallelism needs tp > 1"
    if par.schedule == "interleaved" and par.virtual_stages < 2:
        return "the interleaved schedule needs virtual_stages >= 2"
    if par.schedule != "interleaved" and par.virtual_stages != 1:
        return f"virtual_stages = {par.virtual_stages} needs schedule interleaved"
    if isinstance(work, TrainWorkload):
        per_step = par.dp * par.micro_batch
        if work.global_batch % per_step:
            return (f"global_batch ({work.global_batch}) not divisible by dp*micro_batch "
                    f"({par.dp}*{par.micro_batch} = {per_step})")
        if work.seq % par.cp:
            return f"seq ({work.seq}) not divisible by cp ({par.cp})"
        if par.sp and (work.seq // par.cp) % par.tp:
            return f"seq/cp ({work.seq // par.cp}) not divisible by tp ({par.tp}) for sequence parallelism"
        if par.schedule == "interleaved" and (work.global_batch // per_step) % par.pp:
            return "the interleaved schedule needs micro-batches divisible by pp"
    elif isinstance(work, InferWorkload):
        if par.cp > 1:
            return "context parallelism is modelled for training only"
        if par.zero:
            return "ZeRO applies to training only"
    hw_gpus = prod(d.size for d in hw.network if d.size)
    if all(d.size for d in hw.network) and gpus > hw_gpus:
        return f"gpus ({gpus}) exceeds the {hw_gpus} NPUs of the hardware's network"
    return None
