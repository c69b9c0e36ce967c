"""Time of one engine iteration from its token mix: a prefill chunk (query tokens over a context)
beside a batch of decodes (one token each over their caches), through every layer of the
operator model. Memoized (core/serving/src/loop.cpp's IterationMemo) on token counts rounded up
within 1/32 of them (core.serving._loop.bucket), so a simulation of thousands of iterations costs
a few hundred operator-model evaluations, fewer once the engine's memo is warm."""
from dataclasses import dataclass, field, replace

from core.model import ops
from core.model.collectives import collective_time
from core.model.graph import build_decode_layer
from core.model.inference import lm_head_s
from core.model.layout import group_spans
from core.model.ops.mla import mla_prefill
from core.model.specs import HardwareSpec, ModelSpec, Parallelism
from core.model.training import time_ops

from ._loop import IterationMemo
from .moe import EXPERT_OPS, MOE_CHAIN, expert_gemms_s, grouped


# A GQA layer's kernels that an engine's attention ops include (EngineAttention: RoPE on the new
# queries and keys, the new keys and values written into the paged cache).
ENGINE_PREPROCESSING = ("rotary", "kv_append")
# Engines whose MLA ops the kernel tables measure (TensorRT-LLM's context MLA, timed by
# ops.mla.mla_prefill on the engine's fitted kernels, and its MLA generation kernel, by
# ops.mla.mla_decode where the preset fits it); the others' MLA (FlashAttention-3 prefill and
# FlashMLA decode in SGLang and vLLM on Hopper) runs the layer graph's generic kernels.
MLA_ENGINES = ("trtllm",)


def graph_host_s(hw: HardwareSpec, gemms: int, elementwise: int) -> float:
    """What replaying kernels from a CUDA graph saves of their modelled times: every kernel's host
    time (kernel_overhead), and of an elementwise kernel's launch all but what the GPU still pays
    between dependent kernels (gpu.graph_launch_overhead); GEMM and attention kernels keep their
    launch, which is their prologue and epilogue on the GPU."""
    gpu = hw.gpu
    return ((gemms + elementwise) * hw.calibration.kernel_overhead_s
            + elementwise * max(0.0, gpu.launch_overhead_s - gpu.graph_launch_overhead_s))


@dataclass
class IterationModel:
    """One engine's iterations: `model` on `tp` x `pp` GPUs of `hw`, a KV cache of `kv_bytes`
    per element; `attention_dp` ranks each run attention for their own requests (the layer's
    heads split over tp / attention_dp) and the FFN on all ranks' tokens together (the iteration
    times one rank whose peers run the same mix); `ep` of the tp GPUs split the routed experts,
    the attention-DP ranks' tokens sent to their experts and back by all-to-all.
    CUDA-graph iterations pay no host time per kernel (graph_host_s). With `attention_kernels`
    naming an engine whose kernels the GPU's preset describes (calibration.engine_attention), a
    GQA layer's attention runs that engine's prefill and decode ops, which rope the new queries
    and keys and write the new keys and values into the cache themselves (ENGINE_PREPROCESSING
    leaves the layer graph)."""
    model: ModelSpec
    hw: HardwareSpec
    tp: int
    pp: int
    kv_bytes: float
    attention_dp: int = 1
    iteration_overhead_s: float = 0.0
    ep: int = 1
    grouped_moe: bool = False  # the experts run the fused-MoE kernels the MoE tables time (core/serving/moe.py)
    attention_kernels: str = ""  # the engine whose attention kernels time attention (EngineSpec.attention_kernels)
    allreduce_kernels: str = ""  # the engine whose own all-reduce runs its all-reduces (EngineSpec.allreduce_kernels)
    sequence_overhead_s: float = 0.0  # host time per sequence sampled in an iteration (EngineSpec.sequence_overhead_s)
    memo: IterationMemo = field(default_factory=IterationMemo)

    def __post_init__(self):
        # kernels at the rates they reach alone: the engine's own overheads are simulated per
        # iteration, and what a training step loses beyond them is not charged (a power limit
        # below the default still lowers the clock: sustained_clock)
        self.hw = ops.at_kernel_rates(self.hw)
        gpus = self.tp * self.pp
        self.dims = self.hw.dims_for(gpus)
        spans = group_spans(Parallelism(tp=self.tp, pp=self.pp, ep=self.ep, etp=max(1, self.tp // self.ep)), self.dims)
        self.spans = {"tp": spans.get("tp", ()), "ep": spans.get("ep", ()), "etp": spans.get("etp", ())}
        self.pp_span = spans.get("pp", ())[:1]
        self.attention_tp = max(1, self.tp // self.attention_dp)
        # Serving engines decode with GQA-grouped kernels (TensorRT-LLM's XQA, FlashInfer in vLLM
        # and SGLang) that read each KV head once for all its query heads: bandwidth-bound, not
        # bound by the per-query-head rate of the older masked-attention kernel.
        self.decode_hw = replace(self.hw, calibration=replace(self.hw.calibration, decode_attention_rate=0.0))
        self.engine_ops = self.hw.calibration.engine_kernels(self.attention_kernels) is not None
        # the engine whose MLA ops time MLA layers ("": the generic ones)
        self.mla_engine = self.attention_kernels if self.engine_ops and self.attention_kernels in MLA_ENGINES else ""

    def time_s(self, prefill_tokens: int, prefill_past: int, decodes: int, decode_context: int,
               graph: bool) -> float:
        """Seconds of one iteration: `prefill_tokens` new prompt tokens attending to
        `prefill_past` cached ones plus themselves, and `decodes` sequences of mean context
        `decode_context`."""
        return self.memo.time_s(prefill_tokens, prefill_past, decodes, decode_context, graph, self._time_s)

    def _time_s(self, prefill_tokens, prefill_past, decodes, decode_context, graph) -> float:
        hw, t = self.hw, self.attention_tp
        tokens = prefill_tokens + decodes
        layers_s, host_s = 0.0, 0.0
        for spec, count in self.model.layer_groups():  # each kind of layer once, by its count
            layer_s, layer_host_s = self._layer_s(spec, tokens, prefill_tokens, prefill_past, decodes, decode_context)
            layers_s += count * layer_s
            host_s += count * layer_host_s
        model = self.model
        rows = decodes + (1 if prefill_tokens else 0)
        seconds = layers_s + lm_head_s(model, hw, rows, self.tp)
        if self.pp > 1:
            hop = collective_time(hw, self.dims, "send_recv", tokens * model.hidden * hw.act_bytes, self.pp_span)
            seconds += (self.pp - 1) * sum(hop.values())
        if graph:
            seconds -= host_s + graph_host_s(hw, gemms=1, elementwise=2)  # the head: norm, GEMM, sampling
        return seconds + self.iteration_overhead_s + self.sequence_overhead_s * rows

    def _layer_s(self, spec, tokens, prefill_tokens, prefill_past, decodes, decode_context) -> tuple:
        """(seconds, what of them a CUDA graph's replay saves: graph_host_s) of one layer of a
        uniform spec in this iteration: its decode-layer operators for every token, with attention
        replaced by the engine's decode kernel over the running requests' caches (a sliding
        window's share of them) and the prefill chunk's fused attention."""
        hw, t = self.hw, self.attention_tp
        layer = build_decode_layer(spec, hw, tokens, 1, t, self.kv_bytes, self.ep)
        if self.attention_dp > 1:
            # attention on this rank's tokens over its tp / attention_dp GPUs; the FFN (experts)
            # on every rank's tokens over all tp GPUs, as attention-DP engines gather them
            attention_end = next((i + 1 for i, op in enumerate(layer) if op.name == "residual1"), 0)
            ffn = build_decode_layer(spec, hw, tokens * self.attention_dp, 1, self.tp, self.kv_bytes, self.ep,
                                     tokens)
            ffn_start = next((i + 1 for i, op in enumerate(ffn) if op.name == "residual1"), 0)
            layer = layer[:attention_end] + ffn[ffn_start:]
        engine_ops = self.engine_ops and spec.mla is None  # MLA runs its own kernels (FlashMLA), not the GQA ones fitted
        if engine_ops:
            layer = tuple(op for op in layer if op.name not in ENGINE_PREPROCESSING)
        passed = time_ops(hw, self.dims, self.spans, layer, allreduce_engine=self.allreduce_kernels)
        attention = [op for op in layer if op.name == "attention"]
        compute_s = passed.compute_s - sum(op.time_s for op in attention)
        kernels = [op for op in layer if op.kind == "compute" and op.name != "attention"]
        elementwise = sum(op.flops == 0 for op in kernels)
        gemms = len(kernels) - elementwise
        if attention:
            heads, kv_heads, d = spec.heads // t, max(1, spec.kv_heads // t), spec.head_dim
            context = min(decode_context, spec.window) if spec.window else decode_context
            if decodes and spec.mla is not None:  # MLA's absorbed decode over the latent cache
                step = build_decode_layer(spec, self.decode_hw, decodes, context, t, self.kv_bytes,
                                          mla_engine=self.mla_engine)
                compute_s += sum(op.time_s for op in step if op.name == "attention")
                gemms += 1
            elif decodes:
                compute_s += ops.decode_attention(self.decode_hw, decodes, heads, kv_heads, context, d,
                                                  self.kv_bytes, self.attention_kernels if engine_ops else "").time_s
                gemms += not engine_ops  # the engine's fitted kernel time carries no launch
            if prefill_tokens:
                compute_s += self._prefill_s(spec, heads, kv_heads, prefill_tokens, prefill_past, engine_ops)
                gemms += 1
        if any(op.name == "router" for op in layer):
            compute_s += self._moe_extra_s(spec, tokens * self.attention_dp, layer)
        return compute_s + sum(dict(passed.comm_s).values()), graph_host_s(hw, gemms, elementwise)

    def _prefill_s(self, spec, heads: int, kv_heads: int, prefill_tokens: int, prefill_past: int,
                   engine_ops: bool) -> float:
        """The chunk's fused attention: it sees every cached token and, causally, half of its own.
        With the engine's own op, a first chunk is timed exactly as the kernel tables time it
        (causal over its own tokens, each new key and value written once); a later chunk's cache
        write is charged on every token it sees (an over-count by the cached tokens' share). MLA
        runs the engine's MLA prefill op where it is measured (MLA_ENGINES) and the GPU's preset
        has the engine's kernels."""
        mla_ops = spec.mla is not None and bool(self.mla_engine)
        seen, causal = prefill_past + prefill_tokens // 2, False
        if (engine_ops or mla_ops) and prefill_past == 0:
            seen, causal = prefill_tokens, True
        if mla_ops:  # the engine's MLA prefill op over the decompressed heads (ops.mla.mla_prefill)
            mla = spec.mla
            return mla_prefill(self.hw, 1, heads, prefill_tokens, seen, mla.qk_head_dim, mla.v_head_dim,
                               mla.kv_lora_rank, mla.qk_rope_head_dim, causal, self.mla_engine,
                               self.kv_bytes).time_s
        return ops.flash_attention(self.hw, heads, prefill_tokens, min(seen, spec.window) if spec.window else seen,
                                   spec.head_dim, max(1, heads // kv_heads), causal,
                                   kernel=self.attention_kernels if engine_ops else spec.attention_kernel,
                                   kv_bytes_per_element=self.kv_bytes).time_s

    def _moe_extra_s(self, spec, tokens: int, layer: tuple) -> float:
        """What an MoE layer's experts take beyond the layer graph's plain GEMMs: the routing
        chain's launches and, for an engine running the measured fused-MoE kernels on hardware
        with fitted grouped-GEMM factors, the grouped kernel's math (core/serving/moe.py) where it
        outlasts them; `tokens` are every attention-DP rank's."""
        hw, moe = self.hw, spec.moe
        plain_s = sum(op.time_s for op in layer if op.name in EXPERT_OPS)
        chain_s = MOE_CHAIN * hw.gpu.launch_overhead_s
        if not (self.grouped_moe and grouped(hw)):
            return chain_s
        etp = max(1, self.tp // self.ep)
        copies = -(-tokens * moe.top_k // self.ep)
        return expert_gemms_s(hw, plain_s + chain_s, copies, spec.hidden, moe.expert_ffn_hidden / etp) - plain_s
