"""`rapid replay`: our own bundle replays to the step time it was emitted with, a trace set in
the shape ASTRA-sim's microbenchmark generator writes replays to the ring closed form, faults
slow it, and unsupported nodes get one line naming the node."""
import json

import pytest

import core
from chakra_bundles import NEEDS_MODELS, SMALL_DEEPSEEK, SMALL_NEMOTRON, layout_model, ring_network, write_generator_set
from sweep.cli import main


def _replay(capsys, *argv):
    assert main(["replay", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_foreign_all_reduce_matches_the_ring_closed_form(tmp_path, capsys):
    npus, size = 8, 1 << 20
    prefix = write_generator_set(tmp_path, npus, size)
    report = _replay(capsys, prefix, "--network", ring_network(tmp_path, npus))
    step_s = 500e-9 + size / npus / (50 * 2**30)  # one hop and one chunk per step
    assert report["end_time_s"] == pytest.approx(2 * (npus - 1) * step_s, rel=1e-9)
    assert report["rank_end_s"] == pytest.approx([report["end_time_s"]] * npus)
    assert report["rank_exposed_comm_s"] == pytest.approx(report["rank_end_s"])
    assert report["busiest_links"]


def test_foreign_all_gather_reads_comm_size_as_each_ranks_input(tmp_path, capsys):
    npus, size = 4, 1 << 20
    prefix = write_generator_set(tmp_path, npus, size, "ALL_GATHER")
    report = _replay(capsys, prefix, "--network", ring_network(tmp_path, npus))
    assert report["end_time_s"] == pytest.approx((npus - 1) * (500e-9 + size / (50 * 2**30)), rel=1e-9)


def test_a_system_file_picks_the_algorithm_of_nodes_that_name_none(tmp_path, capsys):
    prefix = write_generator_set(tmp_path, 8, 1 << 20)
    network = ring_network(tmp_path, 8)
    system = tmp_path / "system.json"
    ring = _replay(capsys, prefix, "--network", network)["end_time_s"]
    system.write_text(json.dumps({"all-reduce-implementation": ["direct"]}))
    assert _replay(capsys, prefix, "--network", network, "--system", system)["end_time_s"] != ring
    system.write_text(json.dumps({"all-reduce-implementation": ["bogus"]}))
    assert main(["replay", str(prefix), "--network", str(network), "--system", str(system)]) == 2
    err = capsys.readouterr().err
    assert "system.json" in err and "all-reduce-implementation" in err and "halvingDoubling" in err


def test_a_soft_fault_slows_the_replay(tmp_path, capsys):
    prefix = write_generator_set(tmp_path, 8, 1 << 24)
    network = ring_network(tmp_path, 8)
    healthy = _replay(capsys, prefix, "--network", network)["end_time_s"]
    faulty = _replay(capsys, prefix, "--network", network, "--fault", "0-1:0.5")["end_time_s"]
    assert faulty > 1.5 * healthy


def test_unsupported_node_gets_one_line_naming_it(tmp_path, capsys):
    prefix = write_generator_set(tmp_path, 2, 1024, node_type="MEM_LOAD_NODE")
    assert main(["replay", str(prefix), "--network", str(ring_network(tmp_path, 2))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "coll.0.et" in err and "node 0 'all_reduce_2npus'" in err and "MEM_LOAD_NODE" in err


def test_unknown_communicator_names_the_field(tmp_path, capsys):
    ours = tmp_path / "ours"
    ours.mkdir()
    model, hw = core.load_model("qwen2.5-3b"), core.load_hardware("a100-sxm4-80gb")
    core.evaluate(model, hw, core.Parallelism(tp=2), core.InferWorkload(batch=1, prompt=64, decode=2), 2,
                  backend="astra-flattened", emit_traces=ours)
    assert main(["replay", str(ours / model.name), "--network", str(ours / "network.yml")]) == 2
    assert "pg_name" in capsys.readouterr().err


@pytest.mark.parametrize("ref, par, work, gpus", [
    ("qwen2.5-3b", core.Parallelism(tp=2, pp=2, sp=True), core.TrainWorkload(global_batch=4, seq=256), 4),
    ("qwen2.5-3b", core.Parallelism(tp=2), core.InferWorkload(batch=1, prompt=64, decode=3), 2),
    # layers that differ: dense and MoE layers and the MTP module; Mamba-2, attention and MoE blocks
    (SMALL_DEEPSEEK, core.Parallelism(pp=2, ep=2, dp=2, virtual_stages=1), core.TrainWorkload(global_batch=4, seq=256), 4),
    pytest.param(SMALL_NEMOTRON, core.Parallelism(tp=2, pp=2, sp=True), core.TrainWorkload(global_batch=4, seq=256), 4,
                 marks=NEEDS_MODELS),
    pytest.param(SMALL_NEMOTRON, core.Parallelism(tp=2, pp=2), core.InferWorkload(batch=1, prompt=64, decode=3), 4,
                 marks=NEEDS_MODELS),
])
def test_our_bundle_replays_to_the_emitted_step_time(tmp_path, capsys, ref, par, work, gpus):
    model, hw = layout_model(ref), core.load_hardware("a100-sxm4-80gb")
    record = core.evaluate(model, hw, par, work, gpus, backend="astra-flattened", emit_traces=tmp_path)
    report = _replay(capsys, tmp_path / model.name, "--network", tmp_path / "network.yml",
                     "--comm-groups", tmp_path / "comm_group.json")
    assert report["end_time_s"] == pytest.approx(record["step_time_s"], rel=1e-9)


def test_exposed_communication_is_charged_in_end_order_ties_in_node_order():
    """Rank 0: a compute node and a send end at 1 (the compute node first: the send adds nothing),
    a recv at 3 adds 2. Rank 1: a collective, then a compute node, end at 2: the collective takes
    the 2. Rank 2 has no nodes. The ranks' nodes interleave. In reverse order the send and the
    compute node of rank 1 come first, and take the time instead."""
    import numpy as np

    from core.chakra.replay import exposed_comm_s

    rank = np.array([1, 0, 1, 0, 0], np.int32)
    end_s = np.array([2.0, 1.0, 2.0, 3.0, 1.0])
    is_comm = np.array([True, False, False, True, True])
    assert exposed_comm_s(rank, end_s, is_comm, 3).tolist() == [2.0, 2.0, 0.0]
    assert exposed_comm_s(rank[::-1].copy(), end_s[::-1].copy(), is_comm[::-1].copy(), 3).tolist() == [3.0, 0.0, 0.0]
