import pytest

from core.collectives import collective_time, one_dim_time
from core.specs import NetworkDim

NVSWITCH = NetworkDim("nvlink", "switch", 8, 300e9, 1e-6, 0.8)
IB = NetworkDim("ib", "switch", 4, 25e9, 5e-6, 1.0)


def test_ring_all_reduce_closed_form():
    size, n = 1e9, 8
    expected = 2 * (n - 1) / n * size / (300e9 * 0.8) + 2 * (n - 1) * 1e-6
    assert one_dim_time("all_reduce", size, NVSWITCH, n) == pytest.approx(expected)


def test_small_all_reduce_uses_the_log_depth_tree():
    n = 8
    assert one_dim_time("all_reduce", 8192, NVSWITCH, n) == pytest.approx(2 * 3 * 1e-6 + 2 * 8192 / 240e9)


def test_hierarchical_all_reduce_composes_dimensions(a100):
    dims = (NVSWITCH, IB)
    times = collective_time(a100, dims, "all_reduce", 1e9, ((0, 8), (1, 4)))
    step = a100.calibration.collective_step_s
    eff = a100.calibration.network_efficiency
    inner = 2 * one_dim_time("reduce_scatter", 1e9, NVSWITCH, 8, eff, step)
    outer = one_dim_time("all_reduce", 1e9 / 8, IB, 4, eff, step)
    assert times == pytest.approx({"nvlink": inner, "ib": outer})


def test_a_group_of_one_costs_nothing(a100):
    assert collective_time(a100, (NVSWITCH,), "all_reduce", 1e9, ()) == {}
