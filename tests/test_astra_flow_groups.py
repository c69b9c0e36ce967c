"""Flow groups (the flows of a ring step that start together on idle links, run as one unit)
give the results every flow run single gives: the simulator runs both ways on the same input
(the compiled entry points' flow_groups switch) and the figures must agree."""
import random
import re

import numpy as np
import pytest

from astra_backend import Dimension, HardFault, Network, SoftFault, Trace, _netsim
from astra_backend.codes import ALGORITHMS, ALL_REDUCE, COLLECTIVES, COMPUTE, RECV, SEND

MIB = 2**20


def collective_both_ways(network, size, algorithm="ring"):
    """(grouped run, single-flow run) of an all-reduce over every NPU."""
    group = np.arange(network.num_npus, dtype=np.int32)
    return [_netsim.collective(network._dims, network._faults, COLLECTIVES["all_reduce"], ALGORITHMS[algorithm],
                               group, float(size), 0, 1, True, flow_groups=grouped) for grouped in (True, False)]


def replay(network, trace, grouped):
    return _netsim.replay(network._dims, network._faults, trace.arrays(network.num_npus), 1, True, flow_groups=grouped)


def replay_both_ways(network, trace):
    return [replay(network, trace, grouped) for grouped in (True, False)]


def link_figures(run):
    return {key: np.asarray(run["links"][key]) for key in ("bytes", "busy_s", "peak_flows")}


def assert_same(grouped, single):
    assert grouped["time_s"] == single["time_s"]
    assert grouped["flows"] == single["flows"]
    for key in ("node_start_s", "node_end_s", "rank_finish_s"):
        if key in single:
            np.testing.assert_array_equal(np.asarray(grouped[key]), np.asarray(single[key]))
    for key, values in link_figures(single).items():
        np.testing.assert_array_equal(link_figures(grouped)[key], values, err_msg=key)


def ring_with_send(start_s, send_bytes=16 * MIB, ring_bytes=32 * MIB):
    """NPUs 0-3 all-reduce `ring_bytes` on a ring while NPU 0 also sends `send_bytes` to NPU 1 once
    it has computed for start_s: the send shares link 0->1 with one flow of each ring step."""
    return Trace(rank=np.array([0, 0, 1, 0, 1, 2, 3]), kind=np.array([COMPUTE, SEND, RECV] + [ALL_REDUCE] * 4),
                 duration_s=np.array([start_s, 0, 0, 0, 0, 0, 0]),
                 bytes_=np.array([0, send_bytes, send_bytes] + [ring_bytes] * 4), peer=np.array([0, 1, 0, 0, 0, 0, 0]),
                 dep_offsets=np.array([0, 0, 1, 1, 1, 1, 1, 1]), deps=np.array([0]), group=np.zeros(7, dtype=np.int32),
                 group_offsets=np.array([0, 4]), group_npus=np.arange(4))


def test_a_ring_all_reduce_runs_as_one_group_a_step_with_the_single_flows_results():
    # Ring(64) of the benchmark: 126 steps of 64 sends, each step one group on 64 disjoint links.
    network = Network([Dimension("ring_uni", 64, 50, 5e-7)])
    grouped, single = collective_both_ways(network, 64 * MIB)
    assert_same(grouped, single)
    assert grouped["flows"] == 2 * 63 * 64
    assert grouped["grouped_flows"] == 2 * 63 * 64 and grouped["split_groups"] == 0
    assert single["grouped_flows"] == 0


@pytest.mark.parametrize("dims", [
    [Dimension("switch", 16, 100, 1e-6)],                                   # two links a send, none shared
    [Dimension("ring", 4, 300, 1e-6), Dimension("switch", 8, 50, 2e-6)],    # a ring pass per line, in phases
])
def test_ring_passes_on_other_topologies_group_alike(dims):
    grouped, single = collective_both_ways(Network(dims), 8 * MIB)
    assert_same(grouped, single)
    assert grouped["grouped_flows"] == grouped["flows"]


@pytest.mark.parametrize("start_s", [0.0, 2e-4])
def test_a_send_onto_a_groups_link_splits_it_into_single_flows(start_s):
    # At 0 the send starts in the batch the first step's group forms (an open group splits); at
    # 0.2 ms it comes while a later step's group sends (its members take their own end events).
    network = Network([Dimension("ring_uni", 4, 100, 1e-6)])
    grouped, single = replay_both_ways(network, ring_with_send(start_s))
    assert_same(grouped, single)
    assert grouped["split_groups"] >= 1
    alone = network.collective("all_reduce", 32 * MIB)
    assert grouped["node_end_s"][3] > alone.time_s  # the shared link slowed the ring


def test_a_soft_fault_on_one_ring_link_takes_that_flow_out_of_its_steps_group():
    # The flow on the slow link runs at half the rate: a group of its own, ending later, and the
    # steps after it start member by member as their sends get ready.
    network = Network([Dimension("ring_uni", 8, 100, 1e-6)], soft_faults=[SoftFault(2, 3, 0.5)])
    grouped, single = collective_both_ways(network, 16 * MIB)
    assert_same(grouped, single)
    healthy, _ = collective_both_ways(Network([Dimension("ring_uni", 8, 100, 1e-6)]), 16 * MIB)
    assert grouped["time_s"] > healthy["time_s"]


def test_a_rerouted_ring_flow_shares_a_link_that_went_idle_in_the_same_batch():
    # The hard fault sends 2->3 round by 0->1, which a halving-doubling all-reduce of NPUs 0 and 3
    # also crosses: links that other flows leave and take again at one instant, where a group
    # formed on a link that had gone idle in that batch must still split.
    network = Network([Dimension("hypercube", 4, 100, 0.0)], hard_faults=[HardFault(2, 3)])
    trace = Trace(rank=np.array([0, 3, 0, 0, 1, 2, 3, 3, 0, 3]), kind=np.array([ALL_REDUCE] * 2 + [COMPUTE] + [ALL_REDUCE] * 4
                                                                              + [COMPUTE] * 3),
                  duration_s=np.array([0.0] * 7 + [1e-6, 0.0, 1e-5]), bytes_=np.array([1e8] * 2 + [0] + [1e8] * 4 + [0] * 3),
                  algorithm=np.array([2, 2] + [0] * 8), peer=np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                  group=np.array([0, 0, 0, 1, 1, 1, 1, 0, 0, 0]),
                  dep_offsets=np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 3, 4]), deps=np.array([2, 4, 3, 6]),
                  group_offsets=np.array([0, 2, 6]), group_npus=np.array([0, 3, 0, 1, 2, 3]))
    grouped, single = replay_both_ways(network, trace)
    assert_same(grouped, single)
    assert grouped["split_groups"] >= 1


TOPOLOGIES = {"ring": [4, 8], "ring_uni": [4, 6], "switch": [4, 8], "torus2d": [4, 9], "hypercube": [4, 8],
              "fattree": [4, 8]}


def random_replay(rng):
    """A small network, maybe faulty, and a trace of collectives on overlapping groups, sends and
    compute that staggers members."""
    dims = []
    for _ in range(rng.choice([1, 1, 2])):
        topology = rng.choice(sorted(TOPOLOGIES))
        extra = {"npus_per_leaf": 2} if topology == "fattree" else {}
        dims.append(Dimension(topology, rng.choice(TOPOLOGIES[topology]), rng.choice([50, 100]),
                              rng.choice([0.0, 1e-6]), **extra))
    links = Network(dims).links()
    pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(links.src.tolist(), links.dst.tolist())})
    network = Network(dims, [SoftFault(*rng.choice(pairs), 0.5)] if rng.random() < 0.3 else [],
                      [HardFault(*rng.choice(pairs))] if rng.random() < 0.2 else [])
    n = network.num_npus
    groups = [sorted(rng.sample(range(n), rng.randint(2, n))) if rng.random() < 0.5 else list(range(n))
              for _ in range(rng.randint(1, 3))]
    columns = {key: [] for key in ("rank", "kind", "group", "peer", "algorithm", "bytes_", "duration_s")}
    deps, last = [], {}

    def node(rank, kind, group=0, peer=0, algorithm=0, size=0.0, seconds=0.0):
        deps.append([last[rank]] if rank in last and rng.random() < 0.8 else [])
        for key, value in zip(columns, (rank, kind, group, peer, algorithm, size, seconds)):
            columns[key].append(value)
        last[rank] = len(columns["rank"]) - 1

    for _ in range(rng.randint(1, 6)):
        event = rng.choice(["compute", "send", "collective", "collective"])
        if event == "compute":
            for rank in rng.sample(range(n), rng.randint(1, n)):
                node(rank, COMPUTE, seconds=rng.choice([0.0, 1e-6, 1e-5, 3e-4]))
        elif event == "send":
            src, dst = rng.sample(range(n), 2)
            size = rng.choice([1e3, 1e6, 1e8])
            node(src, SEND, peer=dst, size=size)
            node(dst, RECV, peer=src, size=size)
        else:
            g = rng.randrange(len(groups))
            size, algorithm = rng.choice([1e3, 1e6, 1e8]), rng.choice([0, 0, 0, 1])
            for member in groups[g]:
                node(member, ALL_REDUCE, group=g, algorithm=algorithm, size=size)
    trace = Trace(**{key: np.array(values) for key, values in columns.items()},
                  dep_offsets=np.cumsum([0] + [len(d) for d in deps]),
                  deps=np.array([i for d in deps for i in d], dtype=np.int64),
                  group_offsets=np.cumsum([0] + [len(g) for g in groups]),
                  group_npus=np.array([m for g in groups for m in g]))
    return network, trace


def test_random_replays_give_the_single_flows_results():
    # Every time, busy time and peak agree exactly. A link's byte count may differ in its last bit:
    # where a group's flow and another flow start on one link at one instant, the two paths may add
    # their bytes in the other order (the events of one instant are handled in another order).
    rng = random.Random(26)
    grouped_flows = split_groups = 0
    for _ in range(300):
        network, trace = random_replay(rng)
        try:
            grouped = replay(network, trace, True)
        except ValueError as exc:  # a hard fault cut a route: the same error both ways
            with pytest.raises(ValueError, match=f"^{re.escape(str(exc))}$"):
                replay(network, trace, False)
            continue
        single = replay(network, trace, False)
        assert grouped["time_s"] == single["time_s"] and grouped["flows"] == single["flows"]
        for key in ("node_start_s", "node_end_s", "rank_finish_s"):
            np.testing.assert_array_equal(np.asarray(grouped[key]), np.asarray(single[key]))
        figures, reference = link_figures(grouped), link_figures(single)
        np.testing.assert_array_equal(figures["busy_s"], reference["busy_s"])
        np.testing.assert_array_equal(figures["peak_flows"], reference["peak_flows"])
        np.testing.assert_allclose(figures["bytes"], reference["bytes"], rtol=1e-14, atol=0)
        grouped_flows += grouped["grouped_flows"]
        split_groups += grouped["split_groups"]
    assert grouped_flows > 0 and split_groups > 0  # both paths of the groups were taken
