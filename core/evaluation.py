"""One configuration in, one flat record out: the question every other part asks."""
import functools
import math

from .errors import SpecError
from core.model.graph import train_shape
from core.model.layout import check_layout, group_spans, micro_batches
from core.model.memory import GiB, MemoryEstimate, inference_memory, training_memory
from core.model.specs import (HardwareSpec, InferWorkload, ModelSpec, Parallelism, ServeWorkload, TrainWorkload,
                              memory_view)
from core.model.energy import power_limited, spread_over
from core.model.inference import infer_request
from core.model.power import held_energy_j
from core.model.training import train_step

BACKENDS = ("analytical", "astra-hierarchical", "astra-flattened")
UNTIMED = ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s")
# Power and energy figures (core/model/power.py); absent (None) where the hardware file gives
# no power figures or the point is untimed.
ENERGY = ("power_avg_w", "gpu_clock_share", "energy_per_step_j", "energy_per_token_j", "energy_per_request_j",
          "energy_per_output_token_j", "run_days", "run_mwh")
_NO_ENERGY = dict.fromkeys(ENERGY)
_UNTIMED_NAN = dict.fromkeys(UNTIMED, math.nan)
# Figures the executors report beside the breakdown that overlap its parts (a phase's total,
# all DP traffic hidden or not): kept apart so that the breakdown sums to step_time_s.
DETAIL_KEYS = ("prefill_s", "decode_s", "dp_comm_total_s")


def evaluate(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, gpus: int | None = None,
             backend: str = "analytical", time_infeasible: bool = False, emit_traces=None) -> dict:
    """Predict one configuration. Illegal layouts raise SpecError; layouts that do not fit
    in memory come back with feasible = False and, unless `time_infeasible`, no timing.
    The astra backends replay the configuration on the compiled network simulator; with
    `emit_traces` (a folder) they also write the replayed graph as Chakra traces there."""
    gpus = par.gpus if gpus is None else gpus
    if backend not in BACKENDS:
        raise SpecError("", "backend", backend, f"expected one of {', '.join(BACKENDS)}")
    reason, memory = _verdict(model, memory_view(hw), par, work, gpus)
    if reason:
        raise SpecError("", "parallelism", _layout_text(par), reason)
    if isinstance(work, ServeWorkload):
        from core.serving.point import serve_layout_reason

        reason = serve_layout_reason(model, hw, par, work, gpus)
        if reason:
            raise SpecError("", "parallelism", _layout_text(par), reason)
        return _serve_record(model, hw, par, work)
    record = {**memory, "memory": dict(memory["memory"]), **_NO_ENERGY}  # fresh dicts over the memoized ones
    if not record["feasible"] and not time_infeasible:
        record.update(_UNTIMED_NAN)
        record["breakdown"], record["detail"] = {}, {}
        return record
    timed, work_done, physical_clock = hw, None, None
    analytical = _train_timing if isinstance(work, TrainWorkload) else _infer_timing
    timing = None
    if hw.gpu.power is not None:
        # the power limit's clock is solved on the closed forms, cheap beside a replay
        timing = analytical(model, hw, par, work, gpus)
        timed, work_done, physical_clock = power_limited(model, hw, par, work, gpus, timing["step_time_s"])
    if backend != "analytical":
        timing = _astra_timing(model, timed, par, work, gpus, backend, emit_traces)
    elif timing is None or (timed is not hw and timed != hw):  # a memo may hand back an equal copy
        timing = analytical(model, timed, par, work, gpus)
    record.update(timing)
    breakdown = record["breakdown"]
    record["detail"] = {key: breakdown.pop(key) for key in DETAIL_KEYS if key in breakdown}
    if work_done is not None:
        record.update(energy_fields(timed, par, work, gpus, record["step_time_s"], work_done.at_clock(physical_clock)))
    return record


def _serve_record(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: ServeWorkload) -> dict:
    """A serving point: the engine simulator's figures (core.serving) beside the metric columns
    every row carries (output tokens/s as tokens_per_s; no step time or MFU), and its power and
    energy (serve_energy_fields)."""
    from core.serving.point import serve_point

    figures = serve_point(model, hw, par, work)
    record = {**_UNTIMED_NAN, **_NO_ENERGY}
    record["kv_transfer_s"] = math.nan  # disaggregated points' figures set it
    record.update(figures)
    record["tokens_per_s"] = figures["output_tokens_per_s"]
    record["memory_peak_gib"] = None
    record["infeasible_reason"] = "" if figures["feasible"] else \
        "the weights and one request's KV cache do not fit in an engine's memory"
    record["memory"], record["breakdown"], record["detail"] = {}, {}, {}
    if figures["feasible"] and hw.gpu.power is not None and not work.disagg:  # one kind of engine only
        record.update(serve_energy_fields(model, hw, par, work, figures))
    return record


def serve_energy_fields(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: ServeWorkload,
                        figures: dict) -> dict:
    """Power and energy of a served point: one engine's steady batch, the requests it holds in
    decode (its output rate x TPOT, Little's law), as the inference model times their work
    (prefill, decode, FLOPs and bytes at the clock the power limit leaves), spread over the
    time the simulated engine takes to emit that batch's tokens, its GPUs idling in between
    (the method `rapid validate --suite energy` holds against measured serving runs)."""
    engine_rate = figures["output_tokens_per_s"] / par.dp
    batch = max(1, round(engine_rate * figures["tpot_s"]))
    steady = InferWorkload(batch, work.isl, work.osl, work.kv_dtype)
    engine = Parallelism(tp=par.tp, pp=par.pp)
    timed, spread = spread_over(model, hw, engine, steady, engine.gpus, batch * work.osl / engine_rate)
    fields = energy_fields(timed, engine, steady, engine.gpus, spread.time_s, spread)
    fields["energy_per_step_j"] = None  # a serving row has no step
    return fields


def slowed_energy_fields(record: dict, hw: HardwareSpec, gpus: int, slowdown: float) -> dict:
    """A timed record's energy fields when its step takes `slowdown` times as long with the
    same work (a fault sample's slower links, a straggler): the GPUs wait the extra time out
    at their idle floor (with node overhead and PUE in the energies)."""
    if record.get("power_avg_w") is None or slowdown is None or math.isnan(slowdown):
        return dict(_NO_ENERGY)
    power, step_s = hw.gpu.power, record["step_time_s"]
    extra_s = step_s * (slowdown - 1.0)
    facility_j = (power.idle_w + power.node_overhead_w) * power.pue * extra_s * gpus
    scale = (record["energy_per_step_j"] + facility_j) / record["energy_per_step_j"]
    fields = {key: None if record[key] is None else record[key] * scale for key in ENERGY}
    fields["power_avg_w"] = (record["power_avg_w"] * step_s + power.idle_w * extra_s) / (step_s + extra_s)
    fields["gpu_clock_share"] = record["gpu_clock_share"]
    if record["run_days"] is not None:
        fields["run_days"] = record["run_days"] * slowdown
    return fields


def energy_fields(hw: HardwareSpec, par: Parallelism, work, gpus: int, step_s: float, work_done) -> dict:
    """Power and energy of a timed point: `work_done` is one GPU's Activity at its physical
    clock, `step_s` the step (or request) as the chosen backend timed it. Facility figures
    (node overhead, PUE) go into the energies, not into the GPU's power."""
    power = hw.gpu.power
    gpu_j = held_energy_j(power, work_done.spanning(step_s), work_done.clock)
    facility_j = (gpu_j + power.node_overhead_w * step_s) * power.pue
    fields = {"power_avg_w": gpu_j / step_s, "gpu_clock_share": work_done.clock,
              "energy_per_step_j": facility_j * gpus}
    if isinstance(work, TrainWorkload):
        tokens = work.global_batch * work.seq
        fields["energy_per_token_j"] = facility_j * gpus / tokens
        if work.tokens_total:
            steps = work.tokens_total / tokens
            fields["run_days"] = steps * step_s / 86400
            fields["run_mwh"] = steps * facility_j * gpus / 3.6e9
        return fields
    per_request = facility_j * par.tp * par.pp / work.batch
    fields["energy_per_request_j"] = per_request
    fields["energy_per_output_token_j"] = per_request / work.decode
    return fields


@functools.lru_cache(maxsize=16384)
def _verdict(model: ModelSpec, view: HardwareSpec, par: Parallelism, work, gpus: int) -> tuple:
    """(check_layout's reason, None) for an illegal layout or a serving one; else (None, the
    memory fields of a training or inference point). Memoized on the hardware's memory_view:
    a sweep meets each layout once per hardware variant, and one lookup answers both."""
    reason = check_layout(model, view, par, work, gpus)
    if reason or isinstance(work, ServeWorkload):
        return reason, None
    return None, _memory_summary(_estimate(model, view, par, work, False))


def estimate_memory(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work,
                    first_iteration: bool = False) -> MemoryEstimate:
    """Per-GPU memory of the most loaded stage, without timing anything else (training:
    through the first iteration only, with `first_iteration`). Read on the hardware's
    memory_view: variants apart only in rates share one memoized estimate."""
    return _estimate(model, memory_view(hw), par, work, first_iteration)


@functools.lru_cache(maxsize=16384)
def _estimate(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work, first_iteration: bool) -> MemoryEstimate:
    if isinstance(work, TrainWorkload):
        shape = train_shape(par, work)
        micro = micro_batches(par, work)
        return training_memory(model, hw, par, shape, micro, shape.tokens, first_iteration)
    return inference_memory(model, hw, par, work.batch, work.prompt, work.decode, work.kv_bytes(hw))


def _layout_text(par: Parallelism) -> str:
    return f"dp={par.dp} tp={par.tp} pp={par.pp} cp={par.cp} ep={par.ep}"


def _memory_summary(memory: MemoryEstimate) -> dict:
    return {"feasible": memory.feasible, "infeasible_reason": memory.reason(),
            "memory_peak_gib": memory.peak_bytes / GiB,
            "memory": {f"{kind}_gib": value / GiB for kind, value in memory.by_kind().items()}}


def mfu_peak_flops(hw: HardwareSpec) -> float:
    """The peak MFU is quoted against: the 16-bit one, also for FP8 and FP32/TF32 runs (as NeMo
    and Megatron-Core report it), so that every precision's layouts compare on one scale; a GPU
    file without a 16-bit peak, its own dtype's."""
    peaks = dict(hw.gpu.peak_flops)
    return peaks.get("fp16" if hw.act_dtype == "fp16" else "bf16") or peaks[hw.act_dtype]


def _train_metrics(hw, work, gpus, step_s, model_flops, breakdown) -> dict:
    return {"step_time_s": step_s, "mfu": model_flops / (step_s * mfu_peak_flops(hw) * gpus),
            "tokens_per_s": work.global_batch * work.seq / step_s, "ttft_s": math.nan, "tpot_s": math.nan,
            "breakdown": breakdown}


def _infer_metrics(hw, par, work, request_s, ttft_s, tpot_s, flops, breakdown) -> dict:
    """MFU over one replica's GPUs; tokens/s over all dp replicas."""
    return {"step_time_s": request_s, "mfu": flops / (request_s * mfu_peak_flops(hw) * par.tp * par.pp),
            "tokens_per_s": par.dp * work.batch * work.decode / request_s, "ttft_s": ttft_s, "tpot_s": tpot_s,
            "breakdown": breakdown}


def _train_timing(model, hw, par, work, gpus) -> dict:
    step_s, breakdown, model_flops = train_step(model, hw, par, work, gpus)
    return _train_metrics(hw, work, gpus, step_s, model_flops, breakdown)


def _infer_timing(model, hw, par, work, gpus) -> dict:
    request_s, ttft_s, tpot_s, breakdown, flops = infer_request(model, hw, par, work, gpus)
    return _infer_metrics(hw, par, work, request_s, ttft_s, tpot_s, flops, breakdown)


def _astra_timing(model, hw, par, work, gpus, backend, emit_traces) -> dict:
    from core.replay.steps import infer_request_astra, train_step_astra  # loads the compiled simulator
    from core.chakra.bundle import write_bundle

    emit = None
    if emit_traces is not None:
        emit = functools.partial(write_bundle, emit_traces, model.name, backend=backend)
    if isinstance(work, TrainWorkload):
        step_s, breakdown, model_flops, links = train_step_astra(model, hw, par, work, gpus, backend, emit)
        timing = _train_metrics(hw, work, gpus, step_s, model_flops, breakdown)
    else:
        request_s, ttft_s, tpot_s, breakdown, flops, links = infer_request_astra(
            model, hw, par, work, gpus, backend, emit)
        timing = _infer_metrics(hw, par, work, request_s, ttft_s, tpot_s, flops, breakdown)
    dims = hw.dims_for(gpus)
    if backend == "astra-hierarchical":
        timing["replay_note"] = hierarchy_note(par, dims, replicas_talk=isinstance(work, TrainWorkload))
    timing["busiest_links"] = [{"src": link["src"], "dst": link["dst"], "dim": dims[link["dim"]].name,
                                "utilisation": link["busy_s"] / timing["step_time_s"]} for link in links]
    return timing


def hierarchy_note(par: Parallelism, dims: tuple, replicas_talk: bool = True) -> str:
    """Empty when the layout keeps to what astra-hierarchical assumes (TP/CP/EP inside the
    first network dimension, DP/PP outside it), else what the split replay cannot see.
    `replicas_talk`: False in inference, whose dp replicas exchange nothing."""
    if len(dims) < 2:
        return ""
    spans = group_spans(par, dims)
    inner_out = sorted({a for a in ("tp", "cp", "ep") for index, _ in spans.get(a, ()) if index > 0})
    outer = ("dp", "pp") if replicas_talk else ("pp",)
    outer_in = sorted({a for a in outer for index, _ in spans.get(a, ()) if index == 0})
    if not inner_out and not outer_in:
        return ""
    parts = []
    if inner_out:
        parts.append(f"{'/'.join(inner_out)} groups reach beyond {dims[0].name}")
    if outer_in:
        parts.append(f"{'/'.join(outer_in)} groups use {dims[0].name}")
    return ("; ".join(parts) + ": astra-hierarchical replays layer and pipeline traffic apart, so their "
            "contention on shared links is not seen (astra-flattened sees it)")
