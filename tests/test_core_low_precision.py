"""FP8, MXFP8 and NVFP4 under Transformer Engine's recipes (issue 21, point 5): bytes per
quantized element, the quantization kernels' time, the weight copies in memory, FP4 weights and
KV cache in inference, and the refusals of a dtype or recipe that does not fit."""
import pytest

import core
from core import SpecError
from core.model import ops
from core.model.graph import gemm_input_bytes
from core.model.loader import load_hardware, with_dtype
from core.model.memory import fp8_weight_bytes, inference_weight_bytes, weight_bytes
from core.model.specs import kv_element_bytes, quantized_bytes
from sweep.cli import main

B200 = load_hardware("b200-sxm-180gb")
H100 = load_hardware("h100-sxm5-80gb")


def on(hw, dtype, recipe=""):
    return with_dtype(hw, dtype, "test", "dtype", recipe)


def test_a_quantized_element_carries_its_share_of_the_block_scales():
    assert quantized_bytes("fp8", "delayed") == quantized_bytes("fp8", "current") == 1  # one scale per tensor
    assert quantized_bytes("fp8", "block-scaled") == 1 + 4 / 128  # an FP32 scale per 1x128 tile
    assert quantized_bytes("mxfp8", "block-scaled") == 1 + 1 / 32  # an E8M0 byte per 32
    assert quantized_bytes("nvfp4", "block-scaled") == 0.5 + 1 / 16  # an E4M3 byte per 16
    # weights scaled over 16x16 blocks (TE's 2D recipe) still store a scale per 16 along k
    assert quantized_bytes("nvfp4", "block-scaled", weights=True) == 0.5 + 1 / 16
    assert quantized_bytes("fp8", "block-scaled", weights=True) == 1 + 4 / (128 * 128)  # per 128x128
    assert kv_element_bytes("nvfp4") == 0.5625 and kv_element_bytes("fp8") == 1


def test_each_low_precision_format_runs_at_its_own_measured_share_of_its_peak():
    """MXFP8 takes per-tensor FP8's share (the same MMA at the FP8 peak); NVFP4 its own, fitted
    on the NVFP4 kernel table; both relative to the BF16 share, with the steps' shares."""
    cal = B200.calibration
    step = cal.compute_efficiency * cal.step_efficiency * cal.fp8_step_efficiency
    assert ops.tensor_rate_flops(B200, "mxfp8") == pytest.approx(4500e12 * step * cal.fp8_efficiency)
    assert ops.tensor_rate_flops(B200, "fp8") == ops.tensor_rate_flops(B200, "mxfp8")
    assert ops.tensor_rate_flops(B200, "nvfp4") == pytest.approx(9000e12 * step * cal.nvfp4_efficiency)
    assert ops.tensor_rate_flops(B200, "bf16") == pytest.approx(2250e12 * cal.compute_efficiency * cal.step_efficiency)


def test_block_scaled_fp8_costs_hopper_its_rescaling_share_and_blackwell_nothing():
    per_tensor, blocks = ops.tensor_rate_flops(on(H100, "fp8"), "fp8"), ops.tensor_rate_flops(
        on(H100, "fp8", "block-scaled"), "fp8")
    assert blocks == pytest.approx(per_tensor * H100.calibration.fp8_block_efficiency)
    assert H100.calibration.fp8_block_efficiency < 1 == B200.calibration.fp8_block_efficiency
    assert ops.tensor_rate_flops(on(B200, "fp8", "block-scaled"), "fp8") == ops.tensor_rate_flops(on(B200, "fp8"), "fp8")


def test_hopper_runs_a_block_scaled_k_loop_one_scale_block_at_a_time():
    """One 64 x 1024 output over k = 65,536 is 512 k-blocks of 128 that an SM of Hopper's
    block-scaled kernel takes in turn, at least gpu.block_scale_step each, without splitting k;
    the per-tensor kernel spreads the same GEMM over split-K. Blackwell's MMA takes the scales."""
    blocks = on(H100, "fp8", "block-scaled")
    assert H100.gpu.block_scale_step_s == pytest.approx(143e-9) and B200.gpu.block_scale_step_s == 0
    assert ops.gemm(blocks, 64, 1024, 65536).time_s >= 512 * H100.gpu.block_scale_step_s
    assert ops.gemm(on(H100, "fp8"), 64, 1024, 65536).time_s < 512 * H100.gpu.block_scale_step_s / 2
    per_tensor = ops.gemm(on(B200, "fp8"), 64, 1024, 65536).time_s
    assert per_tensor < ops.gemm(on(B200, "fp8", "block-scaled"), 64, 1024, 65536).time_s <= per_tensor * (1 + 4 / 128)


def test_a_block_scaled_gemm_reads_its_operands_scales_beside_them():
    """A decode GEMM (one token) reads its input and streams its weight with the scales the
    GEMM takes beside each: NVFP4 an E4M3 byte per 16 elements, MXFP8 an E8M0 byte per 32,
    per-tensor FP8 none; its BF16 output is written as is."""
    for dtype, element_bytes in (("nvfp4", 0.5 + 1 / 16), ("mxfp8", 1 + 1 / 32), ("fp8", 1)):
        gemm = ops.gemm(on(B200, dtype), 1, 8192, 8192)
        assert gemm.hbm_bytes == (8192 + 8192 * 8192) * element_bytes + 8192 * 2
    bf16_run = on(B200, "bf16")  # an NVFP4 GEMM in a BF16 run is block-scaled all the same
    assert ops.gemm(bf16_run, 1, 8192, 8192, dtype="nvfp4") == ops.gemm(on(B200, "nvfp4"), 1, 8192, 8192)


def test_each_dtype_takes_its_default_recipe_and_only_the_recipes_that_fit():
    assert (on(H100, "fp8").recipe, on(B200, "mxfp8").recipe, on(B200, "nvfp4").recipe) == (
        "delayed", "block-scaled", "block-scaled")
    assert on(H100, "bf16").recipe == ""
    assert on(H100, "fp8", "current").recipe == "current"
    with pytest.raises(SpecError, match="dtype mxfp8 takes fp8_recipe block-scaled"):
        on(B200, "mxfp8", "delayed")
    with pytest.raises(SpecError, match="dtype bf16 takes fp8_recipe none only"):
        on(H100, "bf16", "current")
    assert on(H100, "bf16", "none").recipe == ""  # a 16-bit run's one recipe, said outright
    with pytest.raises(SpecError, match="dtype fp8 takes fp8_recipe delayed, current, block-scaled"):
        on(H100, "fp8", "none")
    with pytest.raises(SpecError, match="expected one of delayed, current, block-scaled"):
        on(H100, "fp8", "tensorwise")
    with pytest.raises(SpecError, match="has no nvfp4 peak"):
        on(H100, "nvfp4")


def test_quantization_reads_the_bf16_tensor_and_writes_each_copy_by_recipe():
    elements = 1 << 24
    read = 2 * elements

    def kernels(hw, *moved):
        return sum(ops.pointwise(hw, bytes_).time_s for bytes_ in moved)

    delayed = on(H100, "fp8")
    assert ops.fp8_cast(delayed, elements, True).time_s == pytest.approx(kernels(delayed, read + 2 * elements))
    current = on(H100, "fp8", "current")  # an amax pass first, then a kernel making it the scale
    assert ops.fp8_cast(current, elements, True).time_s == pytest.approx(
        kernels(current, read, 0.0, read + 2 * elements))
    mx = on(B200, "mxfp8")
    assert ops.fp8_cast(mx, elements, True).time_s == pytest.approx(kernels(mx, read + 2 * elements * (1 + 1 / 32)))
    fp4 = on(B200, "nvfp4")  # amax, rowwise cast; then the Hadamard-transformed columnwise copy's amax and cast
    copy = elements * (0.5 + 1 / 16)
    assert ops.fp8_cast(fp4, elements, False).time_s == pytest.approx(kernels(fp4, read, read + copy))
    assert ops.fp8_cast(fp4, elements, True).time_s == pytest.approx(kernels(fp4, read, read + copy, read, read + copy))
    assert ops.fp8_cast(B200, elements, True).time_s == 0  # bf16: no quantization


def test_saved_gemm_inputs_and_weight_copies_follow_the_format():
    par, fp8_weights = core.Parallelism(), core.Parallelism(fp8_params=True)
    mx, fp4 = on(B200, "mxfp8"), on(B200, "nvfp4")
    assert gemm_input_bytes(B200) == 2 and gemm_input_bytes(on(H100, "fp8")) == 1
    assert gemm_input_bytes(mx) == 1 + 1 / 32 and gemm_input_bytes(fp4) == 0.5625
    assert fp8_weight_bytes(on(H100, "fp8"), par) == 2  # FP8 copy + transpose, as before
    assert fp8_weight_bytes(mx, par) == 2 * (1 + 1 / 32)  # rowwise + columnwise copies
    assert fp8_weight_bytes(mx, fp8_weights) == 1 + 1 / 32 == weight_bytes(mx, fp8_weights)
    assert fp8_weight_bytes(fp4, par) == 2 * (0.5 + 1 / 16)  # a scale per 16 along k in each copy
    assert weight_bytes(fp4, par) == 2  # the BF16 working copy
    assert fp8_weight_bytes(B200, par) == 0


def test_fp4_inference_stores_fp4_weights_and_an_fp4_kv_cache_with_their_scales():
    model, par = core.load_model("llama3.1-70b"), core.Parallelism(tp=8)
    request = core.InferWorkload(batch=8, prompt=1024, decode=128, kv_dtype="nvfp4")
    fp4 = on(B200, "nvfp4")
    assert inference_weight_bytes(fp4) == 0.5625 and inference_weight_bytes(on(H100, "fp8")) == 1
    memory = core.estimate_memory(model, fp4, par, request)
    fp8_kv = core.estimate_memory(model, fp4, par, core.InferWorkload(8, 1024, 128, kv_dtype="fp8"))
    assert memory.kv_cache_bytes == pytest.approx(0.5625 * fp8_kv.kv_cache_bytes)
    bf16_weights = core.estimate_memory(model, B200, par, request).weights_bytes
    assert memory.weights_bytes == pytest.approx(bf16_weights * 0.5625 / 2)
    assert core.evaluate(model, fp4, par, request, 8)["step_time_s"] > 0
    reason = core.check_layout(model, H100, par, request, 8)
    assert reason.startswith("kv_dtype nvfp4 needs a GPU with an nvfp4 peak (Blackwell)")


@pytest.mark.parametrize("dtype", ("bf16", "fp8", "mxfp8", "nvfp4"))
def test_a_70b_layout_runs_on_blackwell_in_every_dtype(dtype):
    model, par = core.load_model("llama3.1-70b"), core.Parallelism(tp=4, pp=4, dp=4, recompute="selective")
    record = core.evaluate(model, on(B200, dtype), par, core.TrainWorkload(64, 8192), 64)
    assert record["feasible"] and record["step_time_s"] > 0


@pytest.mark.parametrize("argv, expected", [
    (["--dtype", "nvfp4", "--fp8-recipe", "delayed"], "'--fp8-recipe' = delayed: dtype nvfp4 takes fp8_recipe block-scaled"),
    (["--dtype", "bf16", "--fp8-recipe", "current"], "dtype bf16 takes fp8_recipe none only"),
])
def test_rapid_run_refuses_a_recipe_the_dtype_does_not_take_in_one_line(argv, expected, capsys):
    assert main(["run", "--model", "llama3.1-8b", "--hardware", "b200-sxm-180gb", "--gpus", "8", "--tp", "8",
                 *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err


def test_a_study_sweeps_dtypes_and_recipes_and_counts_the_pairs_that_do_not_fit(write_study):
    from sweep.study.loader import load_study
    from sweep.study.grid import plan_study
    plan = plan_study(load_study(write_study(hardware="b200-sxm-180gb", space={
        "tp": [2], "pp": [1], "cp": [1], "zero": [1], "micro_batch": [1], "recompute": ["none"],
        "hardware.gpu.hbm.bandwidth": ["7.7 TB/s"], "dtype": ["fp8", "mxfp8", "nvfp4"],
        "fp8_recipe": ["delayed", "block-scaled"]})))
    pairs = {(plan.hardware[p.hardware_index].dtype, plan.hardware[p.hardware_index].recipe) for p in plan.points}
    assert pairs == {("fp8", "delayed"), ("fp8", "block-scaled"), ("mxfp8", "block-scaled"),
                     ("nvfp4", "block-scaled")}
    assert plan.illegal_count == 2
    with_bf16 = plan_study(load_study(write_study(hardware="b200-sxm-180gb", space={
        "tp": [2], "pp": [1], "cp": [1], "dtype": ["bf16", "fp8"], "fp8_recipe": ["none", "delayed", "current"]})))
    assert {(with_bf16.hardware[p.hardware_index].dtype, with_bf16.hardware[p.hardware_index].fp8_recipe)
            for p in with_bf16.points} == {("bf16", "none"), ("fp8", "delayed"), ("fp8", "current")}
    assert "fp8_recipe delayed: dtype mxfp8 takes fp8_recipe block-scaled" in plan.illegal_examples.values()


@pytest.mark.parametrize("dtype", ["fp32", "tf32", "fp8"])
def test_mfu_is_quoted_against_the_16_bit_peak_in_every_precision(dtype):
    from dataclasses import replace
    from core.evaluation import mfu_peak_flops

    hw = replace(load_hardware("h100-sxm5-80gb"), dtype=dtype)
    assert mfu_peak_flops(hw) == hw.gpu.flops("bf16")
