"""A serving engine's MoE expert GEMMs: for an engine running fused grouped-MoE kernels (vLLM,
core.serving.engines.EngineSpec.grouped_moe) the longer of the layer graph's plain batched GEMMs
and the grouped kernel's math at the dtype's peak times `moe_gemm_efficiency` x ffn / (ffn +
`moe_half_ffn`), a narrow expert slice (its FFN over expert tensor parallelism) leaving each
tile's fixed work more weight; engines on kernels of their own keep the plain GEMMs. Both
factors are per GPU family (the hardware preset's calibration), fitted by
scripts/fit_moe_gemm.py on the measured MoE kernel tables (../shared/validation/kernels/*/moe),
never on serving runs; read as the collector runs its rows (table_row_s), the fits sit at their
bounds, the plain GEMMs already faster than the fused kernels at prefill sizes."""
from core.model.graph import build_decode_layer
from core.model.specs import HardwareSpec, ModelSpec, MoESpec

MATRICES = 3  # gate, up and down projection of each (gated) expert
# An MoE block in a serving engine is a chain of dependent kernels around its grouped GEMMs
# (top-k routing, token permutation, the un-permute and weighted sum), each waiting out the last
# one's launch latency, which CUDA-graph replay does not remove. AIConfigurator's MoE tables
# (../shared/validation/kernels) at 1-8 tokens exceed our expert GEMMs by 16 us on B200
# (FlashInfer's TensorRT-LLM kernels) and 35-45 us on H200 (Triton, TensorRT-LLM): five
# launches, the B200 figure, is the lower bound taken.
MOE_CHAIN = 5
EXPERT_OPS = ("mlp_up", "activation", "mlp_down")  # an MoE layer's expert kernels in the layer graph


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
