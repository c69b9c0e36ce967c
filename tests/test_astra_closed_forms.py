"""Contention-free collectives match their textbook times (within 0.5 %)."""
import math

import pytest

from astra_backend import Dimension, Network

MIB = 2**20
GBPS = 1e9  # bytes per second in one GB/s


def close(simulated, expected):
    return simulated == pytest.approx(expected, rel=5e-3)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("size", [1 * MIB, 64 * MIB])
def test_ring_all_reduce_on_ring(n, size):
    bandwidth_gbps, latency_s = 100, 1e-6
    network = Network([Dimension("ring", n, bandwidth_gbps, latency_s)])
    expected = 2 * (n - 1) / n * size / (bandwidth_gbps * GBPS) + 2 * (n - 1) * latency_s
    assert close(network.collective("all_reduce", size, "ring").time_s, expected)


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
def test_ring_reduce_scatter_and_all_gather_on_unidirectional_ring(kind):
    n, size, latency_s = 8, 16 * MIB, 2e-6
    network = Network([Dimension("ring_uni", n, 50, latency_s)])
    expected = (n - 1) / n * size / (50 * GBPS) + (n - 1) * latency_s
    assert close(network.collective(kind, size).time_s, expected)


@pytest.mark.parametrize("n", [4, 8, 32])
@pytest.mark.parametrize("size", [1 * MIB, 256 * MIB])
def test_direct_all_to_all_on_switch(n, size):
    # Every NPU sends size/n to each peer at once: its up-link carries (n-1)/n of the buffer;
    # a path through the switch is two links.
    latency_s = 1e-6
    network = Network([Dimension("switch", n, 200, latency_s)])
    expected = (n - 1) / n * size / (200 * GBPS) + 2 * latency_s
    assert close(network.collective("all_to_all", size, "direct").time_s, expected)


def test_ring_all_reduce_on_switch_is_not_store_and_forward():
    n, size, latency_s = 8, 64 * MIB, 1e-6
    network = Network([Dimension("switch", n, 100, latency_s)])
    expected = 2 * (n - 1) / n * size / (100 * GBPS) + 2 * (n - 1) * 2 * latency_s
    assert close(network.collective("all_reduce", size).time_s, expected)


def test_halving_doubling_all_reduce_on_switch():
    n, size, latency_s = 16, 64 * MIB, 1e-6
    network = Network([Dimension("switch", n, 100, latency_s)])
    expected = 2 * (n - 1) / n * size / (100 * GBPS) + 2 * math.log2(n) * 2 * latency_s
    assert close(network.collective("all_reduce", size, "halving_doubling").time_s, expected)


@pytest.mark.parametrize("n0,n1", [(4, 8), (8, 4), (2, 16)])
@pytest.mark.parametrize("size", [4 * MIB, 128 * MIB])
def test_hierarchical_all_reduce_on_ring_by_switch(n0, n1, size):
    # reduce-scatter on the rings, all-reduce of size/n0 across the switch, all-gather on the rings
    b0, a0, b1, a1 = 300 * GBPS, 0.5e-6, 50 * GBPS, 2e-6
    network = Network([Dimension("ring", n0, b0 / GBPS, a0), Dimension("switch", n1, b1 / GBPS, a1)])
    ring_phase = (n0 - 1) * (size / n0 / b0 + a0)
    switch_phase = 2 * (n1 - 1) * (size / n0 / n1 / b1 + 2 * a1)
    result = network.collective("all_reduce", size, "ring", chunks=1)
    assert close(result.time_s, 2 * ring_phase + switch_phase)
    assert result.busbw_gbps == pytest.approx(result.algbw_gbps * 2 * (n0 * n1 - 1) / (n0 * n1))


def test_chunks_pipeline_dimensions():
    network = Network([Dimension("ring", 4, 300, 0.5e-6), Dimension("switch", 8, 50, 2e-6)])
    whole = network.collective("all_reduce", 1024 * MIB, chunks=1).time_s
    pipelined = network.collective("all_reduce", 1024 * MIB, chunks=8).time_s
    assert pipelined < 0.8 * whole


def test_send_recv_crosses_dimensions_cut_through():
    # 0 -> 5 on Ring(4) x Ring(4): one hop in dim 0, one in dim 1; the message pays the slower link once.
    network = Network([Dimension("ring", 4, 100, 1e-6), Dimension("ring", 4, 25, 3e-6)])
    result = network.send_recv(0, 5, 8 * MIB)
    assert close(result.time_s, 8 * MIB / (25 * GBPS) + 1e-6 + 3e-6)


def test_hierarchical_all_gather_and_reduce_scatter_on_ring_by_switch():
    n0, n1, size = 4, 8, 64 * MIB
    b0, a0, b1, a1 = 300 * GBPS, 0.5e-6, 50 * GBPS, 2e-6
    network = Network([Dimension("ring", n0, b0 / GBPS, a0), Dimension("switch", n1, b1 / GBPS, a1)])
    ring_phase = (n0 - 1) * (size / n0 / b0 + a0)
    switch_phase = (n1 - 1) * (size / n0 / n1 / b1 + 2 * a1)
    assert close(network.collective("reduce_scatter", size).time_s, ring_phase + switch_phase)
    assert close(network.collective("all_gather", size).time_s, ring_phase + switch_phase)


def test_hierarchical_broadcast_crosses_the_slow_dimension_once():
    # root 5 = (1, 1): chain of 8 over the switch along dim 1 first, then chains of 4 on the rings.
    n0, n1, size = 4, 8, 64 * MIB
    b0, b1 = 300 * GBPS, 50 * GBPS
    network = Network([Dimension("ring", n0, b0 / GBPS, 0.0), Dimension("switch", n1, b1 / GBPS, 0.0)])
    result = network.collective("broadcast", size, root=5)
    assert close(result.time_s, (n1 - 1) * size / b1 + (n0 - 1) * size / b0)
    assert result.links.bytes_[result.links.dim == 1].sum() == 2 * (n1 - 1) * size
