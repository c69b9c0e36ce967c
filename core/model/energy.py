"""What one GPU keeps busy over a training step or an inference request (core/model/power.py's
`Activity`), and the clock its power limit leaves the step: the bridge from the operator
model's times, FLOPs and bytes to watts and joules."""
from dataclasses import replace

from . import ops
from .graph import LayerShape, build_decode_layer, build_layer, train_shape
from .inference import decode_steps, infer_request, request_flops
from .layout import group_spans, stage_layers
from .power import Activity, whole_step_clock
from .specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism, TrainWorkload
from .training import edge_ops, layer_profile, optimizer_step_s, train_step

# The clock share the compute-bound time is probed at: a step timed at PROBE_CLOCK of its
# clock runs (1 / PROBE_CLOCK - 1) * its compute-bound seconds longer. Near the shares a power
# limit leaves (0.7-1), so kernels that turn compute-bound only far below are not counted.
PROBE_CLOCK = 0.8
# Bytes each GPU sends per byte of a collective's buffer (ring algorithms, large groups): an
# all-reduce sends the buffer twice (reduce-scatter, then all-gather), the rest once.
WIRE_BYTES = {"all_reduce": 2.0}


def at_kernel_clock(hw: HardwareSpec, clock: float) -> HardwareSpec:
    """The hardware with every kernel's compute-bound time at `clock` of the boost clock."""
    if clock == hw.calibration.sustained_clock:
        return hw
    return replace(hw, calibration=replace(hw.calibration, sustained_clock=clock))


def _sums(op_list, hw: HardwareSpec, only_core: bool = False) -> tuple:
    """(seconds, {dtype: FLOPs}, HBM bytes, link bytes) of a layer pass's ops: attention's
    core runs in the activation dtype, the GEMMs in the compute dtype."""
    seconds = hbm = link = 0.0
    flops = {}
    for op in op_list:
        if only_core and not op.attention_core:
            continue
        if op.kind == "compute":
            seconds += op.time_s
            hbm += op.hbm_bytes
            dtype = hw.act_dtype if op.attention_core else hw.dtype
            flops[dtype] = flops.get(dtype, 0.0) + op.flops
        else:
            link += op.bytes_ * WIRE_BYTES.get(op.collective, 1.0)
    return seconds, flops, hbm, link


def _add(into: dict, flops: dict, scale: float) -> None:
    for dtype, count in flops.items():
        into[dtype] = into.get(dtype, 0.0) + count * scale


def _train_work(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int) -> tuple:
    """(step seconds, busy seconds, {dtype: FLOPs}, HBM bytes, link bytes) of one GPU, averaged
    over the pipeline stages (every stage's GPUs wait out the same step)."""
    step_s, _, _ = train_step(model, hw, par, work, gpus)
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    spans_key = tuple(sorted((axis, spans.get(axis, ())) for axis in ("tp", "cp", "ep", "etp")))
    shape = train_shape(par, work)
    prof = layer_profile(model, hw, dims, shape, spans_key, par.recompute)
    micro = work.global_batch // (par.dp * par.micro_batch)
    layers = sum(stage_layers(model.layers, par)) / par.pp
    passes = [_sums(prof.graph.forward, hw), _sums(prof.graph.backward, hw)]
    if par.recompute == "full":
        passes.append(passes[0])
    elif par.recompute == "selective":
        passes.append(_sums(prof.graph.forward, hw, only_core=True))
    flops, busy, hbm, link = {}, 0.0, 0.0, 0.0
    for seconds, pass_flops, pass_hbm, pass_link in passes:
        busy += seconds * layers * micro
        hbm += pass_hbm * layers * micro
        link += pass_link * layers * micro
        _add(flops, pass_flops, layers * micro)
    tokens, h = shape.tokens, model.hidden
    busy += sum(edge_ops(model, hw, tokens, par.tp)) * micro / par.pp
    _add(flops, {hw.act_dtype: 6.0 * tokens * h * model.vocab / par.tp}, micro / par.pp)  # LM head
    optimizer_s = optimizer_step_s(model, hw, par)
    busy += optimizer_s
    hbm += optimizer_s * ops.mixed_bandwidth_bps(hw)  # bandwidth-bound: its seconds are its bytes
    params = model.total_params() / (par.tp * par.pp)
    if par.dp * par.cp > 1:
        link += params * 4 * WIRE_BYTES["all_reduce"]  # gradients (FP32 main gradients, at most)
    if par.pp > 1:
        link += 2 * micro * tokens * h * hw.act_bytes / par.tp * (par.pp - 1) / par.pp
    return step_s, busy, tuple(sorted(flops.items())), hbm, link


def _infer_work(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: InferWorkload, gpus: int) -> tuple:
    """(request seconds, busy seconds, {dtype: FLOPs}, HBM bytes, link bytes) of one GPU of a
    replica: its stages run one after another, each GPU its share of the layers."""
    request_s, _, _, breakdown, _ = infer_request(model, hw, par, work, gpus)
    b, prompt, steps = work.batch, work.prompt, decode_steps(work.decode)
    share = model.layers / par.pp
    _, _, prefill_hbm, prefill_link = _sums(build_layer(model, hw, LayerShape(b, prompt, prompt, par.tp, par.sp, 1, 1)).forward, hw)
    kv = work.kv_bytes(hw)
    first = _sums(build_decode_layer(model, hw, b, prompt + 1, par.tp, kv), hw)
    last = _sums(build_decode_layer(model, hw, b, prompt + max(1, steps), par.tp, kv), hw)
    head_bytes = model.hidden * model.vocab / par.tp * hw.act_bytes * (1 + steps) / par.pp  # LM head weights
    hbm = share * (prefill_hbm + steps * (first[2] + last[2]) / 2) + head_bytes
    link = share * (prefill_link + steps * (first[3] + last[3]) / 2)
    flops = ((hw.dtype, request_flops(model, work) / (par.tp * par.pp)),)
    return request_s, breakdown["compute_s"] / par.pp, flops, hbm, link


def activity(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> Activity:
    """One GPU's Activity over a training step or an inference request at the hardware's
    kernel clock, its compute-bound seconds from a second timing at PROBE_CLOCK of it."""
    measure = _train_work if isinstance(work, TrainWorkload) else _infer_work
    clock = hw.calibration.sustained_clock
    time_s, busy_s, flops, hbm, link = measure(model, hw, par, work, gpus)
    slow_s, slow_busy_s, *_ = measure(model, at_kernel_clock(hw, clock * PROBE_CLOCK), par, work, gpus)
    stretch = 1.0 / PROBE_CLOCK - 1.0
    return Activity(time_s, busy_s, flops, hbm, link, max(0.0, slow_s - time_s) / stretch,
                    max(0.0, slow_busy_s - busy_s) / stretch, clock)



def power_limited(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> tuple:
    """(hardware at the kernel clock the power limit leaves, the GPU's Activity there, its
    physical clock share): the step's clock falls where the limit is below what the work
    draws (core/model/power.py's whole_step_clock), and its compute-bound time stretches."""
    work_done = activity(model, hw, par, work, gpus)
    kernel_clock, physical = whole_step_clock(hw.gpu.power, work_done, hw.calibration.sustained_clock)
    timed = at_kernel_clock(hw, kernel_clock)
    if timed is not hw:
        work_done = activity(model, timed, par, work, gpus)
    return timed, work_done, physical
