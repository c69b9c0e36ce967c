"""Per-GPU memory: parameters, gradients and optimizer state under ZeRO; activations
from the layer graph's saved tensors under the recompute policy, times the micro-batches
each pipeline stage keeps in flight; KV cache for inference; and the verdict."""
from dataclasses import dataclass
from math import ceil

from .graph import LayerGraph
from .specs import DTYPE_BYTES, HardwareSpec, ModelSpec, Parallelism

GiB = 2**30
WEIGHT_BYTES = 2  # bf16/fp16 working copy
GRAD_BYTES = 4  # fp32 main gradients (Megatron mixed precision)
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam first and second moments


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    kv_cache_bytes: float
    capacity_bytes: float
    stage: int  # the most loaded pipeline stage

    @property
    def peak_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.transient_bytes + self.kv_cache_bytes)

    @property
    def feasible(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def reason(self) -> str:
        if self.feasible:
            return ""
        parts = ", ".join(f"{name} {value / GiB:.1f}" for name, value in self.by_kind().items() if value)
        return (f"needs {self.peak_bytes / GiB:.1f} GiB per GPU on stage {self.stage}, "
                f"has {self.capacity_bytes / GiB:.1f} GiB ({parts})")

    def by_kind(self) -> dict:
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                "transient": self.transient_bytes, "kv_cache": self.kv_cache_bytes}


def stage_params(model: ModelSpec, par: Parallelism) -> list:
    """Parameters one rank of each pipeline stage holds (TP and EP shards)."""
    t = par.tp
    norms = 2 * model.hidden * (2 if model.norm == "layernorm" else 1)
    if model.moe is None:
        mlp = model.mlp_params() / t
    else:
        per_expert = model.mlp_matrices * model.hidden * model.moe.expert_ffn_hidden
        mlp = model.moe.experts // par.ep * per_expert / t + model.hidden * model.moe.experts
    layer = model.attention_params() / t + mlp + norms
    per_stage = model.layers // par.pp
    params = [per_stage * layer for _ in range(par.pp)]
    params[0] += model.embedding_params() / t
    if not model.tied_embeddings or par.pp > 1:
        params[-1] += model.vocab * model.hidden / t
    return params


def saved_per_layer(graph: LayerGraph, recompute: str, layer_input_bytes: float) -> float:
    """Bytes one layer keeps for backward per micro-batch under the recompute policy."""
    if recompute == "full":
        return layer_input_bytes
    return sum(op.saved_bytes for op in graph.forward
               if not (recompute == "selective" and op.attention_core))


def in_flight(par: Parallelism, microbatches: int, stage: int) -> float:
    """Micro-batches' worth of a stage's activations alive at its peak."""
    p = par.pp
    if par.schedule == "gpipe":
        return microbatches
    if par.schedule == "interleaved" and stage == 0:
        # Korthikanti et al.: the first stage holds p * (1 + (p-1)/(p*v)) micro-batches' chunks.
        return min(microbatches, p) * (1 + (p - 1) / (p * par.virtual_stages))
    return min(microbatches, p - stage)


def training_memory(model: ModelSpec, hw: HardwareSpec, par: Parallelism, graph: LayerGraph,
                    microbatches: int, tokens: int) -> MemoryEstimate:
    el = DTYPE_BYTES[hw.dtype]
    t = par.tp
    layer_input = tokens * model.hidden * el / (t if par.sp else 1)
    per_layer = saved_per_layer(graph, par.recompute, layer_input)
    full_layer = saved_per_layer(graph, "none", layer_input)
    layers = model.layers // par.pp
    shard = par.dp * par.cp  # ZeRO shards over every rank holding the same parameters
    best = None
    for stage, params in enumerate(stage_params(model, par)):
        weights = params * WEIGHT_BYTES / (shard if par.zero >= 3 else 1)
        grads = params * GRAD_BYTES / (shard if par.zero >= 2 else 1)
        optimizer = params * OPTIMIZER_BYTES / (shard if par.zero >= 1 else 1)
        activations = layers * per_layer * in_flight(par, microbatches, stage)
        transient = 4 * tokens * model.hidden * el
        if par.recompute == "full":
            transient += full_layer
        if par.zero >= 3:
            transient += 2 * params / layers * WEIGHT_BYTES
        if stage == par.pp - 1:
            transient += 2 * tokens * model.vocab / t * 4  # fp32 logits and their gradient
        estimate = MemoryEstimate(weights, grads, optimizer, activations, transient, 0.0,
                                  hw.gpu.hbm.capacity_bytes, stage)
        if best is None or estimate.peak_bytes > best.peak_bytes:
            best = estimate
    return best


def inference_memory(model: ModelSpec, hw: HardwareSpec, par: Parallelism, batch: int,
                     prompt: int, decode: int) -> MemoryEstimate:
    el = DTYPE_BYTES[hw.dtype]
    t = par.tp
    kv_dim = max(1, model.kv_heads // t) * model.head_dim
    layers = model.layers // par.pp
    kv_cache = 2 * layers * batch * (prompt + decode) * kv_dim * el
    ffn = model.moe.expert_ffn_hidden if model.moe else model.ffn_hidden
    prefill_tokens = batch * prompt
    transient = prefill_tokens * (4 * model.hidden + 3 * ceil(ffn / t)) * el + batch * model.vocab / t * 4
    best = None
    for stage, params in enumerate(stage_params(model, par)):
        estimate = MemoryEstimate(params * WEIGHT_BYTES, 0.0, 0.0, 0.0, transient, kv_cache,
                                  hw.gpu.hbm.capacity_bytes, stage)
        if best is None or estimate.peak_bytes > best.peak_bytes:
            best = estimate
    return best
