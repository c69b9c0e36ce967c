"""A serving engine's grouped MoE expert GEMMs (core.serving.moe) and where the iteration takes
them, on figures worked out by hand."""
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from core.model import ops
from core.model.loader import load_hardware, load_model, with_dtype
from core.serving import iteration, moe
from core.serving.engines import ENGINES
from core.serving.iteration import IterationModel
from core.serving.moe import expert_gemms_s, grouped, table_row_s

# block-scaled FP8, as serving engines run FP8 MoE checkpoints, at the rates an engine runs
H200 = ops.at_kernel_rates(with_dtype(load_hardware("h200-sxm-141gb"), "fp8", "test", "dtype", "block-scaled"))


def _factors(hw, efficiency, half_ffn):
    return replace(hw, calibration=replace(hw.calibration, moe_gemm_efficiency=efficiency, moe_half_ffn=half_ffn))


def test_the_math_of_a_narrow_expert_slice_runs_at_its_share_of_the_peak():
    """1,000 copies through 256-column slices of 1,024-wide experts: 2 x 1000 x 3 x 1024 x 256
    FLOPs at the FP8 peak x 0.5 x 256 / (256 + 256)."""
    hw = _factors(H200, 0.5, 256.0)
    flops = 2 * 1000 * 3 * 1024 * 256
    expected = flops / (hw.gpu.flops("fp8") * 0.5 * 0.5)
    assert expert_gemms_s(hw, 0.0, 1000, 1024, 256) == pytest.approx(expected)


def test_the_math_slows_with_the_clock_a_power_limit_leaves():
    hw = _factors(H200, 0.5, 256.0)
    throttled = replace(hw, calibration=replace(hw.calibration, sustained_clock=0.8))
    unthrottled_s = expert_gemms_s(hw, 0.0, 1000, 1024, 256)
    assert expert_gemms_s(throttled, 0.0, 1000, 1024, 256) == pytest.approx(unthrottled_s / 0.8)


def test_the_plain_gemms_stand_where_they_take_longer_than_the_math():
    hw = _factors(H200, 0.5, 256.0)
    assert expert_gemms_s(hw, 1.0, 1000, 1024, 256) == 1.0


def test_only_vllm_runs_the_measured_fused_moe_kernels():
    assert [name for name, spec in ENGINES.items() if spec.grouped_moe] == ["vllm"]


def test_the_hopper_and_blackwell_presets_carry_fitted_factors_and_others_none():
    fitted = [load_hardware(name).calibration for name in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb")]
    assert all(c.moe_gemm_efficiency > 0 and c.moe_half_ffn > 0 for c in fitted)
    assert not grouped(load_hardware("a100-sxm4-80gb"))


def test_a_deepseek_prefill_chunk_takes_a_slower_grouped_kernels_time_on_every_moe_layer():
    """An 8,192-token prefill chunk of DeepSeek-V3 on 8 H200s (etp 8: 256-column slices) on an
    engine running fused-MoE kernels at 0.3 of the FP8 peak and half of that at 512 columns:
    each of the 58 MoE layers adds what that math takes beyond the plain GEMMs, as it does with the
    preset's fitted factors."""
    model = load_model("deepseek-v3")
    spec = next(s for s, _ in model.layer_groups() if s.moe is not None)
    slow = _factors(H200, 0.3, 512.0)
    plain_hw = replace(H200, calibration=replace(H200.calibration, moe_gemm_efficiency=0.0))
    plain = IterationModel(model, plain_hw, 8, 1, 1, grouped_moe=True).time_s(8192, 0, 0, 0, False)
    own_kernels = IterationModel(model, slow, 8, 1, 1).time_s(8192, 0, 0, 0, False)
    mine = IterationModel(model, slow, 8, 1, 1, grouped_moe=True).time_s(8192, 0, 0, 0, False)
    assert own_kernels == plain  # an engine on kernels of its own keeps the plain GEMMs
    ffn = spec.moe.expert_ffn_hidden / 8
    grouped_s = 2 * 8192 * spec.moe.top_k * 3 * spec.hidden * ffn / (H200.gpu.flops("fp8") * 0.3 * ffn / (ffn + 512.0))
    layer = iteration.build_decode_layer(spec, H200, 8192, 1, 8, 1.0, 1)
    plain_experts_s = sum(op.time_s for op in layer if op.name in iteration.EXPERT_OPS)
    chain_s = iteration.MOE_CHAIN * H200.gpu.launch_overhead_s
    assert grouped_s > plain_experts_s + chain_s
    assert mine - plain == pytest.approx(58 * (grouped_s - plain_experts_s - chain_s))
    cal = H200.calibration
    fitted_s = 2 * 8192 * spec.moe.top_k * 3 * spec.hidden * ffn / (
        H200.gpu.flops("fp8") * cal.moe_gemm_efficiency * ffn / (ffn + cal.moe_half_ffn))
    preset = IterationModel(model, H200, 8, 1, 1, grouped_moe=True).time_s(8192, 0, 0, 0, False)
    assert preset - plain == pytest.approx(58 * (fitted_s - plain_experts_s - chain_s))


def test_the_moe_fit_times_a_table_row_as_the_kernel_suite_does():
    """scripts/fit_moe_gemm.py fits the grouped factors on the rows as core.serving.moe.table_row_s
    runs them: an expert-parallel row's GPU takes tokens x top_k / ep copies (16,384 x 8 / 8 here),
    not every copy."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import fit_moe_gemm

    row = ("h200_sxm", "fp8_block", (7168, 2048, 256, 8), 16384, 1, 8, 1.0)
    plain_s = fit_moe_gemm.plain([row], "h200-sxm-141gb")
    fitted = fit_moe_gemm.predicted([row], "h200-sxm-141gb", (0.3, 512.0), plain_s)[0]
    hw = fit_moe_gemm._hardware("h200-sxm-141gb", "fp8_block", (0.3, 512.0))
    assert fitted == pytest.approx(table_row_s(hw, 7168, 2048, 256, 8, 16384, 1, 8, grouped_kernels=True))


def test_per_tensor_fp8_and_bf16_take_their_own_factors():
    """The fitted pair is the block-scaled kernels'; BF16 has its own, per-tensor FP8 none (the
    plain GEMMs stand)."""
    hw = load_hardware("h200-sxm-141gb")
    cal = hw.calibration
    assert moe.factors(with_dtype(hw, "fp8", "test", "dtype", "block-scaled")) == (cal.moe_gemm_efficiency,
                                                                                  cal.moe_half_ffn)
    assert moe.factors(with_dtype(hw, "bf16", "test", "dtype")) == (cal.moe_bf16_gemm_efficiency, cal.moe_bf16_half_ffn)
    assert moe.factors(with_dtype(hw, "fp8", "test", "dtype", "current")) == (0.0, 0.0)
    assert not grouped(with_dtype(hw, "fp8", "test", "dtype", "current"))
