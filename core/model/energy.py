"""What one GPU keeps busy over a training step or an inference request (core/model/power.py's
`Activity`), and the clock its power limit leaves the step: the bridge from the operator
model's times, FLOPs and bytes to watts and joules."""
from dataclasses import replace
from functools import lru_cache

from . import ops
from .graph import LayerShape, build_decode_layer, build_layer, train_shape
from .inference import decode_steps, infer_request, request_flops
from .layout import micro_batches
from .memo import on_fields
from .power import Activity, busy_power_w, whole_step_clock
from .specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism, TrainWorkload
from .training import edge_ops, optimizer_step_s, train_step

# The clock share the compute-bound time is probed at: kernels timed at PROBE_CLOCK of their
# clock run (1 / PROBE_CLOCK - 1) * their compute-bound seconds longer. Near the shares a power
# limit leaves (0.7-1), so kernels that turn compute-bound only far below are not counted.
PROBE_CLOCK = 0.8
# Bytes each GPU sends per byte of a collective's buffer (ring algorithms, large groups): an
# all-reduce sends the buffer twice (reduce-scatter, then all-gather), the rest once.
WIRE_BYTES = {"all_reduce": 2.0}


@lru_cache(maxsize=4096)
def at_kernel_clock(hw: HardwareSpec, clock: float) -> HardwareSpec:
    """The hardware with every kernel's compute-bound time at `clock` of the boost clock (one
    object per clock, so the model's memos hit on it)."""
    if clock == hw.calibration.sustained_clock:
        return hw
    return replace(hw, calibration=replace(hw.calibration, sustained_clock=clock))


@lru_cache(maxsize=16384)
def _graph_sums(graph, hw: HardwareSpec, part: str) -> tuple:
    """_sums of a layer graph's `forward`, `backward` or `core` (attention's core, forward),
    memoized on the graph, which hashes once."""
    if part == "core":
        return _sums(graph.forward, hw, only_core=True)
    return _sums(getattr(graph, part), hw)


@lru_cache(maxsize=16384)
def _decode_sums(model: ModelSpec, hw: HardwareSpec, batch: int, context: int, tp: int, kv_bytes: float) -> tuple:
    return _sums(build_decode_layer(model, hw, batch, context, tp, kv_bytes), hw)


def _sums(op_list: tuple, hw: HardwareSpec, only_core: bool = False) -> tuple:
    """(seconds, ((dtype, FLOPs), ...), HBM bytes, link bytes) of a layer pass's ops: attention's
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
    return seconds, tuple(flops.items()), hbm, link


def _add(into: dict, flops: tuple, scale: float) -> None:
    for dtype, count in flops:
        into[dtype] = into.get(dtype, 0.0) + count * scale


# The layout fields a step's layer, edge and link sums read (the layer shape, the counts of
# micro-batches and stages): not the ZeRO stage or the pipeline's split, which only the optimizer
# step sees, nor the placement, which moves the communication but not the work.
LAYER_WORK_FIELDS = ("dp", "tp", "pp", "cp", "ep", "sp", "micro_batch", "recompute", "etp", "overlap_tp_comm",
                     "grad_dtype", "grad_accumulation_fusion")
# ... and with the optimizer step's (memory-bound seconds and bytes) those of optimizer_step_s too.
TRAIN_WORK_FIELDS = (*LAYER_WORK_FIELDS, "zero", "virtual_stages", "first_stage_layers", "last_stage_layers",
                     "fp8_params")


@on_fields(*TRAIN_WORK_FIELDS)
def _train_work(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int) -> tuple:
    """(busy seconds, ((dtype, FLOPs), ...), HBM bytes, link bytes) of one GPU over a step,
    averaged over the pipeline stages (every stage's GPUs wait out the same step)."""
    busy, flops, hbm, link = _layer_work(model, hw, par, work, gpus)
    optimizer_s = optimizer_step_s(model, hw, par)
    busy += optimizer_s
    hbm += optimizer_s * ops.mixed_bandwidth_bps(hw)  # bandwidth-bound: its seconds are its bytes
    return busy, tuple(sorted(flops)), hbm, link


@on_fields(*LAYER_WORK_FIELDS)
def _layer_work(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: TrainWorkload, gpus: int) -> tuple:
    """_train_work but its optimizer step: (busy seconds, ((dtype, FLOPs), ...) unsorted, HBM
    bytes, link bytes)."""
    shape = train_shape(par, work)
    micro = micro_batches(par, work)
    flops, busy, hbm, link = {}, 0.0, 0.0, 0.0
    for spec, count in model.trained_groups():  # each kind of layer once, weighted by its count
        graph = build_layer(spec, hw, shape)  # layer_profile's graph, without timing its communication
        layers = count / par.pp
        passes = [_graph_sums(graph, hw, "forward"), _graph_sums(graph, hw, "backward")]
        if par.recompute == "full":
            passes.append(passes[0])
        elif par.recompute == "selective":
            passes.append(_graph_sums(graph, hw, "core"))
        for seconds, pass_flops, pass_hbm, pass_link in passes:
            busy += seconds * layers * micro
            hbm += pass_hbm * layers * micro
            link += pass_link * layers * micro
            _add(flops, pass_flops, layers * micro)
    tokens, h = shape.tokens, model.hidden
    busy += sum(edge_ops(model, hw, tokens, par.tp)) * micro / par.pp
    _add(flops, ((hw.act_dtype, 6.0 * tokens * h * model.vocab / par.tp),), micro / par.pp)  # LM head
    params = model.total_params() / (par.tp * par.pp)
    if par.dp * par.cp > 1:
        link += params * 4 * WIRE_BYTES["all_reduce"]  # gradients (FP32 main gradients, at most)
    if par.pp > 1:
        link += 2 * micro * tokens * h * hw.act_bytes / par.tp * (par.pp - 1) / par.pp
    return busy, tuple(flops.items()), hbm, link


@lru_cache(maxsize=16384)
def _infer_work(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: InferWorkload, gpus: int) -> tuple:
    """(busy seconds, ((dtype, FLOPs), ...), HBM bytes, link bytes) of one GPU of a replica
    over a request: its stages run one after another, each GPU its share of the layers."""
    _, _, _, breakdown, _ = infer_request(model, hw, par, work, gpus)
    b, prompt, steps = work.batch, work.prompt, decode_steps(work.decode)
    kv = work.kv_bytes(hw)
    hbm = model.hidden * model.vocab / par.tp * hw.act_bytes * (1 + steps) / par.pp  # LM head weights
    link = 0.0
    for spec, count in model.layer_groups():  # each kind of layer once, weighted by its count
        share = count / par.pp
        prefill = build_layer(spec, hw, LayerShape(b, prompt, prompt, par.tp, par.sp, 1, 1))
        _, _, prefill_hbm, prefill_link = _graph_sums(prefill, hw, "forward")
        first = _decode_sums(spec, hw, b, prompt + 1, par.tp, kv)
        last = _decode_sums(spec, hw, b, prompt + max(1, steps), par.tp, kv)
        hbm += share * (prefill_hbm + steps * (first[2] + last[2]) / 2)
        link += share * (prefill_link + steps * (first[3] + last[3]) / 2)
    flops = ((hw.dtype, request_flops(model, work) / (par.tp * par.pp)),)
    return breakdown["compute_s"] / par.pp, flops, hbm, link


def step_seconds(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> float:
    """The closed forms' training step or inference request time."""
    if isinstance(work, TrainWorkload):
        return train_step(model, hw, par, work, gpus)[0]
    return infer_request(model, hw, par, work, gpus)[0]


def activity(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int, time_s: float,
             probe: bool = True) -> Activity:
    """One GPU's Activity over a training step or an inference request of `time_s` seconds at
    the hardware's kernel clock; with `probe`, the compute-bound share of its busy time from a
    second count at PROBE_CLOCK of that clock (else none: the Activity cannot change its
    clock). The wall time's compute-bound part is taken as the busy time's: a caller that
    settles on another clock times the step again there (core.evaluate does)."""
    measure = _train_work if isinstance(work, TrainWorkload) else _infer_work
    clock = hw.calibration.sustained_clock
    busy_s, flops, hbm, link = measure(model, hw, par, work, gpus)
    if not probe:
        return Activity(time_s, busy_s, flops, hbm, link, clock=clock)
    slow_busy_s = measure(model, at_kernel_clock(hw, clock * PROBE_CLOCK), par, work, gpus)[0]
    bound_s = max(0.0, slow_busy_s - busy_s) / (1.0 / PROBE_CLOCK - 1.0)
    return Activity(time_s, busy_s, flops, hbm, link, bound_s, bound_s, clock)


def spread_over(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int, seconds: float) -> tuple:
    """(hardware at the clock the power limit leaves, one GPU's Activity of `work` at that
    clock) with the work spread over `seconds`, the GPUs idling in between: a served batch at
    the pace its engine emits it (busy all of it where the engine is faster than the static model)."""
    timed, work_done, clock = power_limited(model, hw, par, work, gpus, step_seconds(model, hw, par, work, gpus))
    return timed, work_done.at_clock(clock).within(seconds)


def power_limited(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int, time_s: float) -> tuple:
    """(hardware at the kernel clock the power limit leaves, one GPU's Activity there, its
    physical clock share), from the step or request timed at `hw` in `time_s`: the clock falls
    where the limit is below what the kernels draw (power.whole_step_clock) and compute-bound
    time stretches. The clocks read what the GPU keeps busy, not the wall time, so they come
    from _power_state, shared by the steps apart only in their exposed communication."""
    state = _train_power_state if isinstance(work, TrainWorkload) else _infer_power_state
    timed, work_done, kernel_clock, physical = state(model, hw, par, work, gpus)
    work_done = work_done.spanning(time_s)
    return timed, work_done if kernel_clock is None else work_done.at_clock(kernel_clock), physical


def _power_state(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int) -> tuple:
    """(hardware at the kernel clock, one GPU's Activity at `hw`'s clock over no wall time, the
    kernel clock to take it to (None: it stays), the physical clock share). A step that stays
    under both limits at the boost clock needs no probe."""
    power = hw.gpu.power
    clock = hw.calibration.sustained_clock
    if clock == 1.0:
        plain = activity(model, hw, par, work, gpus, 0.0, probe=False)
        if busy_power_w(power, plain) <= min(power.limit_w, power.tdp_w):
            return hw, plain, None, 1.0
    work_done = activity(model, hw, par, work, gpus, 0.0)
    kernel_clock, physical = whole_step_clock(power, work_done, clock)
    return at_kernel_clock(hw, kernel_clock), work_done, kernel_clock, physical


_train_power_state = on_fields(*TRAIN_WORK_FIELDS)(_power_state)  # what _train_work reads, as activity does
_infer_power_state = lru_cache(maxsize=16384)(_power_state)
