"""A vLLM engine's MoE expert GEMMs: one fused grouped kernel over a GPU's local experts, as
AIConfigurator's MoE tables time it (engines running kernels of their own keep the plain GEMMs:
core.serving.engines.EngineSpec.grouped_moe). The layer graph times the experts as plain
batched GEMMs (weights streamed, the GEMM model's tiles), which the measured MoE tables
roughly match while weights dominate (few tokens) but undercut 2-3x once the math does (a
prefill chunk) with each expert split over several GPUs: a narrow expert slice (its FFN over
expert tensor parallelism) gives the up-projection few output tiles per expert and the
down-projection a short reduction, so each tile's fixed work (prologue, block-scale loads,
epilogue) weighs more. The experts take the longer of the plain GEMMs and their math at the
dtype's peak times `moe_gemm_efficiency` x ffn / (ffn + `moe_half_ffn`). Both factors are per
GPU family (the hardware preset's calibration), fitted by scripts/fit_moe_gemm.py on the
measured MoE kernel tables (../shared/validation/kernels/*/moe), never on serving runs."""
from core.model.specs import HardwareSpec

MATRICES = 3  # gate, up and down projection of each (gated) expert


def grouped(hw: HardwareSpec) -> bool:
    """Whether `hw` carries fitted grouped-MoE factors (else the plain GEMMs stand)."""
    return hw.calibration.moe_gemm_efficiency > 0


def expert_gemms_s(hw: HardwareSpec, plain_s: float, copies: float, hidden: int, ffn: float, dtype: str = "") -> float:
    """Seconds of one MoE layer's expert GEMMs on one GPU whose plain batched GEMMs take
    `plain_s`: `copies` token copies, each through a gated FFN of `ffn` columns (the expert's
    share on this GPU) on `hidden`, math in `dtype` (default: the hardware's), at the clock the
    GPU holds (calibration.sustained_clock, lowered under a power limit) as every kernel is."""
    cal = hw.calibration
    peak = hw.gpu.flops(dtype or hw.dtype) * cal.sustained_clock
    rate = peak * cal.moe_gemm_efficiency * ffn / (ffn + cal.moe_half_ffn)
    return max(plain_s, 2.0 * copies * MATRICES * hidden * ffn / rate)
