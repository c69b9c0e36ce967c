"""The fused attention model's measured terms (scripts/fit_attention.py fits them): softmax
overlap, per-tile costs, the backward's own rate and its memory-bound passes."""
import dataclasses

import pytest

from core.errors import SpecError
from core.model import ops
from core.model.loader import _calibration, load_hardware
from core.model.ops.attention import backward_pass_bytes, cta_rows
from core.model.ops.mla import mla_prefill


def bare(hw, **calibration):
    """No launch or kernel overhead, no measured attention terms unless given."""
    neutral = dict(kernel_overhead_s=0.0, attention_softmax_overlap=False, attention_backward_passes=False,
                   attention_floor_s=0.0, attention_tile_s=0.0, attention_backward_share=1.0,
                   attention_backward_tile_s=0.0, sustained_clock=1.0)
    gpu = dataclasses.replace(hw.gpu, launch_overhead_s=0.0)
    return dataclasses.replace(hw, gpu=gpu, calibration=dataclasses.replace(hw.calibration,
                                                                           **{**neutral, **calibration}))


def test_the_backward_passes_read_o_and_do_and_round_trip_an_fp32_dq():
    """1,000 BF16 elements: O and dO read (4,000 B), the FP32 dQ zeroed (4,000 B), read back
    (4,000 B) and written in BF16 (2,000 B)."""
    assert backward_pass_bytes(1000, 2) == 14_000


def test_the_forward_hides_the_softmax_under_the_matmuls_when_the_gpu_overlaps_them():
    """8 heads x 4,096 tokens, causal, on H100 (their K and V, 17 MB, stay in L2): the matmuls
    take longer than the softmax, so overlapping them removes the softmax's whole time (closed
    form of the model's two terms); 256 query tiles on 132 SMs run in 2 waves where 1.94 would do."""
    h100 = load_hardware("h100-sxm5-80gb")
    serial, overlapped = bare(h100), bare(h100, attention_softmax_overlap=True)
    args = (8, 4096, 4096, 128, 1, True)
    gpu = h100.gpu
    scores = 8 * 4096 * 4096 * ops.causal_fraction(4096)
    waves = 2 / (256 / 132)
    softmax_s = (scores * 5 / gpu.flops("fp32") + scores / (16 * gpu.sm_count * gpu.clock_hz)) * waves
    gain = ops.flash_attention(serial, *args).time_s - ops.flash_attention(overlapped, *args).time_s
    assert gain == pytest.approx(softmax_s)
    # FlashAttention-2's backward keeps them in turn; cuDNN's fused backward overlaps them too
    assert ops.flash_attention(serial, *args, True, "flash2").time_s == \
        ops.flash_attention(overlapped, *args, True, "flash2").time_s
    assert ops.flash_attention(overlapped, *args, True).time_s < ops.flash_attention(serial, *args, True).time_s


def test_blackwell_ultras_doubled_exponential_rate_halves_the_softmaxs_exponentials():
    """The same softmax run in turn with the matmuls on a GPU returning 32 exponentials per SM per
    clock instead of 16: one exp per score, so the time saved is half the exponentials' time."""
    h100 = bare(load_hardware("h100-sxm5-80gb"))
    ultra = dataclasses.replace(h100, gpu=dataclasses.replace(h100.gpu, exp_per_sm_per_clock=32.0))
    args = (8, 4096, 4096, 128, 1, True)
    gpu = h100.gpu
    scores = 8 * 4096 * 4096 * ops.causal_fraction(4096)
    waves = 2 / (256 / 132)
    exponentials_s = scores / (16 * gpu.sm_count * gpu.clock_hz) * waves
    saved = ops.flash_attention(h100, *args).time_s - ops.flash_attention(ultra, *args).time_s
    assert saved == pytest.approx(exponentials_s / 2)
    assert load_hardware("b300-sxm-288gb").gpu.exp_per_sm_per_clock == 2 * load_hardware("b200-sxm-180gb").gpu.exp_per_sm_per_clock


def test_each_query_tile_costs_its_own_time_spread_over_the_sms():
    """132 heads x 128 tokens on 132 SMs: one query tile per SM, one wave, so 50 us more per
    tile (forward or backward) is 50 us more; 133 heads take two waves and so twice that."""
    h100 = load_hardware("h100-sxm5-80gb")
    short = bare(h100, attention_tile_s=50e-6, attention_backward_tile_s=60e-6)
    long = bare(h100, attention_tile_s=100e-6, attention_backward_tile_s=110e-6)
    for heads, waves in ((132, 1), (133, 2)):
        args = (heads, 128, 128, 128, 1, True)
        for backward in (False, True):
            extra = ops.flash_attention(long, *args, backward).time_s - ops.flash_attention(short, *args, backward).time_s
            assert extra == pytest.approx(waves * 50e-6)


def test_a_causal_kernel_of_few_tiles_waits_for_its_last_query_tile():
    """One head of 8K causal tokens is 64 query tiles on 132 SMs: the last tile sees all 8,192
    keys, as every tile does without the mask, so the causal head takes as long as an unmasked
    one, and as two causal heads (128 tiles, one per SM, the longest the same)."""
    h100 = bare(load_hardware("h100-sxm5-80gb"))
    time = lambda heads, causal: ops.flash_attention(h100, heads, 8192, 8192, 128, 1, causal).time_s  # noqa: E731
    assert time(1, True) == pytest.approx(time(1, False), rel=1e-9)
    assert time(1, True) == pytest.approx(time(2, True), rel=1e-9)


def b200_with_and_without_tensor_memory() -> tuple:
    """A bare B200 as its preset has it (512 tensor-memory columns) and with none."""
    b200 = bare(load_hardware("b200-sxm-180gb"))
    return b200, dataclasses.replace(b200, gpu=dataclasses.replace(b200.gpu, tensor_memory_columns=0))


def test_blackwells_two_tile_ctas_wait_for_the_last_two_query_tiles():
    """B200's tensor memory (512 columns) holds two query tiles' 128-column scores and outputs
    of head dimension 128, so its fused attention runs two 128-row tiles per CTA: one causal
    head of 16K tokens is 64 CTAs on 148 SMs, the last of them 256 rows over all 16,384 keys,
    and computes twice as long as with one tile per CTA; four heads (256 CTAs, two waves of the
    mean CTA's work) take as long either way. At head dimension 256 one tile fits."""
    b200, no_tmem = b200_with_and_without_tensor_memory()
    assert (cta_rows(b200.gpu, 128), cta_rows(b200.gpu, 64), cta_rows(b200.gpu, 256), cta_rows(no_tmem.gpu, 128)) \
        == (256, 256, 128, 128)
    time = lambda hw, heads, dim=128: ops.flash_attention(hw, heads, 16384, 16384, dim, 1, True).time_s  # noqa: E731
    assert time(b200, 1) == pytest.approx(2 * time(no_tmem, 1), rel=1e-9)
    assert time(b200, 4) == pytest.approx(time(no_tmem, 4), rel=1e-9)
    assert time(b200, 1, 256) == time(no_tmem, 1, 256)


def test_the_backward_and_flashattention_2_keep_one_tile_per_cta():
    """The backward fills the tensor memory with one tile's scores, their gradients and dK, dV;
    FlashAttention 2 issues mma.sync from registers: neither holds a second tile on B200."""
    b200, no_tmem = b200_with_and_without_tensor_memory()
    for kernel, backward in (("flash", True), ("flash2", False), ("flash2", True)):
        args = (1, 16384, 16384, 128, 1, True, backward, kernel)
        assert ops.flash_attention(b200, *args).time_s == ops.flash_attention(no_tmem, *args).time_s


def test_tensorrt_llms_mla_context_kernel_keeps_one_tile_per_cta():
    """Timed at the mean of its head dimensions (192 and 128: 160), which leaves no room in B200's
    512 columns for a second tile: a lone causal sequence of 16K tokens over 16 heads times as
    without tensor memory."""
    b200, no_tmem = b200_with_and_without_tensor_memory()
    args = (1, 16, 16384, 16384, 192, 128, 512, 64, True, "trtllm")
    assert mla_prefill(b200, *args).time_s == mla_prefill(no_tmem, *args).time_s


def test_tensor_memory_is_a_count_of_columns():
    """Negative counts, or a count past 4,096 columns (bytes or lanes mistaken for columns), are
    refused naming the field."""
    for columns in (-1, 262144):
        with pytest.raises(SpecError, match="tensor_memory_columns"):
            load_hardware("b200-sxm-180gb", {"gpu.tensor_memory_columns": columns})


def test_the_backward_tensor_rate_and_its_passes():
    """Halving attention_backward_share doubles the backward's matmul time and leaves the
    forward alone; the passes add their bytes at the elementwise rate."""
    h100 = load_hardware("h100-sxm5-80gb")
    args = (256, 8192, 8192, 128, 1, True)
    full, half = bare(h100), bare(h100, attention_backward_share=0.5)
    assert ops.flash_attention(half, *args).time_s == ops.flash_attention(full, *args).time_s
    gpu, cal = full.gpu, full.calibration
    flops = 5 * 2.0 * 256 * 8192 * 8192 * ops.causal_fraction(8192) * 128
    waves = 125 / (16384 / 132)  # 256 heads x 64 query tiles on 132 SMs
    tensor_s = flops / (ops.tensor_rate_flops(full, "bf16") * cal.attention_efficiency) * waves
    slower = ops.flash_attention(half, *args, True).time_s - ops.flash_attention(full, *args, True).time_s
    assert slower == pytest.approx(tensor_s)
    passes = bare(h100, attention_backward_passes=True)
    bytes_ = backward_pass_bytes(256 * 8192 * 128, 2)
    added = ops.flash_attention(passes, *args, True)
    assert added.time_s - ops.flash_attention(full, *args, True).time_s == \
        pytest.approx(bytes_ / (gpu.hbm.bandwidth_bps * cal.memory_efficiency))
    assert added.hbm_bytes - ops.flash_attention(full, *args, True).hbm_bytes == pytest.approx(bytes_)


def test_a_backward_share_out_of_range_is_refused():
    with pytest.raises(SpecError, match="attention_backward_share"):
        _calibration({"inherits": "h100-sxm5-80gb", "attention_backward_share": 0}, "hw.yaml")
