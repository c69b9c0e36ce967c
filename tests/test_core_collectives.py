from dataclasses import replace

import pytest

from core.model.collectives import (BARE, PROTOCOLS, all_reduce_times, collective_time, nvls_all_reduce_s, nvls_chunk_bytes,
                                    one_dim_time)
from core.model.loader import load_hardware
from core.model.specs import NetworkDim

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


MIB = 2**20
DGX_H100 = replace(NVSWITCH, link_bandwidth_bps=450e9, latency_s=0.6e-6, switch_reduction=1.0, ll_bandwidth_bps=141e9)


def test_nvls_chunk_shrinks_with_the_message():
    """8 ranks x 16 channels = 128 lanes: 128 KiB chunks from 64 rounds (1 GiB) up, 64 KiB from
    8 rounds of those (64 MiB), 32 KiB from 2 rounds of those (8 MiB), 16 KiB below."""
    lanes = 128
    assert nvls_chunk_bytes(1024 * MIB, lanes) == 128 * 1024
    assert nvls_chunk_bytes(1024 * MIB - 1, lanes) == 64 * 1024
    assert nvls_chunk_bytes(64 * MIB, lanes) == 64 * 1024
    assert nvls_chunk_bytes(64 * MIB - 1, lanes) == 32 * 1024
    assert nvls_chunk_bytes(8 * MIB, lanes) == 32 * 1024
    assert nvls_chunk_bytes(8 * MIB - 1, lanes) == 16 * 1024
    assert nvls_chunk_bytes(8, lanes) == 16 * 1024
    assert nvls_chunk_bytes(512 * MIB, 64) == 128 * 1024  # 4 ranks: half the lanes, half the thresholds


def test_nvls_all_reduce_on_8_gpus_by_hand():
    """2 GiB on 8 GPUs: 128 rounds of 128 lanes x 128 KiB (16 MiB), plus 2 steps to fill the
    three-stage pipeline; each step a fan-in handshake (1 + 3.4 us) and 1.125 x 16 MiB each way
    at the switch's share of the link, after the Simple protocol's 8.4 us start-up."""
    dim = replace(NVSWITCH, link_bandwidth_bps=450e9, switch_reduction=0.85)
    link = 450e9 * 0.8 * 0.85
    expected = 8.4e-6 + 130 * 4.4e-6 + 130 * 1.125 * 16 * MIB / link
    assert all_reduce_times(2048 * MIB, dim, 8, log_tree=False)["nvls/simple"] == pytest.approx(expected)
    assert one_dim_time("all_reduce", 2048 * MIB, dim, 8, log_tree=False) == pytest.approx(expected)
    assert "nvls/simple" not in all_reduce_times(2048 * MIB, NVSWITCH, 8)  # A100's switch only forwards


def test_nvls_message_shorter_than_one_round_of_chunks():
    """1 MiB on 8 GPUs: 16 KiB chunks, so one round holds 2 MiB; the message is one partial
    round, and the fill still takes two more steps of that round."""
    dim = replace(NVSWITCH, link_bandwidth_bps=450e9, switch_reduction=0.85)
    expected = 8.4e-6 + 3 * 4.4e-6 + 3 * 1.125 * MIB / (450e9 * 0.8 * 0.85)
    assert nvls_all_reduce_s(MIB, dim, 8) == pytest.approx(expected)


def test_small_chunks_cost_bandwidth():
    """The marginal cost of a byte is one handshake per round of 128 lanes' chunks plus 1.125
    bytes each way: 256 -> 512 MiB runs on 64 KiB chunks, 2 -> 4 GiB on 128 KiB."""
    dim = replace(NVSWITCH, link_bandwidth_bps=450e9, switch_reduction=0.85)
    wire = 1.125 / (450e9 * 0.8 * 0.85)

    def marginal(size):
        return (nvls_all_reduce_s(2 * size, dim, 8) - nvls_all_reduce_s(size, dim, 8)) / size
    assert marginal(256 * MIB) == pytest.approx(4.4e-6 / (128 * 64 * 1024) + wire)
    assert marginal(2048 * MIB) == pytest.approx(4.4e-6 / (128 * 128 * 1024) + wire)


def test_ll_bus_bandwidth_has_a_ceiling():
    """LL moves half the link's rate (0.5 x 300 x 0.8 = 120 GB/s) unless the GPU's ceiling
    is lower (100 GB/s here); the other protocols keep theirs."""
    capped = replace(NVSWITCH, ll_bandwidth_bps=100e9)
    base, extra, _ = PROTOCOLS["ll"]
    expected = base + 14 * (1e-6 + extra) + 1.75 * 1e6 / 100e9
    assert all_reduce_times(1e6, capped, 8, log_tree=False)["ring/ll"] == pytest.approx(expected)
    uncapped = all_reduce_times(1e6, NVSWITCH, 8, log_tree=False)
    assert uncapped["ring/ll"] == pytest.approx(base + 14 * (1e-6 + extra) + 1.75 * 1e6 / 120e9)
    assert all_reduce_times(1e6, capped, 8, log_tree=False)["ring/simple"] == pytest.approx(uncapped["ring/simple"])


def test_one_dgx_h100_runs_ll_then_nvls():
    """On one DGX H100, LL's few microseconds win small messages; from a couple of MiB the
    switch's reduction (1.125 of the buffer each way against the ring's 1.75) wins."""
    def best(size):
        times = all_reduce_times(size, DGX_H100, 8, log_tree=False)
        return min(times, key=times.get)
    assert best(8) == "ring/ll"
    assert best(256 * 1024) == "ring/ll"
    assert best(4 * MIB) == "nvls/simple"
    assert best(16 * 1024 * MIB) == "nvls/simple"


def test_hierarchical_all_reduce_composes_dimensions(a100):
    dims = (NVSWITCH, IB)
    times = collective_time(a100, dims, "all_reduce", 1e9, ((0, 8), (1, 4)))
    step = a100.calibration.collective_step_s
    eff = a100.calibration.network_efficiency
    inner = 2 * one_dim_time("reduce_scatter", 1e9, NVSWITCH, 8, eff, step)
    outer = one_dim_time("all_reduce", 1e9 / 8, IB, 4, eff, step)  # across nodes: the tree is offered
    assert times == pytest.approx({"nvlink": inner, "ib": outer})


def test_all_to_all_dimensions_move_at_once(a100):
    """An all-to-all sends to every peer at once, so its NVLink and InfiniBand parts overlap and
    the slower sets its time, charged to that dimension; beyond the node it moves outer_share
    of the buffer (group-limited routing), which can leave NVLink the slower."""
    dims = (NVSWITCH, IB)
    eff, step = a100.calibration.network_efficiency, a100.calibration.collective_step_s
    inner = one_dim_time("all_to_all", 1e9, NVSWITCH, 8, eff, step)
    outer = one_dim_time("all_to_all", 1e9, IB, 4, eff, step)
    assert outer > inner
    assert collective_time(a100, dims, "all_to_all", 1e9, ((0, 8), (1, 4))) == pytest.approx({"ib": outer})
    assert one_dim_time("all_to_all", 0.01e9, IB, 4, eff, step) < inner
    assert collective_time(a100, dims, "all_to_all", 1e9, ((0, 8), (1, 4)), outer_share=0.01) == pytest.approx(
        {"nvlink": inner})


def test_a_group_of_one_costs_nothing(a100):
    assert collective_time(a100, (NVSWITCH,), "all_reduce", 1e9, ()) == {}


def test_two_gpus_gain_nothing_from_the_switch():
    """On 2 GPUs the ring moves 2 x 1/2 of the buffer each way, NVLS 1 + 1/2: the ring wins
    large messages (nccl#1455 measures the same bus bandwidth for both up to 4 GPUs)."""
    times = all_reduce_times(1024 * MIB, DGX_H100, 2, log_tree=False)
    assert min(times, key=times.get) == "ring/simple"


def test_hopper_preset_reduces_in_the_switch_and_caps_ll():
    """DGX H100's NVSwitch reduces (NVLS, at 0.8 of the link rate, held when the ring was fitted)
    and its LL tops out at 141 GB/s (NCCL's Hopper single-node llMaxBw); A100's NVSwitch only
    forwards."""
    nvlink = load_hardware("h100-sxm5-80gb").network[0]
    assert nvlink.efficiency * nvlink.switch_reduction == pytest.approx(0.8, abs=1e-3)
    assert nvlink.ll_bandwidth_bps == 141e9
    assert load_hardware("a100-sxm4-80gb").network[0].switch_reduction == 0.0


def test_ring_fill_costs_few_ranks_most():
    """A ring pass with 0.5 chunk of fill: 2 ranks move (1 + 0.5) / 2 of the buffer where the
    bare ring moves 1 / 2 (+50 %), 8 ranks (7 + 0.5) / 8 for 7 / 8 (+7 %); all-reduce's ring
    pays it once over its 2(n-1) steps."""
    filled = replace(NVSWITCH, ring_fill_chunks=0.5, all_to_all_fill_chunks=1.0)
    base, extra, _ = PROTOCOLS["simple"]
    bus_bps = 300e9 * 0.8
    size = 1e9
    for n in (2, 8):
        expected = base + (n - 1) * (1e-6 + extra) + (n - 1 + 0.5) / n * size / bus_bps
        assert one_dim_time("all_gather", size, filled, n) == pytest.approx(expected)
        assert one_dim_time("reduce_scatter", size, filled, n) == pytest.approx(expected)
    ring = base + 2 * 3 * (1e-6 + extra) + (2 * 3 + 0.5) / 4 * size / bus_bps
    assert all_reduce_times(size, filled, 4, log_tree=False)["ring/simple"] == pytest.approx(ring)
    a2a = base + 1 * (1e-6 + extra) + (1 + 1.0) / 2 * size / bus_bps
    assert one_dim_time("all_to_all", size, filled, 2) == pytest.approx(a2a)


def test_summing_bytes_fills_the_ring_longer():
    """A ring summing int8 (1-byte elements) fills 0.25 chunk more: 2 ranks move (1 + 0.5 + 0.25) / 2
    of the buffer. All-gather moves the same bytes whatever they hold; a 16-bit sum is unchanged."""
    filled = replace(NVSWITCH, ring_fill_chunks=0.5, byte_reduce_fill_chunks=0.25)
    base, extra, _ = PROTOCOLS["simple"]
    bus_bps = 300e9 * 0.8
    size = 1e9
    expected = base + (1e-6 + extra) + (1 + 0.75) / 2 * size / bus_bps
    assert one_dim_time("reduce_scatter", size, filled, 2, element_bytes=1) == pytest.approx(expected)
    assert one_dim_time("all_gather", size, filled, 2, element_bytes=1) == one_dim_time("all_gather", size, filled, 2)
    ring = base + 2 * 3 * (1e-6 + extra) + (2 * 3 + 0.75) / 4 * size / bus_bps
    assert all_reduce_times(size, filled, 4, log_tree=False, element_bytes=1)["ring/simple"] == pytest.approx(ring)
    assert one_dim_time("reduce_scatter", size, filled, 2, element_bytes=2) == pytest.approx(
        base + (1e-6 + extra) + 1.5 / 2 * size / bus_bps)


def test_nvls_sums_no_1_byte_elements():
    """NCCL's NVLS reduces 16-bit and wider elements only: an int8 all-reduce on an NVLS switch
    runs the ring, and across two nodes only its all-gather halves skip the byte fill."""
    dim = replace(NVSWITCH, link_bandwidth_bps=450e9, switch_reduction=0.85, byte_reduce_fill_chunks=0.25)
    assert "nvls/simple" in all_reduce_times(2048 * MIB, dim, 8, log_tree=False)
    assert "nvls/simple" not in all_reduce_times(2048 * MIB, dim, 8, log_tree=False, element_bytes=1)
    h100 = load_hardware("h100-sxm5-80gb")
    dims = h100.dims_for(16)
    eff, step = h100.calibration.network_efficiency, h100.calibration.collective_step_s
    inner = (one_dim_time("reduce_scatter", 1e9, dims[0], 8, eff, step, element_bytes=1)
             + one_dim_time("all_gather", 1e9, dims[0], 8, eff, step))
    times = collective_time(h100, dims, "all_reduce", 1e9, ((0, 8), (1, 2)), element_bytes=1)
    assert times["nvlink"] == pytest.approx(inner)
    assert inner > 2 * one_dim_time("all_gather", 1e9, dims[0], 8, eff, step)


def test_the_width_reaches_every_dimension_a_reduction_crosses():
    """One node: an int8 all-reduce of 2 GiB takes the ring (no NVLS) with the byte fill, slower
    than fp16's NVLS; two nodes: an int8 reduce-scatter pays the byte fill in both dimensions."""
    h100 = load_hardware("h100-sxm5-80gb")
    eff, step = h100.calibration.network_efficiency, h100.calibration.collective_step_s
    one_node = h100.dims_for(8)
    ring = min(t for name, t in all_reduce_times(2048 * MIB, one_node[0], 8, eff, step, log_tree=False,
                                                 element_bytes=1).items() if name.startswith("ring/"))
    int8 = collective_time(h100, one_node, "all_reduce", 2048 * MIB, ((0, 8),), element_bytes=1)
    assert int8 == pytest.approx({"nvlink": ring})
    assert sum(int8.values()) > sum(collective_time(h100, one_node, "all_reduce", 2048 * MIB, ((0, 8),)).values())
    dims = h100.dims_for(16)
    wide = collective_time(h100, dims, "reduce_scatter", 1e9, ((0, 8), (1, 2)), element_bytes=1)
    narrow = collective_time(h100, dims, "reduce_scatter", 1e9, ((0, 8), (1, 2)))
    assert wide["nvlink"] > narrow["nvlink"] and wide["ib"] == pytest.approx(narrow["ib"])


def test_bare_algorithms_have_no_fill():
    """The compiled simulator's bare ring (BARE) moves (n-1)/n of the buffer whatever the fill."""
    filled = replace(NVSWITCH, ring_fill_chunks=0.5)
    assert one_dim_time("all_gather", 1e9, filled, 2, protocols=BARE) == pytest.approx(1e-6 + 0.5e9 / (300e9 * 0.8))
