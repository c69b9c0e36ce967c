"""The operator model against first principles: rooflines, wave quantization, linearity."""
import dataclasses

import pytest

from core.model import ops
from core.model.loader import load_hardware
from core.model.ops.gemm import EXPOSED_OVERLAP, _tilings, token_sized_tiles, wide_tiles
from core.validation.kernels import kernels_alone


def no_overheads(hw):
    gpu = dataclasses.replace(hw.gpu, launch_overhead_s=0.0)
    return dataclasses.replace(hw, gpu=gpu, calibration=dataclasses.replace(hw.calibration, kernel_overhead_s=0.0))


def test_large_gemm_is_compute_bound_at_the_derated_peak(a100):
    """At the kernels' share of the peak times a step's share of that; its HBM traffic shows
    only as the pipeline's exposed share of its time (at the slower of the two HBM rates)."""
    hw = no_overheads(a100)
    kernel = ops.gemm(hw, 8192, 8192, 8192)
    cal = hw.calibration
    peak = hw.gpu.flops("bf16") * cal.compute_efficiency * cal.step_efficiency
    assert ops.tensor_rate_flops(hw, "bf16") == peak
    assert kernel.flops == 2 * 8192**3
    waves = 19 / (32 * 64 / 108)  # 32 x 64 tiles of 256 x 128 on 108 SMs: 19 waves for 18.96
    slowest_bps = hw.gpu.hbm.bandwidth_bps * min(cal.memory_efficiency, cal.stream_efficiency)
    assert kernel.flops / peak < kernel.time_s <= kernel.flops / peak * waves + \
        EXPOSED_OVERLAP * kernel.hbm_bytes / slowest_bps


def test_a_kernel_timed_alone_drops_what_a_step_adds(h100):
    """The kernel tables' view: no step share, no host time per kernel, the full clock."""
    alone = kernels_alone(h100)
    assert ops.tensor_rate_flops(alone, "bf16") == h100.gpu.flops("bf16") * h100.calibration.compute_efficiency
    assert ops.tensor_rate_flops(alone, "fp8") == (h100.gpu.flops("fp8") * h100.calibration.compute_efficiency
                                                   * h100.calibration.fp8_efficiency)
    assert ops.launch_s(alone) == h100.gpu.launch_overhead_s


def test_cluster_multicast_halves_the_l2_traffic_of_an_l2_bound_gemm(h100):
    """With the tensor cores, SRAM and HBM made unlimited, a GEMM's time is its L2 bytes over
    the L2 rate: sharing each operand tile across a 2-CTA cluster halves it."""
    gpu = dataclasses.replace(no_overheads(h100).gpu, peak_flops=(("bf16", 1e30),),
                              sram=dataclasses.replace(h100.gpu.sram, bandwidth_bps=1e30),
                              hbm=dataclasses.replace(h100.gpu.hbm, bandwidth_bps=1e30))
    single = dataclasses.replace(h100, gpu=dataclasses.replace(gpu, operand_multicast=1),
                                 calibration=dataclasses.replace(h100.calibration, kernel_overhead_s=0.0))
    paired = dataclasses.replace(single, gpu=dataclasses.replace(gpu, operand_multicast=2))
    assert ops.gemm(paired, 4096, 4096, 4096).time_s == pytest.approx(ops.gemm(single, 4096, 4096, 4096).time_s / 2)


def test_gemv_is_bound_by_reading_the_weights(a100):
    """One token through a 8192 x 16384 weight: the weight streams in at the stream rate, the
    token's 8192 inputs and 16384 outputs move at the elementwise rate."""
    hw = no_overheads(a100)
    kernel = ops.gemm(hw, 1, 16384, 8192)
    hbm, cal = hw.gpu.hbm.bandwidth_bps, hw.calibration
    expected = 16384 * 8192 * 2 / (hbm * cal.stream_efficiency) + (8192 + 16384) * 2 / (hbm * cal.memory_efficiency)
    # the pipeline leaves EXPOSED_OVERLAP of the (tile-padded) compute time on top
    assert expected < kernel.time_s < expected * (1 + EXPOSED_OVERLAP)
    assert kernel.hbm_bytes == (16384 * 8192 + 8192 + 16384) * 2


def test_a_gemm_on_activations_alone_moves_at_the_elementwise_rate(a100):
    """Without a weight operand (attention's batched matmuls, weight gradients) every byte
    goes at memory_efficiency: the same 1 x 8192 x 16384 product is slower by the ratio of
    the two rates on the matrix it reads."""
    hw = no_overheads(a100)
    kernel = ops.gemm(hw, 1, 16384, 8192, weights=False)
    bytes_ = (16384 * 8192 + 8192 + 16384) * 2
    moved_s = bytes_ / (hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency)
    assert moved_s < kernel.time_s < moved_s * (1 + EXPOSED_OVERLAP)


def test_a_short_k_gemm_over_many_tiles_is_bound_by_writing_its_output(h100):
    """16384 x 16384 outputs over k = 32: 17 GFLOP and 2 MiB of operands, but 512 MiB of BF16
    output, written at the GPU's store share of HBM (0.694 on H100) rather than HBM's rate."""
    hw = no_overheads(h100)
    output_bytes = 16384 * 16384 * 2
    store_s = output_bytes / (hw.gpu.hbm.bandwidth_bps * hw.calibration.store_efficiency)
    assert hw.calibration.store_efficiency == 0.694
    assert ops.gemm(hw, 16384, 16384, 32).time_s == pytest.approx(store_s)
    unbound = dataclasses.replace(hw, calibration=dataclasses.replace(hw.calibration, store_efficiency=1.0))
    assert ops.gemm(unbound, 16384, 16384, 32).time_s < 0.75 * store_s


def test_a_kernel_that_writes_its_own_output_adds_the_writing_to_its_time(h100):
    """The same GEMM on a kernel whose math warps write each output tile before the next tile's
    MMAs (DeepGEMM's): its tiles' time plus the 512 MiB written, not the larger of the two."""
    hw = no_overheads(h100)
    store_s = 16384 * 16384 * 2 / (hw.gpu.hbm.bandwidth_bps * hw.calibration.store_efficiency)
    unbound = dataclasses.replace(hw, calibration=dataclasses.replace(hw.calibration, store_efficiency=1e9))
    tiles_s = ops.gemm(unbound, 16384, 16384, 32).time_s
    assert ops.gemm(hw, 16384, 16384, 32, epilogue_in_series=True).time_s == pytest.approx(tiles_s + store_s)


def test_decode_attention_sweeps_the_cache_as_one_stream(a100):
    """2 sequences, 4 heads of 64, 1000 cached tokens in FP16, no SM-rate bound: the cache
    (2 x 2 x 4 x 1000 x 64 x 2 bytes) at the stream rate, the step's queries in and outputs
    out (2 x 2 x 4 x 64 x 2 bytes) at the elementwise rate."""
    cal = dataclasses.replace(a100.calibration, decode_attention_rate=0.0, kernel_overhead_s=0.0)
    hw = dataclasses.replace(no_overheads(a100), calibration=cal)
    kernel = ops.decode_attention(hw, 2, 4, 4, 1000, 64)
    cache, queries = 2 * 2 * 4 * 1000 * 64 * 2, 2 * 2 * 4 * 64 * 2
    hbm = hw.gpu.hbm.bandwidth_bps
    assert kernel.time_s == pytest.approx(cache / (hbm * cal.stream_efficiency) + queries / (hbm * cal.memory_efficiency))
    assert kernel.hbm_bytes == cache + queries


def test_a_tile_grid_that_just_overflows_the_sms_loses_efficiency(a100):
    hw = no_overheads(a100)
    sms = hw.gpu.sm_count
    # 108 tiles of 256x128 fill the GPU exactly; one more row of tiles leaves a tail wave
    # that even the best smaller tiling cannot fill.
    full = ops.gemm(hw, 256 * sms, 128, 4096)
    spill = ops.gemm(hw, 256 * sms + 256, 128, 4096)
    assert spill.time_s / spill.flops > 1.015 * full.time_s / full.flops


def test_a_cluster_launches_whole_so_a_ragged_tile_row_runs_beside_an_empty_one(h100):
    """257 rows are three rows of 128-row tiles, which clusters of two tiles over m round up to
    four: over 44 tile columns (132 tiles, one wave of H100's 132 SMs) the fourth row takes a
    second wave, as 512 rows do, and an even number of tile rows is not rounded."""
    hw = no_overheads(kernels_alone(h100))
    n = 128 * hw.gpu.sm_count // 3

    def gemm_s(m, tile):
        return ops.gemm(hw, m, n, 16384, dtype="fp8", tiles=(tile,)).time_s

    alone, clustered = (128, 128, 128), (128, 128, 128, 2)
    assert gemm_s(512, clustered) == gemm_s(512, alone)
    assert gemm_s(257, clustered) == pytest.approx(gemm_s(512, alone), rel=0.01)
    assert gemm_s(257, clustered) > 1.8 * gemm_s(257, alone)


def test_a_gemm_split_in_k_pays_the_start_of_the_kernel_that_sums_its_partials(h100):
    """128 x 128 x 65,536 has fewer output tiles than SMs at every tile size, so the library
    splits it over k (16 ways) and sums the partials in a second kernel, queued behind the first:
    gpu.graph_launch_overhead more. Nothing more for a GEMM of 1,024 tiles, which never splits,
    nor for a library's fixed tiles, which never split."""
    hw = no_overheads(kernels_alone(h100))
    no_gap = dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, graph_launch_overhead_s=0.0))
    split = ops.gemm(hw, 128, 128, 65536).time_s - ops.gemm(no_gap, 128, 128, 65536).time_s
    assert hw.gpu.graph_launch_overhead_s == 1e-6
    assert split == pytest.approx(1e-6)
    assert ops.gemm(hw, 4096, 4096, 4096).time_s == ops.gemm(no_gap, 4096, 4096, 4096).time_s
    fixed = ((128, 128, 64),)
    assert ops.gemm(hw, 128, 128, 65536, tiles=fixed).time_s == ops.gemm(no_gap, 128, 128, 65536, tiles=fixed).time_s


def test_stream_k_deals_a_last_partial_wave_out_over_every_sm(h100):
    """1,664 x 2,816 outputs in 128 x 256 tiles are 13 x 11 = 143 tiles, 11 more than H100's
    132 SMs hold at once. As whole tiles they take two waves, 2 tiles' k-loops per SM; stream-K
    deals the 143 x 512 k-iterations (32 deep) out in runs of ceil(143 x 512 / 132) = 555 per
    SM, so a tile's 512 iterations span at most 2 runs: an SM moves at most 2 FP32 partial tiles
    (128 x 256 x 4 bytes) through L2 in turn. The 131 ends of runs before the last all fall inside
    a tile (555 and 512 share no factor, so a run ends on a tile's edge only every 512 runs), each
    a partial written and read."""
    tile_flops, partial = 2 * 128 * 256 * 32, 128 * 256 * 4

    def choices(m, n, k, stream_k=True):
        gpu = h100.gpu
        return _tilings(gpu.sm_count, gpu.sram.capacity_bytes, gpu.register_bytes_per_sm, gpu.l2.capacity_bytes,
                        2, 2, m, n, k, 1, ((128, 256, 32),), (1,), 2, stream_k)

    whole, spread = choices(1664, 2816, 16384)
    assert whole[0] == 2 * 512 * tile_flops and whole[-1] == 0
    assert spread[0] == 555 * tile_flops and spread[-1] == 2 * partial
    assert spread[2] == 143 * (128 + 256) * 512 * 32 * 2 + 1664 * 2816 * 2 + 2 * 131 * partial
    # One tile of 512 iterations under one wave: runs of ceil(512 / 132) = 4, 127 ends inside it,
    # at most ceil(511 / 4) + 1 = 129 runs on it wherever it starts.
    lone = choices(128, 256, 16384)[1]
    assert lone[0] == 4 * tile_flops and lone[-1] == 129 * partial
    assert lone[2] == (128 + 256) * 512 * 32 * 2 + 128 * 256 * 2 + 2 * 127 * partial
    # 12 tiles of 13 iterations: runs of ceil(12 x 13 / 132) = 2, and 13 = 6 x 2 + 1 iterations
    # touch at most 7 runs.
    assert choices(384, 1024, 416)[1][-1] == 7 * partial
    # a grid of whole waves, or without stream-K, is offered the whole tiles alone
    assert len(choices(1536, 2816, 16384)) == len(choices(1664, 2816, 16384, stream_k=False)) == 1


def test_stream_k_is_a_gpu_switch_for_single_products_of_free_tiles(h100):
    """gpu.stream_k (off in the presets) lets the library pick stream-K: the 143-tile grid
    above comes out faster than in whole tiles, a grid of one wave does not move, nor do a
    library's fixed tiles or a batched product."""
    off = no_overheads(kernels_alone(h100))
    on = dataclasses.replace(off, gpu=dataclasses.replace(off.gpu, stream_k=True))
    assert not off.gpu.stream_k
    assert ops.gemm(on, 1664, 2816, 16384).time_s < ops.gemm(off, 1664, 2816, 16384).time_s
    assert ops.gemm(on, 1536, 2816, 16384).time_s == ops.gemm(off, 1536, 2816, 16384).time_s
    fixed = ((128, 256, 64),)
    assert ops.gemm(on, 1664, 2816, 16384, tiles=fixed).time_s == ops.gemm(off, 1664, 2816, 16384, tiles=fixed).time_s
    assert ops.gemm(on, 832, 2816, 16384, 2).time_s == ops.gemm(off, 832, 2816, 16384, 2).time_s


def test_token_sized_tiles_split_m_into_one_to_four_tiles_in_steps_of_eight(h100):
    """257 rows: 264 in one tile is past the MMA's 256; in 2, 3, 4 tiles 128.5, 85.7, 64.25 rows,
    rounded up to 136, 88 and 72. 1,024 rows fit 4 tiles of 256; 1,100 need 5 (fixed tiles only);
    64 rows' own tile is one of GEMM_TILES already. Two 136-row tiles by 32 of 128 columns run
    257 x 4,096 x 4,096 as 64 tiles, one per SM, each 2 x 136 x 128 x 4,096 FLOPs and
    (136 + 128) x 4,096 x 2 bytes through shared memory."""
    assert token_sized_tiles(257, 8) == ((136, 128, 64), (88, 128, 64), (72, 128, 64))
    assert token_sized_tiles(1, 8) == ((8, 128, 64),)
    assert token_sized_tiles(1024, 8) == ((256, 128, 64),)
    assert token_sized_tiles(64, 8) == ((32, 128, 64), (24, 128, 64), (16, 128, 64))
    assert token_sized_tiles(1100, 8) == token_sized_tiles(257, 0) == token_sized_tiles(0, 8) == ()
    gpu = h100.gpu
    unsplit = _tilings(gpu.sm_count, gpu.sram.capacity_bytes, gpu.register_bytes_per_sm, gpu.l2.capacity_bytes,
                       2, 2, 257, 4096, 4096, 1, token_sized_tiles(257, 8)[:1], (1,))[0]
    assert unsplit[:2] == (2 * 136 * 128 * 4096, (136 + 128) * 4096 * 2)


def test_token_tile_step_is_a_gpu_property_of_free_tiles(h100):
    """gpu.token_tile_step (8 on Hopper's presets) speeds a GEMM of 257 rows, whose fixed tiles
    pad it to 288 or 384; past 1,024 rows, with a library's fixed tiles, or in block-scaled FP8
    (Hopper's DeepGEMM-style kernels), nothing moves."""
    sized = no_overheads(kernels_alone(h100))
    fixed = dataclasses.replace(sized, gpu=dataclasses.replace(sized.gpu, token_tile_step=0))
    assert sized.gpu.token_tile_step == 8
    assert ops.gemm(sized, 257, 4096, 4096).time_s < ops.gemm(fixed, 257, 4096, 4096).time_s
    assert ops.gemm(sized, 1025, 8192, 8192).time_s == ops.gemm(fixed, 1025, 8192, 8192).time_s
    tiles = ((128, 128, 64),)
    assert ops.gemm(sized, 257, 4096, 4096, tiles=tiles).time_s == ops.gemm(fixed, 257, 4096, 4096, tiles=tiles).time_s
    block = {"fp8_recipe": "block-scaled"}
    assert ops.gemm(dataclasses.replace(sized, **block), 257, 4096, 4096, dtype="fp8").time_s == \
        ops.gemm(dataclasses.replace(fixed, **block), 257, 4096, 4096, dtype="fp8").time_s


def test_wide_tiles_take_every_mma_width_between_128_and_256_columns():
    """Blackwell's MMA (step 16) offers widths 144 to 240 at 128 rows; a step of 64 only 192."""
    assert wide_tiles(16) == tuple((128, width, 32) for width in range(144, 256, 16))
    assert len(wide_tiles(16)) == 7
    assert wide_tiles(64) == ((128, 192, 32),)
    assert wide_tiles(0) == ()


def test_a_wide_tile_fills_the_waves_that_128_and_256_columns_leave_part_empty(h100):
    """1,024 x 5,120 on B200's 148 SMs: 128 x 128 tiles make 8 x 40 = 320 tiles, 3 a SM
    (49,152 output elements each), 128 x 256 ones 160, 2 a SM (65,536); 128 x 160 ones 8 x 32 =
    256, 2 a SM (40,960). On H100's 132 SMs 128 x 128 tiles are 3 a SM too. With the widths
    offered the GEMM is faster; a library's fixed tiles do not change."""
    gpu = h100.gpu

    def elements_per_sm(sm_count, tile):
        (choice,) = _tilings(sm_count, gpu.sram.capacity_bytes, gpu.register_bytes_per_sm, gpu.l2.capacity_bytes,
                             2, 2, 1024, 5120, 2048, 1, (tile,), (1,))
        return choice[0] / (2 * 2048)
    assert elements_per_sm(148, (128, 128, 32)) == 3 * 128 * 128 == 49152
    assert elements_per_sm(148, (128, 256, 32)) == 2 * 128 * 256 == 65536
    assert elements_per_sm(148, (128, 160, 32)) == 2 * 128 * 160 == 40960
    assert elements_per_sm(132, (128, 128, 32)) == 49152
    wide = no_overheads(kernels_alone(load_hardware("b200-sxm-180gb")))
    narrow = dataclasses.replace(wide, gpu=dataclasses.replace(wide.gpu, wide_tile_step=0))
    assert (wide.gpu.wide_tile_step, wide.gpu.sm_count, h100.gpu.wide_tile_step) == (16, 148, 0)
    assert ops.gemm(wide, 1024, 5120, 2048).time_s < ops.gemm(narrow, 1024, 5120, 2048).time_s
    fixed = ((128, 128, 64),)
    assert ops.gemm(wide, 1024, 5120, 2048, tiles=fixed).time_s == \
        ops.gemm(narrow, 1024, 5120, 2048, tiles=fixed).time_s


def test_pointwise_is_bytes_over_bandwidth_plus_launch(a100):
    kernel = ops.pointwise(a100, 1e9)
    launch = a100.gpu.launch_overhead_s + a100.calibration.kernel_overhead_s
    bandwidth = a100.gpu.hbm.bandwidth_bps * a100.calibration.memory_efficiency
    assert kernel.time_s == pytest.approx(1e9 / bandwidth + launch)


def test_decode_attention_grows_linearly_with_context(a100):
    t = [ops.decode_attention(a100, 8, 32, 8, c, 128).time_s for c in (1000, 2000, 3000)]
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=1e-6)


def test_flash_attention_backward_costs_more_and_causal_halves(a100):
    fwd = ops.flash_attention(a100, 32, 4096, 4096, 128, 1, True)
    bwd = ops.flash_attention(a100, 32, 4096, 4096, 128, 1, True, backward=True)
    full = ops.flash_attention(a100, 32, 4096, 4096, 128, 1, False)
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    assert fwd.flops == pytest.approx(full.flops / 2, rel=0.02)
