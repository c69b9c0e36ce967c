"""What the frameworks allocate beside the activations, in closed form for a small model:
optimizer state by master-weight kind and moment dtype, Transformer Engine's FP8 weight
copies, the optimizer step's FP32 gradient copies, the first iteration without Adam's
moments, and the activations each stage holds under the interleaved schedule."""
import pytest

import core
from core.evaluation import estimate_memory
from core.model.loader import with_dtype
from core.model.memory import fp8_weight_bytes, in_flight, optimizer_bytes, stage_params
from core.model.specs import ModelSpec, MoESpec

# 2 layers of 256: attention 4 * 256^2, SwiGLU 3 * 256 * 1024, norms 2 * 256 per layer.
SMALL = ModelSpec("small", layers=2, hidden=256, heads=4, kv_heads=4, ffn_hidden=1024, vocab=1000)
LAYER = 4 * 256**2 + 3 * 256 * 1024 + 2 * 256
PARAMS = 2 * LAYER + 2 * 1000 * 256  # embedding and untied output layer
TINY = core.TrainWorkload(global_batch=1, seq=8)  # activations of a few KiB
H100_BF16 = core.load_hardware("h100-sxm5-80gb")
H100_FP8 = with_dtype(H100_BF16, "fp8", "test", "dtype")


def test_the_small_model_has_its_closed_form_parameter_count():
    assert stage_params(SMALL, core.Parallelism())[0] == PARAMS


@pytest.mark.parametrize("master, moments, expected", [
    ("fp32", "fp32", 12),       # Megatron-Core: FP32 master weights, FP32 Adam moments
    ("remainders", "fp32", 10),  # apex store_param_remainders: 16 low bits beside the BF16 weights
    ("none", "bf16", 4),         # apex dtype bf16 over BF16 weights: moments only
    ("bf16", "bf16", 6),         # apex dtype bf16 with FP8 weights: BF16 master weights
])
def test_optimizer_bytes_per_parameter(master, moments, expected):
    assert optimizer_bytes(core.Parallelism(master_weights=master, optimizer_dtype=moments)) == expected


def test_optimizer_state_is_sharded_over_data_and_context_parallel_ranks(a100):
    par = core.Parallelism(dp=2, cp=2, zero=1, master_weights="remainders")
    assert estimate_memory(SMALL, a100, par, core.TrainWorkload(4, 8)).optimizer_bytes == 10 * PARAMS / 4


def test_fp8_training_keeps_an_fp8_copy_and_its_transpose_per_weight():
    assert fp8_weight_bytes(H100_BF16, core.Parallelism()) == 0  # BF16 training: none
    assert fp8_weight_bytes(H100_FP8, core.Parallelism()) == 2  # FP8 copy + transpose beside BF16 weights
    assert fp8_weight_bytes(H100_FP8, core.Parallelism(fp8_params=True)) == 1  # FP8 weights: the transpose only
    estimate = estimate_memory(SMALL, H100_FP8, core.Parallelism(fp8_params=True), TINY)
    assert (estimate.weights_bytes, estimate.fp8_weights_bytes) == (PARAMS, PARAMS)
    fsdp = estimate_memory(SMALL, H100_FP8, core.Parallelism(dp=2, zero=3), core.TrainWorkload(2, 8))
    assert fsdp.fp8_weights_bytes == 2 * PARAMS / 2  # ZeRO 3 keeps shards; a gathered layer's copies are transient


def test_the_optimizer_step_copies_16_bit_gradients_to_fp32(a100):
    # Activations of 8 tokens are far below the 4-byte copies of 1.3M gradients: the step peaks.
    step = estimate_memory(SMALL, a100, core.Parallelism(grad_dtype="bf16"), TINY)
    assert (step.activations_bytes, step.transient_bytes) == (0.0, 4 * PARAMS)
    assert step.allocated_bytes == (2 + 2 + 12 + 4) * PARAMS
    assert "fp32 copies of the gradient shards" in step.describe()
    fp32_grads = estimate_memory(SMALL, a100, core.Parallelism(), TINY)  # FP32 main grads: used in place
    assert fp32_grads.activations_bytes > 0 and fp32_grads.transient_bytes < PARAMS


def test_apex_reads_16_bit_gradients_without_an_fp32_copy(a100):
    par = core.Parallelism(grad_dtype="bf16", master_weights="remainders")
    assert estimate_memory(SMALL, a100, par, TINY).transient_bytes < PARAMS


def test_the_first_iteration_runs_forward_and_backward_before_adams_moments_exist(a100):
    par = core.Parallelism()
    work = core.TrainWorkload(global_batch=1, seq=4096)
    steady = estimate_memory(SMALL, a100, par, work)
    first = estimate_memory(SMALL, a100, par, work, first_iteration=True)
    assert steady.optimizer_bytes == 12 * PARAMS and steady.activations_bytes > 0
    # Activations of 4096 tokens (~ 60 MB) outweigh the 8-byte moments (10.6 MB): the forward peaks.
    assert first.optimizer_bytes == 4 * PARAMS and first.activations_bytes == steady.activations_bytes


def test_interleaved_stages_hold_their_warm_up_chunks():
    # pp 4, v 5: warm-up 2 (p - s - 1) + (v - 1) p chunks, plus one, each 1/5 of the stage.
    par = core.Parallelism(pp=4, schedule="interleaved", virtual_stages=5)
    assert [in_flight(par, 16, stage) for stage in range(4)] == pytest.approx([23 / 5, 21 / 5, 19 / 5, 17 / 5])
    assert in_flight(par, 16, 0) == pytest.approx(4 * (1 + 3 / 20))  # Korthikanti et al.'s first stage
    assert in_flight(par, 2, 3) == 2  # fewer micro-batches than the warm-up: all of them


def test_the_breakdown_says_which_buffers_it_counts():
    par = core.Parallelism(dp=2, zero=1, grad_dtype="bf16", master_weights="none", optimizer_dtype="bf16")
    text = estimate_memory(SMALL, H100_FP8, par, core.TrainWorkload(2, 4096)).describe()
    assert "gradients: bf16 buckets, full" in text
    assert "optimizer: none master weights + bf16 Adam moments, sharded over dp*cp = 2" in text
    assert "fp8_weights: TE fp8 (delayed) rowwise + columnwise copies" in text and "reserved: 2 GiB runtime" in text


def test_the_breakdown_names_the_dispatchers_kept_tensors_unless_layers_are_recomputed():
    moe = ModelSpec("small-moe", 2, 256, 4, 4, 1024, 1000, moe=MoESpec(4, 2, 512))
    kept = "MoE layers with the routing's and unpermute's kept tensors"
    assert kept in estimate_memory(moe, H100_BF16, core.Parallelism(), core.TrainWorkload(1, 4096)).describe()
    full = core.Parallelism(recompute="full")
    assert kept not in estimate_memory(moe, H100_BF16, full, core.TrainWorkload(1, 4096)).describe()


def test_a_fused_cross_entropy_holds_the_16_bit_logits_instead_of_fp32_logits_and_gradient(a100):
    work = core.TrainWorkload(global_batch=1, seq=8192)  # 8,192 tokens x 1,000 logits on one stage
    unfused = estimate_memory(SMALL, a100, core.Parallelism(), work)
    fused = estimate_memory(SMALL, a100, core.Parallelism(fused_cross_entropy=True), work)
    assert unfused.transient_bytes - fused.transient_bytes == 8192 * 1000 * (4 + 4 - 2)
