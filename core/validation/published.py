"""Predictions for the published corpus (core.validation.corpus's PublishedCase rows): each row's
model, layout, workload and precision turned into specs, evaluated, and compared with
what was measured in the row's metric. One function per kind of row; the suites are
registered in core.validation.suites."""

from core.model.collectives import collective_time
from core.evaluation import estimate_memory, evaluate, mfu_peak_flops
from core.model.loader import load_hardware, with_dtype
from core.model.memory import GiB
from core.model.specs import InferWorkload, ModelSpec, MoESpec, Parallelism, TrainWorkload
from core.model.training import model_flops

# The preset each published GPU name runs on (H200 rows would inherit H100's factors).
HARDWARE_BY_GPU = (("h200", "h200-sxm-141gb"), ("h100", "h100-sxm5-80gb"), ("a100", "a100-sxm4-80gb"))
LAYOUT_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "first_stage_layers", "last_stage_layers")


def hardware_for(case):
    """The preset for the row's GPU, computing in the row's dtype."""
    gpu = str(case.hardware).lower()
    name = next((preset for key, preset in HARDWARE_BY_GPU if key in gpu), None)
    if name is None:
        raise ValueError(f"{case.case_id}: no preset for hardware {case.hardware!r}")
    dtype = case.precision.get("compute", "bf16")
    recipe = (case.precision.get("fp8_recipe") or "") if dtype == "fp8" else ""
    return with_dtype(load_hardware(name), dtype, case.case_id, "precision.compute", recipe, "precision.fp8_recipe")


# NeMo 24.03.01 (the long-sequence table) ran attention at the rate of FlashAttention-2-class
# kernels (mma.sync, the softmax not overlapped with the matmuls), not at the fused Hopper
# kernels' (FlashAttention-3, later cuDNN): its 1M-token row, where attention is 95 % of the work,
# reaches 274 executed TFLOP/s per GPU, FlashAttention-2's rate on an H100, not ~500. Which kernel
# that was, the code does not settle: Transformer Engine from v1.2 (2023-12) picks its cuDNN
# backend over flash-attn on sm90 when both can run (pytorch/attention.py, "Select
# FusedAttention on sm90 and FlashAttention on others"), and from v1.3 runs context parallelism
# on it too, so the container's cuDNN fused kernel of early 2024 is the likelier one, at that
# class's rate. This reading is taken from these rows' own figures, not from the code (read with
# the fused kernels' rate they come out 1 to 54 % fast), and is the one place a source's rows
# choose a kernel.
FLASH2_SOURCES = ("nemo-long-sequence",)
# The share of the attention score matrix each source's FLOP formula counts. NeMo 24.03's
# llama2 formula has `12 * seq / hs` with no causal term (the causal_self_attn half came to
# NeMo's flops_formulas later); the MoE Parallel Folding paper (Megatron-Core, PyTorch 2.5,
# 2025) uses Megatron-LM's num_floating_point_operations of that time, whose core-attention
# term is halved ("causal mask (only half of the mask is non-zero)"). Read so, its
# context-scaling MFUs (Table 5, 45 % at 16K to 38 % at 128K) match attention running at one
# rate, as the fused kernels do; counted in full they would need attention to run 1.5x
# faster at 128K tokens than at 16K.
SCORE_SHARE_BY_SOURCE = {"nemo-long-sequence": 1.0, "moe-parallel-folding": 0.5}


def model_for(case) -> ModelSpec:
    """The row's shape as the corpus gives it (not the released model's), with the attention
    kernel its framework ran."""
    m = dict(case.model)
    moe = m.pop("moe", None)
    if moe:
        moe = MoESpec(experts=int(moe["experts"]), top_k=int(moe["top_k"]),
                      expert_ffn_hidden=int(moe["expert_ffn_hidden"]),
                      shared_expert_ffn_hidden=int(moe.get("shared_expert_ffn_hidden") or 0),
                      capacity_factor=float(moe.get("capacity_factor") or 0.0))
    fields = {key: m[key] for key in ModelSpec.__dataclass_fields__ if key in m and m[key] is not None}
    if case.source in FLASH2_SOURCES:
        fields["attention_kernel"] = "flash2"
    return ModelSpec(**{**fields, "moe": moe})


# Sources that are NVIDIA's own performance recipes (NeMo, DGX Cloud benchmarking,
# Megatron-Bridge). What those recipes set that the rows do not state, read from the
# recipes themselves and taken here once:
# - gradients reduced in BF16: NeMo's scripts/performance set_precision_configs sets
#   grad_reduce_in_fp32=False for BF16 and FP8 runs alike (Megatron-LM's own default, which
#   the other sources used, accumulates in FP32);
# - TE userbuffers TP communication overlap on every pretraining recipe with TP > 1
#   (MegatronCommOverlapCallback(tp_comm_overlap=True) with the H100 tp_overlap configs);
#   NeMo 2.0's fine-tuning performance script turns it off (tp_comm_overlap=False), while the
#   NeMo 24.07 launcher's H100 SFT examples keep it on (70b_2node.sh: ub_tp_comm_overlap=true),
#   and so do Megatron-Bridge's (scripts/performance/configs/llama/llama3_llm_finetune.py of
#   2026-06: CommOverlapConfig(tp_comm_overlap=tp > 1));
# - FP8 weights (no BF16 working copy, FP8 parameter all-gather) in the NeMo 2.0 recipes
#   (DGX Cloud benchmarking, Megatron-Bridge): their bf16_with_fp8_mixed() sets
#   fp8_param_gather=True (NeMo 2.0 llm.recipes.precision.mixed_precision; Megatron-Bridge's
#   mixed_precision.py likewise).
# - a fused cross-entropy (TE's parallel cross-entropy on the 16-bit logits) in Megatron-Bridge:
#   its GPTModelProvider defaults cross_entropy_loss_fusion=True (src/megatron/bridge/models/
#   gpt_provider.py since 2025-09, before the 25.09 container) and its Llama recipes pick
#   cross_entropy_fusion_impl="te"; only the PEFT recipes turn it off. Not taken for NeMo 24.07
#   and DGX Cloud 24.11, whose settings were not checked.
NVIDIA_RECIPE_SOURCES = ("nemo-", "dgxc-", "megatron-bridge")
TP_OVERLAP_FINE_TUNING_SOURCES = ("nemo-24.07", "megatron-bridge")
FP8_PARAM_SOURCES = ("dgxc-", "megatron-bridge")
FUSED_CROSS_ENTROPY_SOURCES = ("megatron-bridge",)


def nvidia_recipe(case) -> bool:
    return case.source.startswith(NVIDIA_RECIPE_SOURCES)


def fine_tuning(case) -> bool:
    return bool(case.workload.get("fine_tuning"))


# NeMo's SFT performance runs pack SQuAD examples into each 4096-token sequence, attention
# kept within an example (packed sequences, THD). A SQuAD v1.1 example is a ~120-word context
# with an ~11-word question and a short answer in NeMo's prompt template: about 200 Llama
# tokens (1.3 tokens per word), the document length taken for those rows.
SQUAD_DOCUMENT_TOKENS = 200


def layout_for(case, training: bool) -> Parallelism:
    lay = case.layout
    ints = {field: int(lay[field]) for field in LAYOUT_FIELDS if lay.get(field) is not None}
    if ints.get("etp") == ints.get("tp", 1):
        ints.pop("etp", None)  # the default: experts split like the dense layers
    virtual = int(lay.get("virtual_stages") or 1)
    recompute = lay.get("recompute") or "none"
    zero = int(lay.get("zero") or (1 if lay.get("distributed_optimizer") else 0))
    sp = lay.get("sp")
    sp = bool(sp) if sp is not None else training and ints.get("tp", 1) > 1
    recipe = training and nvidia_recipe(case)
    # Pipeline sends overlap the next chunk under the interleaved schedule: Megatron-LM's
    # default (core_v0.10 arguments: --no-overlap-p2p-communication opts out), which NeMo's
    # MegatronCommOverlapCallback also sets for vp > 1; a row whose recipe turns it off says so
    # (layout overlap_p2p_comm False).
    # Every data-parallel knob stated, as each source ran it (not Parallelism's defaults);
    # inference rows leave them at the defaults, which the inference model does not take.
    optimizer = dict(zero=zero, overlap_grad_reduce=bool(lay.get("overlap_grad_reduce")),
                     overlap_param_gather=bool(lay.get("overlap_param_gather")),
                     expandable_segments=lay.get("expandable_segments", True)) if training else {}
    return Parallelism(**ints, **optimizer, sp=sp,
                       grad_dtype="bf16" if recipe else "fp32",
                       overlap_tp_comm=recipe and sp and (
                           not fine_tuning(case) or case.source in TP_OVERLAP_FINE_TUNING_SOURCES),
                       overlap_p2p_comm=training and virtual > 1 and lay.get("overlap_p2p_comm") is not False,
                       recompute=recompute, virtual_stages=virtual,
                       schedule="interleaved" if virtual > 1 else "1f1b",
                       fused_cross_entropy=training and case.source.startswith(FUSED_CROSS_ENTROPY_SOURCES),
                       master_weights=lay.get("master_weights") or "fp32",
                       optimizer_dtype=lay.get("optimizer_dtype") or "fp32",
                       # an FP8 inference engine stores FP8 weights by its dtype alone
                       fp8_params=training and (bool(case.precision.get("fp8_params")) or (
                           case.source.startswith(FP8_PARAM_SOURCES) and case.precision.get("compute") == "fp8")))


def predict(case, hw=None) -> tuple:
    """(predicted value in the row's metric, feasible, record) for a training, inference
    or memory row."""
    hw = hw or hardware_for(case)
    work = case.workload
    training = "global_batch" in work
    if training:
        workload = TrainWorkload(global_batch=int(work["global_batch"]), seq=int(work["seq"]),
                                 document=SQUAD_DOCUMENT_TOKENS if fine_tuning(case) else 0)
    else:
        workload = InferWorkload(batch=int(work["batch"]), prompt=int(work["prompt"]), decode=int(work["decode"]),
                                 kv_dtype=case.precision.get("kv_cache") or "")
    record = evaluate(model_for(case), hw, layout_for(case, training), workload, case.gpus, time_infeasible=True)
    metric = case.metric
    if metric in ("step_time_s", "request_s"):
        value = record["step_time_s"]
    elif metric in ("model_flops_per_s_per_gpu", "mfu"):
        # The predicted step time put on the source's FLOP count, not on our MFU's.
        share = SCORE_SHARE_BY_SOURCE[case.source]
        counted = model_flops(model_for(case), workload, share)
        value = counted / (record["step_time_s"] * case.gpus)
        if metric == "mfu":
            value /= mfu_peak_flops(hw)
    elif metric == "tokens_per_s_per_gpu":
        value = record["tokens_per_s"] / case.gpus
    elif metric == "output_tokens_per_s":
        value = record["tokens_per_s"]
    elif metric == "peak_memory_bytes":
        # What the allocator handed out (torch.cuda.max_memory_allocated, Megatron-Bridge's
        # mem-max-allocated): live tensors, without the cached and reserved blocks.
        value = (record["memory_peak_gib"] - record["memory"]["reserved_gib"]) * GiB
    elif metric == "first_iteration_peak_bytes":
        # Live tensors up to the end of the first step (see core.validation.corpus._memory_measurement).
        value = estimate_memory(model_for(case), hw, layout_for(case, training), workload,
                                first_iteration=True).allocated_bytes
    elif metric == "memory_verdict":
        value = record["memory_peak_gib"] * GiB
    else:
        raise ValueError(f"{case.case_id}: metric {metric!r} is not one this module predicts")
    return value, record["feasible"], record


def all_reduce_s(case, hw=None) -> float:
    """The closed-form all-reduce time of one nccl-tests row on the DGX H100 preset."""
    hw = hw or load_hardware("h100-sxm5-80gb")
    dims = hw.dims_for(case.gpus)
    per_node = dims[0].size
    span = ((0, min(case.gpus, per_node)),)
    if case.gpus > per_node:
        span += ((1, case.gpus // per_node),)
    return sum(collective_time(hw, dims, "all_reduce", float(case.workload["size_bytes"]), span).values())


__all__ = ["all_reduce_s", "hardware_for", "layout_for", "model_for", "predict"]
