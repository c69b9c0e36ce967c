"""Inference engines' own attention kernels (calibration.engine_attention): the decode op's
terms by hand, the prefill op's absolute tensor share, the preset field's errors, and the
kernel suite timing each table by its engine."""
import dataclasses
from math import ceil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import SpecError
from core.model import ops
from core.model.loader import load_hardware, with_dtype
from core.model.ops.attention import engine_decode_s
from core.model.ops.mla import mla_decode, mla_prefill
from core.model.specs import EngineAttention, MlaDecode, MlaPrefill
from core.validation.kernels import kernel_groups, kernels_alone

KERNELS = EngineAttention(prefill_tensor_share=0.5, prefill_fp8_tensor_share=0.4, prefill_cache_share=0.5,
                          prefill_tile_s=1e-6,
                          prefill_floor_s=2e-6, decode_floor_s=1e-6, decode_pair_s=2e-6, decode_bandwidth_share=0.5,
                          decode_fp8_bandwidth_share=0.25, decode_split_tokens=250, decode_max_splits=2,
                          decode_saturation=1.0, decode_score_s=1e-9)


def bare(hw, **engines):
    """`hw` with no launch or framework overhead and these engines' kernels."""
    gpu = dataclasses.replace(hw.gpu, launch_overhead_s=0.0)
    cal = dataclasses.replace(hw.calibration, kernel_overhead_s=0.0, engine_attention=tuple(sorted(engines.items())))
    return dataclasses.replace(hw, gpu=gpu, calibration=cal)


def test_an_engines_decode_is_floor_preprocessing_sweep_and_per_pair_cost(a100):
    """2 sequences, 8 query heads on 2 KV heads of 64, 1000 cached BF16 tokens: 4 (sequence,
    KV head) pairs, each split in min(1000 / 250, 2) = 2 chunks, n = 8 / 108 chunks in flight
    per SM (saturation 1), so the cache streams at n / (1 + n) of half the HBM."""
    hw = bare(a100, vllm=KERNELS)
    hbm, sms = hw.gpu.hbm.bandwidth_bps, hw.gpu.sm_count
    n = 8 / sms
    sweep = 2 * 4 * 1000 * 64 * 2 / (0.5 * hbm * n / (1 + n))
    prep = 2 * 2 * (8 + 2 * 2) * 64 * 2 / (hbm * hw.calibration.memory_efficiency)
    cycles = (2e-6 * 4 + 1e-9 * 2 * 8 * 1000) / sms
    assert ops.decode_attention(hw, 2, 8, 2, 1000, 64, 2, "vllm").time_s == pytest.approx(1e-6 + prep + sweep + cycles)


def test_an_fp8_cache_streams_at_its_own_share():
    """Half the bytes at half the share take as long; at the BF16 share, half as long."""
    hw = bare(load_hardware("h100-sxm5-80gb"))
    bf16, fp8 = (float(engine_decode_s(KERNELS, hw, 64, 8, 8, 4096, 128, el)) for el in (2, 1))
    assert bf16 == pytest.approx(fp8)
    even = dataclasses.replace(KERNELS, decode_fp8_bandwidth_share=0.5)
    n = 64 * 8 * 2 / 132  # pairs x splits per SM
    sweep = 2 * 64 * 8 * 4096 * 128 * 2 / (0.5 * hw.gpu.hbm.bandwidth_bps * n / (1 + n))
    assert bf16 - float(engine_decode_s(even, hw, 64, 8, 8, 4096, 128, 1)) == pytest.approx(sweep / 2)


def test_a_group_beyond_the_kernels_limit_reads_the_cache_per_query_head_through_l2(a100):
    """64 query heads on one KV head, a kernel taking at most 32 per KV head: the masked
    multi-head kernel streams the cache once per query head, at L2's bandwidth."""
    limited = dataclasses.replace(KERNELS, decode_max_group=32, decode_score_s=0.0, decode_pair_s=0.0)
    hw = bare(a100, trtllm=limited)
    n = 64 * 2 / 108  # 64 query-head streams x 2 splits per SM
    sweep = 2 * 1 * 64 * 8192 * 128 * 2 / (0.5 * hw.gpu.l2.bandwidth_bps * n / (1 + n))
    prep = 2 * 1 * (64 + 2) * 128 * 2 / (hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency)
    assert ops.decode_attention(hw, 1, 64, 1, 8192, 128, 2, "trtllm").time_s == pytest.approx(1e-6 + prep + sweep)


def grouped_gain(kernels, heads, kv_heads, kv_el):
    """Seconds `kernels` save against KERNELS limited to groups of 32 (what their grouped-kernel
    fields change): 8 sequences, 1,000 cached tokens of 128 elements on a bare H100."""
    hw = bare(load_hardware("h100-sxm5-80gb"))
    limited = dataclasses.replace(KERNELS, decode_max_group=32)
    return float(engine_decode_s(limited, hw, 8, heads, kv_heads, 1000, 128, kv_el)
                 - engine_decode_s(kernels, hw, 8, heads, kv_heads, 1000, 128, kv_el))


def test_the_grouped_kernel_pays_its_own_cost_per_pair_over_a_bf16_cache():
    """8 sequences on 8 KV heads: 64 pairs. With 64 query heads (a group of 8) over a BF16 cache
    each pair costs decode_group_pair (5 us) in place of decode_pair (2 us): 64 x 3 us more
    over the SMs. One query head per KV head, an FP8 cache, or a group beyond decode_max_group
    keep decode_pair."""
    grouped = dataclasses.replace(KERNELS, decode_group_pair_s=5e-6, decode_max_group=32)
    assert grouped_gain(grouped, 64, 8, 2) == pytest.approx(-64 * 3e-6 / 132)
    assert grouped_gain(grouped, 8, 8, 2) == 0.0
    assert grouped_gain(grouped, 64, 8, 1) == 0.0
    assert grouped_gain(grouped, 64, 1, 2) == 0.0


def test_the_grouped_kernel_over_an_fp8_cache_starts_from_its_own_floor():
    """A group of 8 over an FP8 cache starts from decode_fp8_group_floor (0.5 us) in place of
    decode_floor (1 us); one query head per KV head, a BF16 cache, or a group beyond
    decode_max_group (the per-query-head kernel) keep decode_floor."""
    sooner = dataclasses.replace(KERNELS, decode_fp8_group_floor_s=0.5e-6, decode_max_group=32)
    assert grouped_gain(sooner, 64, 8, 1) == pytest.approx(0.5e-6)
    assert grouped_gain(sooner, 8, 8, 1) == 0.0
    assert grouped_gain(sooner, 64, 8, 2) == 0.0
    assert grouped_gain(sooner, 64, 1, 1) == 0.0


def test_an_fp8_cache_widened_on_the_sms_sweeps_no_faster_than_they_widen():
    """64 sequences on 8 KV heads, 4,096 cached FP8 elements of 128: 512 pairs, 2 chunks each
    (n = 1,024 / 132 in flight per SM). At 1 ns per element per SM, widening the 2 x 512 x 4,096
    x 128 elements takes longer than HBM's read and sets the sweep; a BF16 cache, and the grouped
    kernel of an engine that runs its MMAs in FP8, keep the bandwidth's time."""
    hw = bare(load_hardware("h100-sxm5-80gb"))
    widening = dataclasses.replace(KERNELS, decode_fp8_widen_s=1e-9)
    n = 64 * 8 * 2 / 132
    widen = 2 * 512 * 4096 * 128 * 1e-9 / (n / (1 + n) * 132)
    assert float(engine_decode_s(widening, hw, 64, 8, 8, 4096, 128, 1)
                 - engine_decode_s(KERNELS, hw, 64, 8, 8, 4096, 128, 1)) == pytest.approx(
        widen - 2 * 512 * 4096 * 128 / (0.25 * hw.gpu.hbm.bandwidth_bps * n / (1 + n)))
    assert engine_decode_s(widening, hw, 64, 8, 8, 4096, 128, 2) == engine_decode_s(KERNELS, hw, 64, 8, 8, 4096, 128, 2)
    native = dataclasses.replace(widening, decode_fp8_group_native=True, decode_max_group=32)
    limited = dataclasses.replace(KERNELS, decode_max_group=32)
    assert engine_decode_s(native, hw, 64, 64, 8, 4096, 128, 1) == engine_decode_s(limited, hw, 64, 64, 8, 4096, 128, 1)
    assert engine_decode_s(native, hw, 64, 8, 8, 4096, 128, 1) > engine_decode_s(limited, hw, 64, 8, 8, 4096, 128, 1)
    # past decode_max_group the per-query-head kernel widens each query head's copy of the cache
    assert engine_decode_s(native, hw, 64, 64, 1, 4096, 128, 1) > engine_decode_s(limited, hw, 64, 64, 1, 4096, 128, 1)
    # an engine whose grouped kernel widens too (vLLM's) is not spared
    assert engine_decode_s(widening, hw, 64, 64, 8, 4096, 128, 1) > engine_decode_s(KERNELS, hw, 64, 64, 8, 4096, 128, 1)


def test_a_block_without_decode_group_pair_takes_decode_pair():
    """The loader's defaults (B200's TensorRT-LLM block sets none of the four fields): the grouped
    kernel costs what the one-head kernel does, starts from the same floor over an FP8 cache, and
    neither widens on the SMs nor reads it as it is."""
    kernels = load_hardware("b200-sxm-180gb").calibration.engine_kernels("trtllm")
    assert kernels.decode_group_pair_s == kernels.decode_pair_s
    assert kernels.decode_fp8_group_floor_s == kernels.decode_floor_s
    assert kernels.decode_fp8_widen_s == 0.0 and kernels.decode_fp8_group_native is False


@pytest.mark.parametrize("field, value, allowed", [("decode_fp8_widen", 0.048, "a unit"),
                                                   ("decode_fp8_group_floor", 3, "a unit"),
                                                   ("decode_fp8_group_native", 1, "true or false")])
def test_an_engine_blocks_fp8_decode_fields_are_refused_without_their_unit_or_kind(field, value, allowed):
    with pytest.raises(SpecError, match=f"{field}.*{allowed}"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
            **_preset_fields("h100-sxm5-80gb"), field: value}}})


def test_an_engine_not_in_the_preset_keeps_the_bandwidth_model(a100):
    hw = bare(a100)
    assert ops.decode_attention(hw, 8, 32, 8, 4096, 128, 2, "vllm") == ops.decode_attention(hw, 8, 32, 8, 4096, 128, 2)
    assert ops.decode_attention(a100, 8, 32, 8, 4096, 128, 2, "vllm") != ops.decode_attention(a100, 8, 32, 8, 4096, 128, 2)


def test_an_engines_prefill_share_is_of_the_peak_not_of_the_gemms_efficiency():
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=KERNELS)
    slower = dataclasses.replace(hw, calibration=dataclasses.replace(hw.calibration, compute_efficiency=0.3))
    args = (64, 4096, 4096, 128, 8, True)
    assert ops.flash_attention(slower, *args, kernel="trtllm") == ops.flash_attention(hw, *args, kernel="trtllm")
    assert ops.flash_attention(slower, *args).time_s > ops.flash_attention(hw, *args).time_s


def test_an_fp8_cache_runs_the_engines_fp8_prefill_kernel():
    """Compute-bound (64 heads x 8K tokens of 128): the matmuls at 0.4 of the FP8 peak instead
    of 0.5 of the BF16 one, 1.6 times the rate; the rest (softmax hidden under the matmuls, the
    op's loads) the same."""
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(KERNELS, prefill_tile_s=0.0))
    args = (64, 8192, 8192, 128, 1, True)
    bf16 = ops.flash_attention(hw, *args, kernel="trtllm", kv_bytes_per_element=2)
    fp8 = ops.flash_attention(hw, *args, kernel="trtllm", kv_bytes_per_element=1)
    assert bf16.flops == fp8.flops
    waves = ceil(64 * 64 / 132) / (64 * 64 / 132)  # 64 heads' 64 query tiles on 132 SMs
    tensor = bf16.flops / (hw.gpu.flops("bf16") * 0.5) * waves
    assert bf16.time_s - fp8.time_s == pytest.approx(tensor * (1 - 0.5 * 989.5 / (0.4 * 1979)), rel=1e-3)


def test_an_engines_prefill_pays_the_share_of_its_softmax_the_matmuls_do_not_hide():
    """64 heads x 8K tokens of 128 on an H100: the matmuls outlast the softmax (5 FP32 operations
    and one exponential per visible score), and exposing half of it adds half its time."""
    kernels = dataclasses.replace(KERNELS, prefill_tile_s=0.0)
    hidden = bare(load_hardware("h100-sxm5-80gb"), trtllm=kernels)
    half = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(kernels, prefill_softmax_exposed=0.5))
    args = (64, 8192, 8192, 128, 1, True)
    gpu, clock = hidden.gpu, hidden.calibration.sustained_clock
    scores = 64 * 8192 * 8192 * 0.5 * (1 + 1 / 128)  # the causal half and its diagonal tiles
    waves = ceil(64 * 64 / 132) / (64 * 64 / 132)
    softmax = scores * (5 / gpu.flops("fp32") + 1 / (gpu.exp_per_sm_per_clock * gpu.sm_count * gpu.clock_hz)) / clock
    exposed = ops.flash_attention(half, *args, kernel="trtllm").time_s - ops.flash_attention(hidden, *args, kernel="trtllm").time_s
    assert exposed == pytest.approx(0.5 * softmax * waves, rel=1e-9)


def test_an_engine_that_casts_its_queries_pays_one_more_kernel_over_an_fp8_cache():
    """4 sequences x 32 heads x 1024 tokens of 128 BF16 query elements (32 MiB), read and
    written again in FP8 (16 MiB more), at the elementwise rate, plus the gap between two
    dependent kernels; over a BF16 cache, or on a GPU without FP8 kernels, nothing."""
    casting = dataclasses.replace(KERNELS, prefill_fp8_query_cast=True)
    hw = bare(load_hardware("h100-sxm5-80gb"), vllm=casting, trtllm=KERNELS)
    args = (4 * 32, 1024, 1024, 128, 4, True)
    cast_bytes = 4 * 32 * 1024 * 128 * (2 + 1)
    cast_s = cast_bytes / (hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency) + hw.gpu.graph_launch_overhead_s
    for kv_bytes, extra in ((1, cast_s), (2, 0.0)):
        vllm, trtllm = (ops.flash_attention(hw, *args, kernel=name, kv_bytes_per_element=kv_bytes)
                        for name in ("vllm", "trtllm"))
        assert vllm.time_s - trtllm.time_s == pytest.approx(extra)
        assert vllm.hbm_bytes - trtllm.hbm_bytes == pytest.approx(cast_bytes if extra else 0.0)
    a100 = bare(load_hardware("a100-sxm4-80gb"), vllm=casting, trtllm=KERNELS)
    assert ops.flash_attention(a100, *args, kernel="vllm", kv_bytes_per_element=1) == \
        ops.flash_attention(a100, *args, kernel="trtllm", kv_bytes_per_element=1)


def test_an_engines_mla_prefill_keeps_its_softmax_hidden_with_or_without_its_own_shares():
    """The exposed share belongs to the engine's GQA prefill kernel: MLA's context kernel, at
    its own shares or (no mla_prefill block) at the GQA kernel's, does not pay it."""
    exposed = dataclasses.replace(KERNELS, prefill_softmax_exposed=1.0)
    args = (1, 16, 8192, 8192, 192, 128, 512, 64, True, "trtllm", 2)
    for own in (None, MlaPrefill(tensor_share=0.6, fp8_tensor_share=0.5, tile_s=1e-6)):
        hidden = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(KERNELS, mla_prefill=own))
        shown = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(exposed, mla_prefill=own))
        assert mla_prefill(shown, *args).time_s == mla_prefill(hidden, *args).time_s
    gqa = (16, 8192, 8192, 128, 1, True)
    assert ops.flash_attention(shown, *gqa, kernel="trtllm").time_s > ops.flash_attention(hidden, *gqa, kernel="trtllm").time_s


def test_an_engines_mla_prefill_is_its_kernel_plus_a_rope_and_latent_pass():
    """DeepSeek-V3's MLA on one rank of 16 heads, 2,048 new tokens, a BF16 cache: the engine's
    kernel over the heads at the mean of the 192-wide keys and 128-wide values, then one pass
    roping the queries' and keys' 64-wide parts (in and out) and writing each token's 512 + 64
    latent at the cache share (0.5) of HBM; the GQA op's K and V write is not charged."""
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=KERNELS)
    kernel = ops.flash_attention(hw, 16, 2048, 2048, 160, 1, True, kernel="trtllm", kv_bytes_per_element=2,
                                 preprocess=False)
    rope = 2 * 2 * 2048 * 16 * 64 * 2
    latent = 2048 * (512 + 64) * 2
    expected = kernel.time_s + rope / ops.mixed_bandwidth_bps(hw) + 2 * latent / (hw.gpu.hbm.bandwidth_bps * 0.5)
    op = mla_prefill(hw, 1, 16, 2048, 2048, 192, 128, 512, 64, True, "trtllm", 2)
    assert op.time_s == pytest.approx(expected)
    assert ops.flash_attention(hw, 16, 2048, 2048, 160, 1, True, kernel="trtllm", kv_bytes_per_element=2).time_s \
        > kernel.time_s


def test_an_fp8_cache_casts_every_heads_queries_keys_and_values_for_the_fp8_mla_kernel():
    """The same op over an FP8 cache adds one pass reading 16 heads' BF16 queries (192 wide),
    keys (192) and values (128) and writing them in FP8: 16 x 2,048 x 512 x 3 bytes."""
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=KERNELS)
    args = (hw, 1, 16, 2048, 2048, 192, 128, 512, 64, True, "trtllm")
    kernel = ops.flash_attention(hw, 16, 2048, 2048, 160, 1, True, kernel="trtllm", kv_bytes_per_element=1,
                                 preprocess=False)
    rope = 2 * 2 * 2048 * 16 * 64 * 2
    latent = 2048 * (512 + 64) * 1
    cast = 16 * 2048 * (192 + 192 + 128) * 3
    expected = kernel.time_s + (rope + cast) / ops.mixed_bandwidth_bps(hw) + \
        2 * latent / (hw.gpu.hbm.bandwidth_bps * 0.5)
    assert mla_prefill(*args, 1).time_s == pytest.approx(expected)


def test_the_fp8_cast_is_a_kernel_of_its_own_where_the_gpu_has_fp8():
    """A 3 us launch costs the BF16-cache op once (its attention kernel) and the FP8-cache op
    twice on an H100 (the cast kernel too); an A100, without FP8 kernels, casts nothing."""
    for preset, fp8_launches in (("h100-sxm5-80gb", 2), ("a100-sxm4-80gb", 1)):
        hw = bare(load_hardware(preset), trtllm=KERNELS)
        launched = dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, launch_overhead_s=3e-6))
        for cache, launches in ((2, 1), (1, fp8_launches)):
            args = (1, 16, 256, 256, 192, 128, 512, 64, True, "trtllm", cache)
            assert mla_prefill(launched, *args).time_s - mla_prefill(hw, *args).time_s == \
                pytest.approx(launches * 3e-6)


def test_an_engines_mla_context_kernel_runs_at_its_own_shares_and_tile_cost():
    """With the engine's MLA context kernel fitted (0.8 of the BF16 peak, 0.6 of FP8's, 3 us a
    query tile), the op's attention is the GQA kernel's at those in place of its own 0.5, 0.4
    and 1 us: the same floor and loads."""
    own = MlaPrefill(tensor_share=0.8, fp8_tensor_share=0.6, tile_s=3e-6)
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(KERNELS, mla_prefill=own))
    as_gqa = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(
        KERNELS, prefill_tensor_share=0.8, prefill_fp8_tensor_share=0.6, prefill_tile_s=3e-6))
    for cache in (2, 1):
        args = (1, 16, 8192, 8192, 192, 128, 512, 64, True, "trtllm", cache)
        assert mla_prefill(hw, *args).time_s == pytest.approx(mla_prefill(as_gqa, *args).time_s)
    without = bare(load_hardware("h100-sxm5-80gb"), trtllm=KERNELS)
    assert mla_prefill(hw, 1, 16, 8192, 8192, 192, 128, 512, 64, True, "trtllm", 2).time_s < \
        mla_prefill(without, 1, 16, 8192, 8192, 192, 128, 512, 64, True, "trtllm", 2).time_s


def test_an_mla_prefill_block_takes_the_gqa_kernels_tile_cost_unless_it_gives_its_own():
    fields = _preset_fields("h100-sxm5-80gb")
    shares = {"tensor_share": 0.7, "fp8_tensor_share": 0.4}
    plain = load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
        **fields, "mla_prefill": shares}}}).calibration.engine_kernels("trtllm")
    assert plain.mla_prefill.tile_s == plain.prefill_tile_s
    own = load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
        **fields, "mla_prefill": {**shares, "tile": "2 us"}}}}).calibration.engine_kernels("trtllm")
    assert own.mla_prefill.tile_s == pytest.approx(2e-6)
    with pytest.raises(SpecError, match="mla_prefill.tile"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
            **fields, "mla_prefill": {**shares, "tile": 2}}}})


def test_an_mla_prefill_block_takes_shares_up_to_one():
    with pytest.raises(SpecError, match="mla_prefill.tensor_share"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
            **_preset_fields("h100-sxm5-80gb"), "mla_prefill": {"tensor_share": 1.5, "fp8_tensor_share": 0.4}}}})


def test_an_engine_block_exposes_a_share_of_its_softmax_from_none_to_all():
    hidden = load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": _preset_fields("h100-sxm5-80gb")}})
    assert hidden.calibration.engine_kernels("trtllm").prefill_softmax_exposed == 0.0
    with pytest.raises(SpecError, match="prefill_softmax_exposed"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
            **_preset_fields("h100-sxm5-80gb"), "prefill_softmax_exposed": 1.5}}})


MLA = MlaDecode(floor_s=10e-6, sequence_s=4e-6, bandwidth_share=0.6, tensor_share=0.5, fp8_tensor_share=0.25,
                fp8_bandwidth_share=0.8)


def test_an_engines_mla_decode_is_its_floor_a_cost_per_sequence_tile_and_the_slower_of_sweep_and_matmuls():
    """64 sequences of 16 heads over 4,096 cached tokens of an FP8 latent (512 + 64): the cache
    (64 x 4,096 x 576 bytes) swept at 0.8 of HBM (the FP8 sweep's share) beside the queries in
    and latents out, the
    matmuls (one 64-head tile each, 2 x 64 x 64 x 4,096 x 1,088) at 0.25 of the FP8 peak, the
    larger of the two, plus 64 sequence tiles x 4 us over 132 SMs and the 10 us floor."""
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(KERNELS, mla_decode=MLA))
    sweep = 64 * 4096 * 576 / (hw.gpu.hbm.bandwidth_bps * 0.8) + 64 * 16 * 1088 * 2 / ops.mixed_bandwidth_bps(hw)
    matmuls = 2.0 * 64 * 64 * 4096 * 1088 / (hw.gpu.flops("fp8") * 0.25)
    expected = 10e-6 + max(sweep, matmuls) + 64 * 4e-6 / 132
    assert mla_decode(hw, 64, 16, 4096, 512, 64, 1, "trtllm").time_s == pytest.approx(expected)
    generic = mla_decode(hw, 64, 16, 4096, 512, 64, 1).time_s
    assert generic != pytest.approx(expected)


def test_an_mla_decode_sweeps_a_bf16_cache_at_its_own_share():
    """The same 64 x 4,096 tokens in BF16, 16 heads: twice the bytes at 0.6 of HBM (the BF16
    share), the matmuls at 0.5 of the BF16 peak, the larger of the two."""
    hw = bare(load_hardware("h100-sxm5-80gb"), trtllm=dataclasses.replace(KERNELS, mla_decode=MLA))
    sweep = 64 * 4096 * 576 * 2 / (hw.gpu.hbm.bandwidth_bps * 0.6) + 64 * 16 * 1088 * 2 / ops.mixed_bandwidth_bps(hw)
    matmuls = 2.0 * 64 * 64 * 4096 * 1088 / (hw.gpu.flops("bf16") * 0.5)
    expected = 10e-6 + max(sweep, matmuls) + 64 * 4e-6 / 132
    assert mla_decode(hw, 64, 16, 4096, 512, 64, 2, "trtllm").time_s == pytest.approx(expected)


def test_an_mla_decode_blocks_fp8_sweep_share_defaults_to_the_bf16_one():
    block = {"floor": "10 us", "sequence": "4 us", "bandwidth_share": 0.9, "tensor_share": 0.6, "fp8_tensor_share": 0.4}
    fields = {**_preset_fields("h100-sxm5-80gb"), "mla_decode": block}
    hw = load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": fields}})
    assert hw.calibration.engine_kernels("trtllm").mla_decode.fp8_bandwidth_share == 0.9
    fields["mla_decode"] = {**block, "fp8_bandwidth_share": 0.7}
    hw = load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": fields}})
    assert hw.calibration.engine_kernels("trtllm").mla_decode.fp8_bandwidth_share == 0.7


def test_an_mla_decode_block_needs_its_units():
    with pytest.raises(SpecError, match="mla_decode.floor.*4 us"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"trtllm": {
            **_preset_fields("h100-sxm5-80gb"), "mla_decode": {"floor": 10, "sequence": "4 us", "bandwidth_share": 0.9,
                                                               "tensor_share": 0.6, "fp8_tensor_share": 0.4}}}})


def _preset_fields(preset: str) -> dict:
    """The preset's TensorRT-LLM engine_attention fields as a hardware file writes them."""
    k = load_hardware(preset).calibration.engine_kernels("trtllm")
    return {"prefill_tensor_share": k.prefill_tensor_share, "prefill_fp8_tensor_share": k.prefill_fp8_tensor_share,
            "prefill_cache_share": k.prefill_cache_share, "prefill_tile": f"{k.prefill_tile_s * 1e6} us",
            "prefill_floor": f"{k.prefill_floor_s * 1e6} us", "decode_floor": f"{k.decode_floor_s * 1e6} us",
            "decode_pair": f"{k.decode_pair_s * 1e6} us", "decode_bandwidth_share": k.decode_bandwidth_share,
            "decode_fp8_bandwidth_share": k.decode_fp8_bandwidth_share,
            "decode_split_tokens": int(k.decode_split_tokens), "decode_max_splits": int(k.decode_max_splits),
            "decode_saturation": k.decode_saturation, "decode_score": f"{k.decode_score_s * 1e9} ns"}


def test_engine_attention_names_engines_we_know():
    with pytest.raises(SpecError, match="engine_attention.*sglang.*trtllm, vllm"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_attention": {"sglang": {}}})


@pytest.mark.parametrize("preset", ["h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "gb200-nvl72"])
def test_target_presets_describe_both_engines(preset):
    cal = load_hardware(preset).calibration
    assert [name for name, _ in cal.engine_attention] == ["trtllm", "vllm"]


def test_the_kernel_suite_times_a_decode_row_by_its_engine(tmp_path):
    folder = tmp_path / "h100_sxm" / "attention" / "trtllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"batch_size": [16], "num_heads": [32], "num_key_value_heads": [8], "head_dim": [128],
                             "step": [4095], "window_size": [0], "attn_dtype": ["bfloat16"],
                             "kv_cache_dtype": ["fp8"], "latency": [0.05]}), folder / "generation_attention_perf.parquet")
    [record], _ = kernel_groups(tmp_path)
    hw = kernels_alone(with_dtype(load_hardware("h100-sxm5-80gb"), "bf16", "h100-sxm5-80gb", "dtype"))
    predicted_s = ops.decode_attention(hw, 16, 32, 8, 4096, 128, 1, "trtllm").time_s
    assert record["median_error_pct"] == pytest.approx(100 * (predicted_s / 0.05e-3 - 1))
    assert predicted_s != ops.decode_attention(hw, 16, 32, 8, 4096, 128, 1).time_s
