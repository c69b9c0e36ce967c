"""The operator model against first principles: rooflines, wave quantization, linearity."""
import dataclasses

import pytest

from core import ops


def no_overheads(hw):
    gpu = dataclasses.replace(hw.gpu, launch_overhead_s=0.0)
    return dataclasses.replace(hw, gpu=gpu, calibration=dataclasses.replace(hw.calibration, kernel_overhead_s=0.0))


def test_large_gemm_is_compute_bound_at_the_derated_peak(a100):
    hw = no_overheads(a100)
    kernel = ops.gemm(hw, 8192, 8192, 8192)
    peak = hw.gpu.flops("bf16") * hw.calibration.compute_efficiency
    assert kernel.flops == 2 * 8192**3
    assert kernel.time_s == pytest.approx(kernel.flops / peak, rel=0.02)


def test_gemv_is_bound_by_reading_the_weights(a100):
    hw = no_overheads(a100)
    kernel = ops.gemm(hw, 1, 16384, 8192)
    weights = 16384 * 8192 * 2
    assert kernel.time_s == pytest.approx(weights / (hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency),
                                          rel=0.02)


def test_a_tile_grid_that_just_overflows_the_sms_loses_efficiency(a100):
    hw = no_overheads(a100)
    sms = hw.gpu.sm_count
    # 108 tiles of 256x128 fill the GPU exactly; one more row of tiles leaves a tail wave
    # that even the best smaller tiling cannot fill.
    full = ops.gemm(hw, 256 * sms, 128, 4096)
    spill = ops.gemm(hw, 256 * sms + 256, 128, 4096)
    assert spill.time_s / spill.flops > 1.015 * full.time_s / full.flops


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
