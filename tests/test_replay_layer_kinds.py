"""Replays of models whose layers differ: each stage and model chunk replays its own layers'
kinds in order (the MTP modules closing the last one), a model declared kind by kind replays
as its uniform twin, and fault samples re-run the kinds they touch."""
import dataclasses

import numpy as np
import pytest

import core
from chakra_bundles import NEEDS_MODELS, SMALL_DEEPSEEK, SMALL_NEMOTRON, layout_model
from core.model.layout import chunk_layers, chunk_runs
from core.model.specs import LayerKind, Parallelism
from core.replay.faults import FaultReplay

BACKENDS = ("astra-hierarchical", "astra-flattened")
ROOMY = {"gpu.hbm.capacity": "1000 GB"}  # memory is not what these tests are about


def _kinds(runs) -> list:
    """A chunk's runs as (FFN, mixer, count) for reading."""
    return [("moe" if spec.moe else "dense", spec.mixer, n) for spec, n in runs]


def test_interleaved_chunks_hold_the_layers_megatron_gives_them_and_mtp_closes_the_last():
    """Six layers (two dense, four MoE) over pp = 2 stages of three chunks: chunk c of stage s
    holds layer c * pp + s; the MTP module (a MoE layer) runs after layer 5 on stage 1."""
    model = layout_model(SMALL_DEEPSEEK)
    par = Parallelism(pp=2, dp=1, schedule="interleaved", virtual_stages=3)
    runs = chunk_runs(model, par, chunk_layers(model.layers, par))
    assert [[_kinds(chunk) for chunk in stage] for stage in runs] == [
        [[("dense", "attention", 1)], [("moe", "attention", 1)], [("moe", "attention", 1)]],
        [[("dense", "attention", 1)], [("moe", "attention", 1)], [("moe", "attention", 2)]]]
    serving = chunk_runs(model, par, chunk_layers(model.layers, par), mtp=False)
    assert _kinds(serving[1][2]) == [("moe", "attention", 1)]


@NEEDS_MODELS
def test_a_hybrid_stage_runs_its_blocks_in_order():
    model = layout_model(SMALL_NEMOTRON)  # pattern MEM*EM: Mamba, MoE, Mamba | attention, MoE, Mamba
    runs = chunk_runs(model, Parallelism(pp=2), ((3,), (3,)))
    assert [_kinds(stage[0]) for stage in runs] == [
        [("dense", "mamba", 1), ("moe", "none", 1), ("dense", "mamba", 1)],
        [("dense", "attention", 1), ("moe", "none", 1), ("dense", "mamba", 1)]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("par, work", [
    (Parallelism(tp=2, pp=2, ep=2, dp=2, sp=True, zero=1), core.TrainWorkload(global_batch=8, seq=512)),
    (Parallelism(pp=2, ep=2, dp=4, schedule="interleaved", virtual_stages=2), core.TrainWorkload(global_batch=8, seq=512)),
    (Parallelism(tp=2, pp=2), core.InferWorkload(batch=2, prompt=128, decode=4)),
])
def test_layers_declared_one_by_one_replay_as_the_uniform_model(backend, par, work):
    uniform = core.load_model("mixtral-8x7b", {"layers": 8})
    declared = dataclasses.replace(uniform, layer_kinds=(LayerKind(ffn="moe"),) * uniform.layers)
    hw = core.load_hardware("h100-sxm5-80gb", ROOMY)
    a, b = (core.evaluate(m, hw, par, work, par.gpus, backend=backend) for m in (uniform, declared))
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-9)
    assert b["breakdown"] == pytest.approx(a["breakdown"], rel=1e-9)


@NEEDS_MODELS
@pytest.mark.parametrize("backend", BACKENDS)
def test_fault_samples_of_a_hybrid_model_start_from_its_replay(backend):
    model = layout_model(SMALL_NEMOTRON)
    hw = core.load_hardware("a100-sxm4-80gb", ROOMY)
    par, work = Parallelism(tp=2, pp=2, dp=2, sp=True), core.TrainWorkload(global_batch=8, seq=512)
    replay = FaultReplay(model, hw, par, work, 8, backend)
    record = core.evaluate(model, hw, par, work, 8, backend=backend)
    assert replay.baseline_s == pytest.approx(record["step_time_s"], rel=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(3):
        link = replay.links[int(rng.integers(len(replay.links)))]
        assert replay.run({(link.a, link.b): 0.3}, {}) >= replay.baseline_s
    assert replay.run({}, {0: 0.5}) > replay.baseline_s  # a straggler slows every kind it runs
