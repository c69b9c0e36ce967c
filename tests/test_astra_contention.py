"""Shared links split bandwidth fairly; soft faults slow links, hard faults reroute or name the cut."""
import numpy as np
import pytest

from astra_backend import Dimension, HardFault, Network, NoRouteError, SoftFault, Trace
from astra_backend.trace import RECV, SEND

MIB = 2**20
GBPS = 1e9


def fan_in(k, size):
    """k NPUs each send `size` bytes to NPU 0 at once: k flows through NPU 0's switch down-link."""
    ranks, kinds, peers = [], [], []
    for sender in range(1, k + 1):
        ranks += [sender, 0]
        kinds += [SEND, RECV]
        peers += [0, sender]
    n = len(ranks)
    return Trace(rank=np.array(ranks), kind=np.array(kinds), peer=np.array(peers), bytes_=np.full(n, float(size)))


@pytest.mark.parametrize("k", [2, 4, 8])
def test_k_flows_through_one_link_take_k_times_as_long(k):
    network = Network([Dimension("switch", k + 1, 100, 1e-6)])
    alone = network.send_recv(1, 0, 16 * MIB).time_s
    shared = network.replay(fan_in(k, 16 * MIB))
    transfer = 16 * MIB / (100 * GBPS)
    assert alone == pytest.approx(transfer + 2e-6, rel=1e-9)
    assert shared.time_s - 2e-6 == pytest.approx(k * (alone - 2e-6), rel=1e-2)
    down_link = np.flatnonzero((shared.links.src == k + 1) & (shared.links.dst == 0))[0]
    assert shared.links.peak_flows[down_link] == k
    assert shared.links.bytes_[down_link] == k * 16 * MIB
    assert shared.links.busy_s[down_link] == pytest.approx(k * transfer)


def test_max_min_fairness_gives_spare_capacity_to_unconstrained_flows():
    # Flows 1->0 and 2->0 share NPU 0's down-link; flow 3->4 is alone and runs at full speed.
    network = Network([Dimension("switch", 5, 100, 0.0)])
    trace = Trace(rank=np.array([1, 0, 2, 0, 3, 4]), kind=np.array([SEND, RECV] * 3),
                  peer=np.array([0, 1, 0, 2, 4, 3]), bytes_=np.full(6, 1e9))
    ends = network.replay(trace).node_end_s
    assert ends[[0, 2]] == pytest.approx([0.02, 0.02])
    assert ends[4] == pytest.approx(0.01)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("factor", [0.5, 0.25])
def test_soft_fault_stretches_ring_bandwidth_term(n, factor):
    size, latency_s = 64 * MIB, 1e-6
    healthy = Network([Dimension("ring_uni", n, 100, latency_s)])
    faulty = healthy.with_faults(soft_faults=[SoftFault(0, 1, factor)])
    bandwidth_term = 2 * (n - 1) / n * size / (100 * GBPS)
    latency_term = 2 * (n - 1) * latency_s
    assert healthy.collective("all_reduce", size).time_s == pytest.approx(bandwidth_term + latency_term, rel=1e-3)
    assert faulty.collective("all_reduce", size).time_s == pytest.approx(bandwidth_term / factor + latency_term,
                                                                       rel=1e-2)


def test_soft_fault_extra_latency_adds_to_the_path():
    network = Network([Dimension("ring", 4, 100, 1e-6)], soft_faults=[SoftFault(0, 1, 1.0, 5e-6)])
    assert network.send_recv(0, 1, 0).time_s == pytest.approx(6e-6)


def test_hard_fault_on_torus_reroutes_and_is_slower():
    network = Network([Dimension("torus2d", 16, 100, 1e-6, shape=(4, 4))])
    faulty = network.with_faults(hard_faults=[HardFault(0, 1), HardFault(5, 6)])
    healthy_s = network.collective("all_reduce", 64 * MIB).time_s
    result = faulty.collective("all_reduce", 64 * MIB)
    assert np.isfinite(result.time_s) and result.time_s > healthy_s
    failed = result.links.failed
    assert failed.sum() == 4 and result.links.bytes_[failed].sum() == 0


def test_no_route_names_the_cut():
    network = Network([Dimension("ring", 4, 100, 1e-6)], hard_faults=[HardFault(0, 1), HardFault(3, 0)])
    with pytest.raises(NoRouteError, match=r"no route from NPU 1 to NPU 0: .*cut: 1-0, 3-0\)"):
        network.send_recv(1, 0, MIB)
    with pytest.raises(NoRouteError):
        network.collective("all_reduce", MIB)
    assert network.collective("all_reduce", MIB, group=[1, 2, 3]).time_s > 0


def test_switch_links_are_faulted_by_npu_and_switch_id():
    network = Network([Dimension("switch", 4, 100, 0.0)])
    switch = network.num_npus
    slow = network.with_faults(soft_faults=[SoftFault(2, switch, 0.5)])
    assert slow.send_recv(2, 3, 1e9).time_s == pytest.approx(0.02)
    assert slow.send_recv(0, 1, 1e9).time_s == pytest.approx(0.01)


def test_symmetric_flows_share_a_link_equally_to_a_few_ulps():
    # Direct all-reduce on a bidirectional ring of 64: in each pass every NPU sends a 64th of the
    # buffer to each peer, the nearer way round (32 hops one way at a tie), so every clockwise link
    # carries 1 + 2 + ... + 32 = 528 flows and each counter-clockwise one 496. All 528 get the very
    # same share, end at the same instant and arrive 32 hops later: two such passes, to rounding
    # (shares that drift in the last bits end flows ulps apart: 7e-13 off here).
    n, size, latency_s = 64, 64 * MIB, 500e-9
    network = Network([Dimension("ring", n, 50, latency_s)])
    one_pass = 528 * (size / n) / (50 * GBPS) + 32 * latency_s
    assert network.collective("all_reduce", size, "direct").time_s == pytest.approx(2 * one_pass, rel=1e-14, abs=0)
