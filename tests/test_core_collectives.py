from dataclasses import replace

import pytest

from core.collectives import NVLS_LATENCY_S, PROTOCOLS, all_reduce_times, collective_time, one_dim_time
from core.specs import NetworkDim

NVSWITCH = NetworkDim("nvlink", "switch", 8, 300e9, 1e-6, 0.8)
IB = NetworkDim("ib", "switch", 4, 25e9, 5e-6, 1.0)


def test_large_ring_all_reduce_is_simple_protocol_closed_form():
    size, n = 1e9, 8
    base, extra, _ = PROTOCOLS["simple"]
    expected = base + 2 * (n - 1) * (1e-6 + extra) + 2 * (n - 1) / n * size / (300e9 * 0.8)
    assert one_dim_time("all_reduce", size, NVSWITCH, n) == pytest.approx(expected)


def test_protocol_choice_by_size_inside_a_node():
    """LL's low latency wins small messages, LL128 mid-sized ones, Simple the largest."""
    def best(size):
        times = all_reduce_times(size, NVSWITCH, 8, log_tree=False)
        return min(times, key=times.get)
    assert best(8) == "ring/ll"  # 6.6 + 14 x 1 us
    assert best(8e6) == "ring/ll128"  # above ~4 MB LL128 overtakes LL, below ~24 MB Simple
    assert best(4e9) == "ring/simple"


def test_log_depth_tree_only_across_nodes():
    assert "tree/ll" not in all_reduce_times(8192, NVSWITCH, 8, log_tree=False)
    base, extra, share = PROTOCOLS["ll"]
    expected = base + 2 * 2 * (5e-6 + extra) + 2 * 8192 / (25e9 * share)
    assert all_reduce_times(8192, IB, 4)["tree/ll"] == pytest.approx(expected)


def test_nvls_all_reduce_on_8_gpus_by_hand():
    """The switch reduces: each GPU moves (1 + 1/8) of the buffer once each way at the
    share of the link rate the reduction sustains, after one fixed start-up."""
    dim = replace(NVSWITCH, link_bandwidth_bps=450e9, switch_reduction=0.85)
    size = 2**30
    expected = NVLS_LATENCY_S + 1.125 * size / (450e9 * 0.8 * 0.85)
    assert all_reduce_times(size, dim, 8, log_tree=False)["nvls/simple"] == pytest.approx(expected)
    assert one_dim_time("all_reduce", size, dim, 8, log_tree=False) == pytest.approx(expected)
    assert "nvls/simple" not in all_reduce_times(size, NVSWITCH, 8)  # A100's switch only forwards


def test_hierarchical_all_reduce_composes_dimensions(a100):
    dims = (NVSWITCH, IB)
    times = collective_time(a100, dims, "all_reduce", 1e9, ((0, 8), (1, 4)))
    step = a100.calibration.collective_step_s
    eff = a100.calibration.network_efficiency
    inner = 2 * one_dim_time("reduce_scatter", 1e9, NVSWITCH, 8, eff, step)
    outer = one_dim_time("all_reduce", 1e9 / 8, IB, 4, eff, step)  # across nodes: the tree is offered
    assert times == pytest.approx({"nvlink": inner, "ib": outer})


def test_a_group_of_one_costs_nothing(a100):
    assert collective_time(a100, (NVSWITCH,), "all_reduce", 1e9, ()) == {}
