"""Per-GPU memory: parameters, gradients and optimizer state under ZeRO; activations
from the layer graph's saved tensors under the recompute policy, times the micro-batches
each pipeline stage keeps in flight; KV cache for inference; and the verdict."""
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from math import ceil

from .graph import LayerGraph, LayerShape, build_layer
from .memo import on_fields
from .layout import stage_groups, stage_layers, warmup_forwards
from .ops.recurrent import STATE_BYTES
from .specs import DTYPE_BYTES, LOW_PRECISION_DTYPES, WEIGHT_FORMAT_BYTES, HardwareSpec, ModelSpec, Parallelism, quantized_bytes

GiB = 2**30
MiB = 2**20
# Bytes per parameter of the optimizer's master weights (specs.MASTER_WEIGHTS): apex's
# store_param_remainders keeps the 16 low bits of each FP32 weight (an int16 shard).
MASTER_WEIGHT_BYTES = {"fp32": DTYPE_BYTES["fp32"], "bf16": DTYPE_BYTES["bf16"], "remainders": 2, "none": 0}
ADAM_MOMENTS = 2  # first and second moment, each in the optimizer dtype
# Transformer Engine under low-precision training keeps, per weight, the quantized copy its
# forward GEMM reads and the columnwise copy for the input-gradient GEMM (per-tensor FP8: the
# transpose, as Hopper's FP8 GEMM takes only the TN layout; block-scaled formats: a second copy
# scaled along the other dimension), both with their block scales, cached across micro-batches
# (TE 1.8 Linear: FP8 workspace `with_transpose` while grad is enabled; TE 2.x: the weight
# quantizer's rowwise and columnwise usage). With quantized weights (fp8_params) only the
# columnwise copy comes on top.
# What the CUDA caching allocator and the runtime hold beyond live tensors: the CUDA context,
# cuBLAS workspaces and NCCL buffers (a fixed amount), plus blocks freed but kept cached
# and split (fragmentation, a share of what is allocated). Cross-check: Megatron-Bridge's
# Moonlight 16B runs on H100 (memory_h100.csv) peak at 36.6 GB allocated with ~40 GB
# reserved; 2 GiB + 5 % of 36.6 GB gives 40.6 GB.
# That 5 % is the allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF=
# expandable_segments:True, in NeMo's and Megatron-Bridge's launch templates), whose segments
# grow in place. PyTorch's default fixed-size segments never merge: a block freed inside one
# serves only requests that fit it, so memory cached but unusable grows. Megatron-Bridge's
# memory-tuning skill (nemo-mbridge-perf-memory-tuning SKILL.md, 'Measured Results') has Llama 3
# 70B SFT on 32 H100s go out of memory at 58.8 GB (54.8 GiB) allocated without them and pass
# with them: the 79.6 GiB device less the 2 GiB runtime reserve leaves 22.9 GiB, 42 % of the
# allocated bytes, that fixed segments held beyond the live tensors. That single measurement
# isolates the effect; the share below is its lower bound, not a figure fitted across rows (no
# other visible run states that it ran without expandable segments).
RUNTIME_RESERVE_BYTES = 2.0 * GiB
FRAGMENTATION = 0.05
FIXED_SEGMENT_FRAGMENTATION = 0.42


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
    fp8_weights_bytes: float = 0.0
    fragmentation: float = FRAGMENTATION  # share of the allocated bytes the allocator keeps cached
    buffers: object = None  # () -> ((kind, what the framework keeps under it), ...), built on demand

    @property
    def allocated_bytes(self) -> float:
        """Live tensors at the peak, what torch.cuda.max_memory_allocated reports."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.fp8_weights_bytes
                + self.activations_bytes + self.transient_bytes + self.kv_cache_bytes)

    @property
    def reserved_bytes(self) -> float:
        """The runtime's and the allocator's share on top of the live tensors."""
        return RUNTIME_RESERVE_BYTES + self.fragmentation * self.allocated_bytes

    @property
    def peak_bytes(self) -> float:
        return self.allocated_bytes + self.reserved_bytes

    @property
    def feasible(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def reason(self) -> str:
        if self.feasible:
            return ""
        parts = ", ".join(f"{name} {value / GiB:.1f}" for name, value in self.by_kind().items() if value)
        return (f"needs {self.peak_bytes / GiB:.1f} GiB per GPU on stage {self.stage}, "
                f"has {self.capacity_bytes / GiB:.1f} GiB ({parts})")

    def describe(self) -> str:
        """Which buffers each kind counts, e.g. `gradients: bf16 buckets, full`."""
        reserve = f"{RUNTIME_RESERVE_BYTES / GiB:.0f} GiB runtime + {100 * self.fragmentation:.0f} % allocator cache"
        kinds = self.buffers() if self.buffers else ()
        return "; ".join(f"{kind}: {text}" for kind, text in (*kinds, ("reserved", reserve)))

    def by_kind(self) -> dict:
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "fp8_weights": self.fp8_weights_bytes,
                "activations": self.activations_bytes, "transient": self.transient_bytes,
                "kv_cache": self.kv_cache_bytes, "reserved": self.reserved_bytes}


def stage_params(model: ModelSpec, par: Parallelism) -> list:
    """Parameters one rank of each pipeline stage holds (TP, ETP and EP shards)."""
    return [dense + expert for dense, expert in stage_param_parts(model, par)]


def stage_param_parts(model: ModelSpec, par: Parallelism) -> tuple:
    """(dense, expert) parameters one rank of each stage holds: experts are split over
    ep * etp ranks and replicated over the rest (their ZeRO shards differ)."""
    if model.uniform:
        return _param_parts(model, par.tp, par.ep, par.expert_tp, stage_layers(model.layers, par))
    return _stage_parts(model, par.tp, par.ep, par.expert_tp, stage_groups(model, par))


def layer_param_parts(spec: ModelSpec, t: int, ep: int, etp: int) -> tuple:
    """(dense, expert) parameters of one layer of a uniform spec on one rank. MLA's
    down-projections and their norms are whole on every TP rank (Megatron-Core duplicates them)."""
    blocks = (spec.mixer != "none") + (spec.moe is not None or spec.ffn_hidden > 0)
    norms = blocks * spec.hidden * (2 if spec.norm == "layernorm" else 1)
    if spec.moe is None:
        dense_mlp, expert = spec.mlp_params() / t, 0.0
    else:
        per_expert = spec.mlp_matrices * spec.hidden * spec.moe.expert_ffn_hidden
        expert = spec.moe.experts // ep * per_expert / etp
        dense_mlp = spec.hidden * spec.moe.experts + spec.shared_expert_params() / t
    attention = spec.attention_params() / t
    if spec.mla is not None and spec.mixer == "attention":
        duplicated = spec.hidden * (spec.mla.q_lora_rank + spec.mla.latent_dim) + spec.mla.q_lora_rank + spec.mla.kv_lora_rank
        attention += duplicated * (1 - 1 / t)
    return attention + dense_mlp + norms, expert


def _with_edges(model: ModelSpec, t: int, parts: list) -> tuple:
    """Stage parts with the embedding on the first stage and the output layer on the last."""
    parts[0][0] += model.embedding_params() / t
    parts[-1][0] += (model.mtp_params() - model.mtp_layers * model.layer_groups(model.layers - 1)[0][0].layer_params()) / t
    if not model.tied_embeddings or len(parts) > 1:
        parts[-1][0] += model.vocab * model.hidden / t
    return tuple(tuple(part) for part in parts)


@lru_cache(maxsize=4096)
def _param_parts(model: ModelSpec, t: int, ep: int, etp: int, split: tuple) -> tuple:
    layer, expert = layer_param_parts(model, t, ep, etp)
    return _with_edges(model, t, [[layers * layer, layers * expert] for layers in split])


@lru_cache(maxsize=1024)
def _stage_parts(model: ModelSpec, t: int, ep: int, etp: int, groups: tuple) -> tuple:
    parts = []
    for stage in groups:
        dense = expert = 0.0
        for spec, count in stage:
            layer, experts = layer_param_parts(spec, t, ep, etp)
            dense += count * layer
            expert += count * experts
        parts.append([dense, expert])
    return _with_edges(model, t, parts)


def weight_bytes(hw: HardwareSpec, par: Parallelism) -> float:
    """Bytes per parameter of the weights the GPUs compute with (and ZeRO gathers): the
    quantized copy with its block scales under fp8_params, else the 16-bit working copy."""
    return quantized_bytes(hw.dtype, hw.recipe, weights=True) if par.fp8_params else hw.act_bytes


def grad_bytes(par: Parallelism) -> int:
    """Bytes per parameter of the main gradients (and of their data-parallel reduction)."""
    return DTYPE_BYTES[par.grad_dtype]


def optimizer_bytes(par: Parallelism) -> int:
    """Bytes per parameter of the optimizer state: master weights plus Adam's two moments
    (12 for Megatron-Core's FP32 master weights and moments)."""
    return MASTER_WEIGHT_BYTES[par.master_weights] + ADAM_MOMENTS * DTYPE_BYTES[par.optimizer_dtype]


def fp8_weight_bytes(hw: HardwareSpec, par: Parallelism) -> float:
    """Bytes per parameter Transformer Engine keeps beside the weights under low-precision
    compute: the rowwise and columnwise quantized copies, or the columnwise one alone when the
    weights are quantized already (fp8_params)."""
    if hw.dtype not in LOW_PRECISION_DTYPES:
        return 0
    return quantized_bytes(hw.dtype, hw.recipe, weights=True) * (1 if par.fp8_params else 2)


def inference_weight_bytes(hw: HardwareSpec) -> float:
    """Bytes per parameter of an inference engine's weights: stored in the compute format, with
    their block scales: NVFP4's and MXFP8's per 16 or 32 elements along the reduction, and
    block-scaled FP8's per 128 x 128 weight block (DeepSeek's recipe, whose 1 x 128 blocks are
    the activations')."""
    if hw.dtype in LOW_PRECISION_DTYPES:
        return quantized_bytes(hw.dtype, hw.recipe, weights=hw.dtype == "fp8")
    return DTYPE_BYTES[hw.dtype]


def logit_bytes_per_element(hw: HardwareSpec, par: Parallelism) -> int:
    """Bytes the loss holds per logit on the last stage: the 16-bit logits, whose gradient a
    fused cross-entropy writes in place, or autocast's FP32 logits and their FP32 gradient."""
    return hw.act_bytes if par.fused_cross_entropy else 2 * DTYPE_BYTES["fp32"]


def expert_data_parallel(par: Parallelism) -> int:
    """Ranks holding the same expert shard: the folded dp*cp*tp ranks over ep*etp."""
    return max(1, par.dp * par.cp * par.tp // (par.ep * par.expert_tp))


def saved_per_layer(graph: LayerGraph, recompute: str, layer_input_bytes: float) -> float:
    """Bytes one layer keeps for backward per micro-batch under the recompute policy."""
    if recompute == "full":
        return layer_input_bytes
    return _saved_bytes(graph, recompute == "selective")


@lru_cache(maxsize=4096)
def _saved_bytes(graph: LayerGraph, selective: bool) -> float:
    return sum(op.saved_bytes for op in graph.forward if not (selective and op.attention_core))


def in_flight(par: Parallelism, microbatches: int, stage: int) -> float:
    """Micro-batches' worth of a stage's activations alive at its peak: the model chunks it
    holds when its first backward starts, its warm-up forwards and the one before that
    backward (layout.warmup_forwards). Interleaved, the first stage's p v + p - 1 chunks are
    Korthikanti et al.'s p (1 + (p-1)/(p v)) micro-batches, and the last stage's
    (v - 1) p + 1 are p - (p-1)/v micro-batches, not the one of plain 1F1B."""
    v = par.virtual_stages
    chunks = min(microbatches * v, warmup_forwards(par.schedule, par.pp, v, stage, microbatches) + 1)
    return chunks / v


def stage_saved_bytes(model: ModelSpec, hw: HardwareSpec, par: Parallelism, shape: LayerShape,
                      recompute: str, layer_input_bytes: float) -> tuple:
    """Bytes each stage's layers keep for backward per micro-batch (saved_per_layer summed over
    the stage's layer kinds)."""
    if model.uniform:
        per_layer = saved_per_layer(build_layer(model, hw, shape), recompute, layer_input_bytes)
        return tuple(layers * per_layer for layers in stage_layers(model.layers, par))
    return tuple(sum(count * saved_per_layer(build_layer(spec, hw, shape), recompute, layer_input_bytes)
                     for spec, count in groups) for groups in stage_groups(model, par))


def mtp_saved_bytes(model: ModelSpec, layer_input_bytes: float) -> float:
    """Bytes the MTP modules keep for backward per micro-batch beside their transformer layers
    (counted with the stage's layers): each one's two RMSNorm inputs (the hidden state and the
    next tokens' embedding) and the concatenation its projection reads, each `layer_input_bytes`
    (one hidden-wide activation) or twice that, and the final norm's input before its output layer."""
    return model.mtp_layers * 5 * layer_input_bytes


# The layout fields a training estimate reads (and its buffers' text): not the overlap flags,
# the placement or the gradient-accumulation fusion (the layer shape, an argument, holds what
# the last two move in the saved tensors).
MEMORY_FIELDS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "recompute", "schedule", "virtual_stages", "etp",
                 "first_stage_layers", "last_stage_layers", "grad_dtype", "fused_cross_entropy", "fp8_params",
                 "master_weights", "optimizer_dtype", "reshard_after_forward", "expandable_segments")


@on_fields(*MEMORY_FIELDS)
def training_memory(model: ModelSpec, hw: HardwareSpec, par: Parallelism, shape: LayerShape,
                    microbatches: int, tokens: int, first_iteration: bool = False) -> MemoryEstimate:
    """Megatron's buffers: the weights' working copy (BF16, or FP8 with fp8_params), main
    gradients in grad_dtype (full size unless ZeRO 2+: the distributed optimizer, ZeRO 1,
    shards only the master weights and Adam moments, see optimizer_bytes), TE's FP8 weight
    copies under FP8 compute (fp8_weight_bytes), and, at the larger of a stage's two peaks,
    either the activations of the micro-batches in flight (forward/backward) or the optimizer
    step's FP32 gradient copies (step_transient_bytes). `first_iteration`: the peak up to the
    end of the first step, whose forward and backward run before Adam's moments exist (FusedAdam
    allocates them in its first step)."""
    el = hw.act_bytes
    t = par.tp
    layer_input = tokens * model.hidden * el / (t if par.training_sp else 1)
    split = stage_layers(model.layers, par)
    if model.uniform:  # one graph: the warm sweep's path
        graph = build_layer(model, hw, shape)
        per_layer = saved_per_layer(graph, par.recompute, layer_input)
        saved = tuple(layers * per_layer for layers in split)
        full_layer = saved_per_layer(graph, "none", layer_input)
    else:
        saved = stage_saved_bytes(model, hw, par, shape, par.recompute, layer_input)
        full_layer = max(saved_per_layer(build_layer(spec, hw, shape), "none", layer_input)
                         for spec, _ in model.layer_groups())
    shard, expert_shard = par.dp * par.cp, expert_data_parallel(par)  # ZeRO shards over replicas
    w_bytes, g_bytes, cache_bytes = weight_bytes(hw, par), grad_bytes(par), fp8_weight_bytes(hw, par)
    state_bytes, copy_bytes = optimizer_bytes(par), step_transient_bytes(par)
    early_state_bytes = MASTER_WEIGHT_BYTES[par.master_weights] if first_iteration else state_bytes
    layer_transient = 4 * tokens * model.hidden * el + (full_layer if par.recompute == "full" else 0.0)
    best, most = None, -1.0
    for stage, (dense, expert) in enumerate(stage_param_parts(model, par)):
        params = dense + expert
        sharded = dense / shard + expert / expert_shard
        optimized = sharded if par.zero >= 1 else params  # ZeRO 1+: optimizer state, 2+: gradients, 3: weights
        resharded = par.zero >= 3 and par.reshard_after_forward
        held = sharded if resharded else params  # ZeRO 3 gathers a layer's weights (and FP8 copies) to use it
        kept_shard = sharded if par.zero >= 3 and not par.reshard_after_forward else 0.0  # beside the gathered copy
        states = ((held + kept_shard) * w_bytes, (sharded if par.zero >= 2 else params) * g_bytes, held * cache_bytes)
        activations = saved[stage] * in_flight(par, microbatches, stage)
        transient = layer_transient
        if resharded:  # the layer in use and the one prefetched
            transient += 2 * params / split[stage] * w_bytes
        if stage == par.pp - 1:  # the logits of the model's loss and of each MTP module's
            transient += (1 + model.mtp_layers) * tokens * model.vocab / t * logit_bytes_per_element(hw, par)
            activations += mtp_saved_bytes(model, layer_input) * in_flight(par, microbatches, stage)
        backward = (optimized * early_state_bytes, activations, transient)
        step = (optimized * state_bytes, 0.0, optimized * copy_bytes)
        at_step = sum(step) > sum(backward)
        total = sum(states) + sum(step if at_step else backward)
        if total > most:  # the peak grows with the allocated bytes
            best, most = (stage, states, step if at_step else backward, at_step), total
    stage, (weights, grads, cache), (optimizer, activations, transient), at_step = best
    fragmentation = FRAGMENTATION if par.expandable_segments else FIXED_SEGMENT_FRAGMENTATION
    return MemoryEstimate(weights, grads, optimizer, activations, transient, 0.0, hw.gpu.hbm.capacity_bytes,
                          stage, cache, fragmentation, buffers=partial(_training_buffers, hw, par, microbatches, stage, at_step,
                                                        model.moe is not None))


def step_transient_bytes(par: Parallelism) -> int:
    """Bytes per (optimizer-sharded) parameter that exist only during the optimizer step:
    Megatron's optimizer over FP32 master weights reads FP32 gradients, so it casts each
    16-bit main-gradient shard to an FP32 copy first (distrib_optimizer.py
    _copy_model_grads_to_main_grads: `shard_model_grad.float()`); FP32 main gradients are used
    in place. Apex's DistributedFusedAdam (the other master kinds) reads them in their dtype."""
    if par.master_weights != "fp32" or par.grad_dtype == "fp32":
        return 0
    return DTYPE_BYTES["fp32"]


def _logits_text(par: Parallelism) -> str:
    return ", 16-bit logits (fused cross-entropy)" if par.fused_cross_entropy else ", fp32 logits and their gradient"


def _training_buffers(hw: HardwareSpec, par: Parallelism, microbatches: int, stage: int, at_step: bool,
                      moe: bool) -> tuple:
    """What each kind of a training estimate counts, as the breakdown names it."""
    sharded = f"sharded over dp*cp = {par.dp * par.cp}"
    weights = hw.dtype if par.fp8_params else hw.act_dtype
    grads = f"{par.grad_dtype} buckets, " + (sharded if par.zero >= 2 else "full")
    state = (f"{par.master_weights} master weights + {par.optimizer_dtype} Adam moments, "
             + (sharded if par.zero >= 1 else "unsharded"))
    if at_step:
        moment = [("activations", "none at this peak (the optimizer step)"),
                  ("transient", "fp32 copies of the gradient shards for the optimizer step")]
    else:
        dispatcher = (", MoE layers with the routing's and unpermute's kept tensors"
                      if moe and par.recompute != "full" else "")
        moment = [("activations", f"{in_flight(par, microbatches, stage):.2f} micro-batches in flight, "
                                  f"recompute {par.recompute}{dispatcher}"),
                  ("transient", "one layer's working tensors" + (_logits_text(par) if stage == par.pp - 1 else ""))]
    if par.zero >= 3:
        weights += f", {sharded}" + ("" if par.reshard_after_forward else ", the stage's gathered copy kept all step")
    out = [("weights", weights), ("gradients", grads),
           ("optimizer", state), *moment]
    if fp8_weight_bytes(hw, par):
        copies = "columnwise copies" if par.fp8_params else "rowwise + columnwise copies"
        out.append(("fp8_weights", f"TE {hw.dtype} ({hw.recipe}) {copies}"))
    return tuple(out)


def inference_memory(model: ModelSpec, hw: HardwareSpec, par: Parallelism, batch: int,
                     prompt: int, decode: int, kv_bytes: float) -> MemoryEstimate:
    """An inference engine's memory as TensorRT-LLM's static-batch session allocates it, once:
    weights in the compute dtype (an FP8 engine stores FP8 weights); the KV cache for the
    whole batch at `kv_bytes` per element (GptSession sizes its cache, paged or not, to
    batch x the longest sequence; the free-memory fraction, kv_cache_free_gpu_mem_fraction, 0.85
    in that period's kvCacheConfig.h, sizes only the in-flight batcher's pool); one activation
    workspace for the largest pass, the prefill; no caching allocator, so no fragmentation."""
    t = par.tp
    tokens = prompt + decode
    model = served_model(model)
    transient = prefill_workspace_bytes(model, hw, t, batch * prompt) + batch * model.vocab / t * 4
    best = None
    for stage, (groups, (dense, expert)) in enumerate(zip(stage_groups(model, par), stage_param_parts(model, par))):
        kv_cache = batch * sum(count * layer_cache_bytes(spec, t, tokens, kv_bytes) for spec, count in groups)
        weights = _served_bytes(model, hw, dense, expert)
        estimate = MemoryEstimate(weights, 0.0, 0.0, 0.0, transient, kv_cache,
                                  hw.gpu.hbm.capacity_bytes, stage, fragmentation=0.0)
        if best is None or estimate.peak_bytes > best.peak_bytes:
            best = estimate
    return best


def stored_weight_bytes(weight_format: str, hw: HardwareSpec) -> float:
    """Bytes per weight an inference engine stores: the compute format's (inference_weight_bytes),
    or the checkpoint's where its quantization_config sets a narrower one (ModelSpec.weight_dtype,
    expert_weight_dtype: gpt-oss's MXFP4 experts stay MXFP4 in a BF16 engine, and its kernels read
    them so); never wider (DeepSeek-V3's FP8 blocks served in NVFP4 come from a requantized
    checkpoint)."""
    compute = inference_weight_bytes(hw)
    return min(WEIGHT_FORMAT_BYTES[weight_format], compute) if weight_format else compute


def served_weight_bytes(model: ModelSpec, hw: HardwareSpec, par: Parallelism) -> float:
    """The weights one rank of the most loaded stage holds in an inference engine, as it stores
    them (stored_weight_bytes)."""
    model = served_model(model)
    return max(_served_bytes(model, hw, dense, expert) for dense, expert in stage_param_parts(model, par))


@lru_cache(maxsize=256)
def served_model(model: ModelSpec) -> ModelSpec:
    """The model an inference engine loads: without its multi-token-prediction modules, which
    engines load only to draft tokens by speculative decoding (not modelled), as the inference
    model never runs them."""
    return replace(model, mtp_layers=0) if model.mtp_layers else model


def _served_bytes(model: ModelSpec, hw: HardwareSpec, dense: float, expert: float) -> float:
    return dense * stored_weight_bytes(model.weight_dtype, hw) + expert * stored_weight_bytes(model.expert_format, hw)


def layer_cache_bytes(spec: ModelSpec, tp: int, tokens: int, kv_bytes: float) -> float:
    """What one layer of a uniform spec keeps per sequence on one TP rank after `tokens`
    tokens: K and V of the tokens its attention still sees (all, the sliding window's, the
    current chunk's), MLA's latent and RoPE key (whole on every TP rank) plus the sparse
    indexer's key, or a recurrent mixer's fixed state (FP32) and convolution taps."""
    if spec.mixer == "none":
        return 0.0
    if spec.mixer != "attention":
        rec = spec.recurrent
        heads, key_heads = rec.heads // tp, max(1, rec.key_heads // tp)
        conv = 2 * key_heads * rec.key_dim + heads * rec.value_dim
        return heads * rec.key_dim * rec.value_dim * STATE_BYTES + (rec.conv_kernel - 1) * conv * kv_bytes
    kept = min(tokens, spec.window or spec.chunk or tokens)
    if spec.mla is not None:
        return kept * (spec.mla.latent_dim + spec.mla.index_head_dim * bool(spec.mla.index_topk)) * kv_bytes
    return spec.kv_tensors * kept * max(1, spec.kv_heads // tp) * spec.head_dim * kv_bytes


def kv_cache_bytes_per_token(model: ModelSpec, kv_bytes: float, tp: int = 1) -> float:
    """KV-cache bytes one more token adds on one TP rank, summed over the layers that keep
    a cache growing with the context (at a context the windows have not filled yet)."""
    return sum(count * layer_cache_bytes(spec, tp, 1, kv_bytes) for spec, count in model.layer_groups()
               if spec.mixer == "attention")


def state_bytes_per_sequence(model: ModelSpec, kv_bytes: float, tp: int = 1) -> float:
    """Fixed bytes a sequence keeps on one TP rank in its linear-attention and Mamba layers."""
    return sum(count * layer_cache_bytes(spec, tp, 1, kv_bytes) for spec, count in model.layer_groups()
               if spec.mixer in ("linear", "mamba"))


def prefill_workspace_bytes(model: ModelSpec, hw: HardwareSpec, tp: int, tokens: int) -> float:
    """Live activations at a prefill layer's peak, buffers reused layer to layer: the residual
    stream and the normed input (2 x hidden per token), and the FFN's inner tensors: a gated
    FFN's fused gate-up output with the SwiGLU kernel's output (3 x ffn / tp), a GELU FFN's
    one (its activation fused into the GEMM)."""
    ffn = max((spec.moe.expert_ffn_hidden if spec.moe else spec.ffn_hidden) for spec, _ in model.layer_groups())
    inner = (3 if model.activation == "swiglu" else 1) * ceil(ffn / tp)
    return tokens * (2 * model.hidden + inner) * hw.act_bytes
