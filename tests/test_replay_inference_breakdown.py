"""Inference replays split the critical rank's time into compute and communication as the
closed form does: the hierarchical backend's stage passes carry their layers' exposed
tensor-parallel traffic (they once counted wholly as compute), and NCCL's protocol start-up
ahead of each collective counts as that collective's time on both replay backends.

A100 (no in-switch all-reduce) keeps the closed form and the replay on the same algorithms,
so their communication parts can be compared; with one replica nothing contends."""
import numpy as np
import pytest
import pyarrow.compute as pc

import core
from core.astra_exec import _context, _ops_block
from core.graph import build_decode_layer
from core.replay import COMPUTE, CommClasses
from sweep.engine import run_study
from sweep.store import read_results
from sweep.study import load_study

REPLAYS = ("astra-hierarchical", "astra-flattened")
WORK = core.InferWorkload(batch=8, prompt=512, decode=16)
LAYOUTS = {"tp4-pp2": (core.Parallelism(tp=4, pp=2), 8), "tp4-pp1": (core.Parallelism(tp=4, pp=1), 4),
           "tp8-pp1": (core.Parallelism(tp=8, pp=1), 8)}


@pytest.fixture(scope="module")
def records():
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("a100-sxm4-80gb")
    return {(name, backend): core.evaluate(model, hw, par, WORK, gpus, backend=backend)
            for name, (par, gpus) in LAYOUTS.items() for backend in ("analytical",) + REPLAYS}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", REPLAYS)
def test_replay_breakdown_matches_the_closed_form_without_contention(records, layout, backend):
    analytical, replayed = records[(layout, "analytical")]["breakdown"], records[(layout, backend)]["breakdown"]
    assert set(replayed) == set(analytical) == {"compute_s", "comm_nvlink_s"}
    assert replayed["comm_nvlink_s"] == pytest.approx(analytical["comm_nvlink_s"], rel=0.05)
    assert replayed["compute_s"] == pytest.approx(analytical["compute_s"], rel=0.02)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", REPLAYS)
def test_replay_breakdown_sums_to_the_request_time(records, layout, backend):
    record = records[(layout, backend)]
    assert sum(record["breakdown"].values()) == pytest.approx(record["step_time_s"], rel=1e-9)
    assert all(value >= 0 for value in record["breakdown"].values())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hierarchical_and_flattened_split_alike(records, layout):
    hierarchical = records[(layout, "astra-hierarchical")]["breakdown"]
    flattened = records[(layout, "astra-flattened")]["breakdown"]
    assert hierarchical.keys() == flattened.keys()
    for key, value in flattened.items():
        assert hierarchical[key] == pytest.approx(value, rel=1e-3), key


def test_tp_only_layout_on_h100_reports_tensor_parallel_traffic():
    """The reviewer's case, small: tp-only inference on H100 (the replay lacks NVLS, so only
    the presence and a loose size are checked)."""
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("h100-sxm5-80gb")
    par = core.Parallelism(tp=8, pp=1)
    analytical = core.evaluate(model, hw, par, WORK, 8)["breakdown"]
    for backend in REPLAYS:
        record = core.evaluate(model, hw, par, WORK, 8, backend=backend)
        comm = record["breakdown"].get("comm_nvlink_s", 0.0)
        assert comm == pytest.approx(analytical["comm_nvlink_s"], rel=0.5), backend
        assert sum(record["breakdown"].values()) == pytest.approx(record["step_time_s"], rel=1e-9)


def test_protocol_startup_is_labelled_as_its_collective():
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("a100-sxm4-80gb")
    ctx = _context(model, hw, core.Parallelism(tp=4), 4)
    ops = build_decode_layer(model, hw, 8, 513, 4, WORK.kv_bytes(hw))
    block = _ops_block(ctx, ops, CommClasses())
    kind, label = block.columns["kind"], block.columns["label"]
    names = [op.name for op in ops]
    startups = np.flatnonzero((kind == COMPUTE) & (label > 0))
    assert startups.size == sum(op.kind == "comm" and op.cover_s <= 0 for op in ops) > 0
    assert (label[startups] == label[startups + 1]).all()
    assert (kind[startups + 1] != COMPUTE).all()
    assert (label[kind == COMPUTE][label[kind == COMPUTE] <= 0] == 0).all()
    assert len(names) + startups.size == kind.size


def test_sweep_table_has_a_comm_column_for_tp_only_inference(write_study):
    study = load_study(write_study(name="infer-tp", gpus=4, backend="astra-hierarchical",
                                   workload={"mode": "infer", "batch": 4, "prompt": 256, "decode": 8},
                                   space={"tp": [4], "pp": [1], "cp": [1], "zero": [0], "micro_batch": [1],
                                          "recompute": ["none"], "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}))
    run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output).filter(pc.field("feasible"))
    assert table.num_rows > 0
    assert "breakdown_comm_nvlink_s" in table.column_names
    assert all(value > 0 for value in table.column("breakdown_comm_nvlink_s").to_pylist())
