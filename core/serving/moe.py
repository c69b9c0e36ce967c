"""A serving engine's MoE expert GEMMs: for an engine running fused grouped-MoE kernels (vLLM,
core.serving.engines.EngineSpec.grouped_moe) the longer of the layer graph's plain batched GEMMs
and the grouped kernel's math at the dtype's peak times `moe_gemm_efficiency` x ffn / (ffn +
`moe_half_ffn`) (`moe_bf16_*` for BF16 kernels), a narrow expert slice (its FFN over expert
tensor parallelism) leaving each tile's fixed work more weight; engines on kernels of their own keep the plain GEMMs. Both
factors are per GPU family (the hardware preset's calibration), fitted by
scripts/fit_moe_gemm.py on the measured MoE kernel tables (../shared/validation/kernels/*/moe),
never on serving runs, reading each row as the collector runs it (table_row_s): at prefill sizes the
fused kernels reach 0.2-0.3 of the peak, well under the plain GEMMs' share."""
from core.model.graph import build_decode_layer
from core.model.specs import HardwareSpec, ModelSpec, MoESpec

MATRICES = 3  # gate, up and down projection of each (gated) expert
# An MoE block in a serving engine is a chain of dependent kernels around its grouped GEMMs
# (top-k routing, token permutation, the un-permute and weighted sum), each waiting out the last
# one's launch latency, which CUDA-graph replay does not remove. vLLM's MoE tables
# (../shared/validation/kernels) at 1-8 tokens exceed our expert GEMMs (their kernels timed
# alone) by 10-11 us on Blackwell in FP8 and NVFP4, about five of its 2.0 us launches (BF16 3.5,
# block-scaled FP8 11), and by 19-20 us on Hopper in BF16 (six or seven of its 3 us; block-scaled
# FP8 nine): five launches, the Blackwell figure, is taken for every engine.
MOE_CHAIN = 5
EXPERT_OPS = ("mlp_up", "activation", "mlp_down")  # an MoE layer's expert kernels in the layer graph


HALF_PRECISION = ("bf16", "fp16")  # dtypes whose fused kernels take the BF16 factors


def factors(hw: HardwareSpec, dtype: str = "") -> tuple:
    """(efficiency, half-FFN) of the fused MoE kernels in `dtype` (default: the hardware's): the
    BF16 pair, or the block-scaled one (block-scaled FP8, NVFP4). Per-tensor FP8's kernels are
    not fitted, (0, 0): the plain GEMMs (its Blackwell rows run at about their rate; Hopper's take
    4-5x them at every size, a fixed cost no GEMM share explains)."""
    cal = hw.calibration
    dtype = dtype or hw.dtype
    if dtype in HALF_PRECISION:
        return cal.moe_bf16_gemm_efficiency, cal.moe_bf16_half_ffn
    if dtype == "fp8" and hw.recipe != "block-scaled":
        return 0.0, 0.0
    return cal.moe_gemm_efficiency, cal.moe_half_ffn


def grouped(hw: HardwareSpec) -> bool:
    """Whether `hw` carries fitted grouped-MoE factors for its dtype (else the plain GEMMs stand)."""
    return factors(hw)[0] > 0


def expert_gemms_s(hw: HardwareSpec, plain_s: float, copies: float, hidden: int, ffn: float, dtype: str = "") -> float:
    """Seconds of one MoE layer's expert GEMMs on one GPU whose plain batched GEMMs take
    `plain_s`: `copies` token copies, each through a gated FFN of `ffn` columns (the expert's
    share on this GPU) on `hidden`, math in `dtype` (default: the hardware's), at the clock the
    GPU holds (calibration.sustained_clock, lowered under a power limit) as every kernel is."""
    efficiency, half_ffn = factors(hw, dtype)
    peak = hw.gpu.flops(dtype or hw.dtype) * hw.calibration.sustained_clock
    rate = peak * efficiency * ffn / (ffn + half_ffn)
    return max(plain_s, 2.0 * copies * MATRICES * hidden * ffn / rate)


def table_row_s(hw: HardwareSpec, hidden: int, inter: int, experts: int, topk: int, tokens: int, tp: int, ep: int,
                gated: bool = True, grouped_kernels: bool = False) -> float:
    """One GPU's MoE experts as AIConfigurator's MoE tables time them: `tokens` tokens routed
    (balanced) over all `experts`, of which the GPU holds its 1 / ep share, each split over tp
    GPUs, so it runs tokens x topk / ep copies (the collector's expert map). The layer graph's
    plain batched GEMMs (EXPERT_OPS) and the routing chain's launches (MOE_CHAIN); with
    `grouped_kernels` (an engine running the fused-MoE kernels) on hardware with fitted factors,
    the grouped kernel's math where it outlasts them."""
    gpus = tp * ep
    model = ModelSpec(name="moe", layers=1, hidden=hidden, heads=gpus, kv_heads=gpus, ffn_hidden=0, vocab=1,
                      activation="swiglu" if gated else "squared_relu", moe=MoESpec(experts, topk, inter))
    layer = build_decode_layer(model, hw, tokens, 1, gpus, 1.0, ep)
    plain_s = sum(op.time_s for op in layer if op.name in EXPERT_OPS) + MOE_CHAIN * hw.gpu.launch_overhead_s
    if not (grouped_kernels and grouped(hw)):
        return plain_s
    return expert_gemms_s(hw, plain_s, tokens * topk / ep, hidden, inter / tp)
