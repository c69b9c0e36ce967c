"""Functions memoized on some Parallelism fields (core/model/memo.py) read no other field: a
layout that differs from a cached one only in the fields left out gets what a fresh call on it
gives, field for field."""
import random
from dataclasses import fields, replace

import pytest

import core
from core.model import energy, layout, memory, training
from core.model.graph import train_shape
from core.evaluation import _verdict, estimate_memory
from core.model.memory import MemoryEstimate
from core.model.specs import memory_view

ALTERNATIVES = {
    "dp": (1, 2), "tp": (1, 2), "pp": (1, 2, 4), "cp": (1, 2), "ep": (1, 2), "sp": (None, True, False),
    "zero": (0, 1, 2, 3), "micro_batch": (1, 2), "recompute": ("none", "selective", "full"),
    "schedule": ("1f1b", "gpipe", "interleaved"), "virtual_stages": (1, 2),
    "placement": (("tp", "cp", "dp", "pp"), ("tp", "cp", "pp", "dp")), "etp": (0, 1),
    "first_stage_layers": (0, 4), "last_stage_layers": (0, 4), "overlap_grad_reduce": (False, True),
    "overlap_param_gather": (False, True), "grad_dtype": ("fp32", "bf16"), "grad_accumulation_fusion": (False, True),
    "fused_cross_entropy": (False, True), "overlap_tp_comm": (False, True), "overlap_p2p_comm": (False, True),
    "fp8_params": (False, True), "master_weights": ("fp32", "bf16", "remainders", "none"),
    "optimizer_dtype": ("fp32", "bf16"), "reshard_after_forward": (False, True), "expandable_segments": (False, True),
}
# legal starting layouts: (model, parallelism); 8 GPUs each
LAYOUTS = (
    ("llama3.1-8b", core.Parallelism(dp=2, tp=2, pp=2, zero=1, recompute="selective")),
    ("llama3.1-8b", core.Parallelism(dp=1, tp=2, pp=4, schedule="interleaved", virtual_stages=2, zero=3)),
    ("mixtral-8x7b", core.Parallelism(dp=4, tp=2, ep=2, zero=1, micro_batch=2)),
    ("gpt-oss-120b", core.Parallelism(dp=2, tp=2, pp=2, zero=2, recompute="full")),
)
WORK = core.TrainWorkload(global_batch=16, seq=4096)
GPUS = 8


def _memory(model, hw, par, work, gpus):
    shape = train_shape(par, work)
    return memory.training_memory(model, hw, par, shape, work.global_batch // (par.dp * par.micro_batch),
                                  shape.tokens, False)


def _memory_fresh(model, hw, par, work, gpus):
    shape = train_shape(par, work)
    return memory.training_memory.uncached(model, hw, par, shape, work.global_batch // (par.dp * par.micro_batch),
                                           shape.tokens, False)


# name -> (memoized function, its fresh twin, the fields it is memoized on), each called as (model, hw, par, work, gpus)
CASES = {
    "train_work": (energy._train_work, energy._train_work.uncached, energy._train_work.fields),
    "layer_work": (energy._layer_work, energy._layer_work.uncached, energy._layer_work.fields),
    "pipeline": (training._pipeline, training._pipeline.uncached, training._pipeline.fields),
    "amax_sync": (training.amax_sync, training.amax_sync.uncached, training.amax_sync.fields),
    "power": (energy._train_power_state, energy._train_power_state.uncached, energy._train_power_state.fields),
    "dp_syncs": (lambda m, h, p, w, g: training._dp_syncs(m, h, p, h.dims_for(g)),
                 lambda m, h, p, w, g: training._dp_syncs.uncached(m, h, p, h.dims_for(g)), training._dp_syncs.fields),
    "optimizer": (lambda m, h, p, w, g: training.optimizer_step_s(m, h, p),
                  lambda m, h, p, w, g: training.optimizer_step_s.uncached(m, h, p), training.optimizer_step_s.fields),
    "spans": (lambda m, h, p, w, g: layout._group_spans(p, h.dims_for(g)),
              lambda m, h, p, w, g: layout._group_spans.uncached(p, h.dims_for(g)), layout._group_spans.fields),
    "memory": (_memory, _memory_fresh, memory.training_memory.fields),
}


def comparable(value):
    """A result with a memory estimate's buffers written out (a callable compares by identity)."""
    if isinstance(value, MemoryEstimate):
        return ({f.name: getattr(value, f.name) for f in fields(value) if f.name != "buffers"}, value.describe())
    return value


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_memo_hit_equals_a_fresh_call(name):
    memoized, fresh, kept = CASES[name]
    free = [f for f in ALTERNATIVES if f not in kept]
    hw = core.load_hardware("h100-sxm5-80gb")
    draw = random.Random(name)
    checked = 0
    for model_name, par in LAYOUTS:
        model = core.load_model(model_name)
        memoized(model, hw, par, WORK, GPUS)
        for _ in range(12):
            changed = {f: draw.choice(ALTERNATIVES[f]) for f in draw.sample(free, min(3, len(free)))}
            other = replace(par, **changed)
            assert comparable(memoized(model, hw, other, WORK, GPUS)) == comparable(fresh(model, hw, other, WORK, GPUS)), (
                f"{name} memoized on {kept} reads {sorted(changed)}")
            checked += 1
    assert checked == 48


def test_the_memo_keys_on_its_fields():
    """Two layouts apart in a field the memo keeps are two entries."""
    hw, model = core.load_hardware("h100-sxm5-80gb"), core.load_model("llama3.1-8b")
    par = core.Parallelism(dp=2, tp=2, pp=2)
    one = training.optimizer_step_s(model, hw, par)
    assert training.optimizer_step_s(model, hw, replace(par, zero=3)) < one  # shards the Adam update 2 ways
    assert training.optimizer_step_s(model, hw, replace(par, overlap_grad_reduce=False)) == one


def _rate_variants(hw):
    """`hw` with each kind of rate changed: what a bandwidth, FLOP/s, clock, network or
    calibration what-if makes."""
    gpu, dim = hw.gpu, hw.network[0]
    return [
        replace(hw, gpu=replace(gpu, hbm=replace(gpu.hbm, bandwidth_bps=gpu.hbm.bandwidth_bps / 2))),
        replace(hw, gpu=replace(gpu, peak_flops=tuple((d, 3 * f) for d, f in gpu.peak_flops), clock_hz=gpu.clock_hz / 2)),
        replace(hw, gpu=replace(gpu, l2=replace(gpu.l2, bandwidth_bps=1e12), launch_overhead_s=1e-5)),
        replace(hw, network=(replace(dim, link_bandwidth_bps=dim.link_bandwidth_bps / 4, latency_s=1e-4),
                             *hw.network[1:])),
        replace(hw, calibration=replace(hw.calibration, compute_efficiency=0.5, sustained_clock=0.9)),
    ]


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_memory_and_layout_verdicts_read_no_rate(dtype):
    """estimate_memory and evaluate's layout check read the hardware's memory_view, shared by
    variants apart only in rates: on each such variant they give what the memory model and
    check_layout give on the variant itself, training and inference alike."""
    base = replace(core.load_hardware("h100-sxm5-80gb"), dtype=dtype)
    infer = core.InferWorkload(batch=8, prompt=1024, decode=256)
    illegal = core.Parallelism(dp=2, tp=3, pp=1)  # 3 does not divide the heads
    for model_name, par in LAYOUTS:
        model = core.load_model(model_name)
        for hw in [base] + _rate_variants(base):
            assert memory_view(hw) is memory_view(base)
            assert comparable(estimate_memory(model, hw, par, WORK)) == comparable(_memory_fresh(model, hw, par, WORK, GPUS))
            engine = replace(par, zero=0, overlap_param_gather=False)
            assert comparable(estimate_memory(model, hw, engine, infer)) == comparable(memory.inference_memory(
                model, hw, engine, infer.batch, infer.prompt, infer.decode, infer.kv_bytes(hw)))
            assert _verdict(model, memory_view(hw), illegal, WORK, 6)[0] == layout.check_layout(
                model, hw, illegal, WORK, 6)
