"""The A100 training rows of FlashAttention's and llm-foundry's READMEs (suite a100_training):
how a row's throughput becomes seconds per step, the model shape it runs, and the
FlashAttention 1.x kernel those rows ran."""
import pytest

from core.model import ops
from core.model.loader import load_hardware
from core.model.ops.attention import backward_pass_bytes
from core.validation.suites import SUITES, _framework_model, measured_step_s


def _row(**cells):
    row = {"source": "flash-attention-2022", "model": "GPT3-1.3B", "layers": "24", "hidden": "2048",
           "heads": "16", "seq_len": "2048", "vocab": "50257", "tied_embeddings": "true", "dropout": "true",
           "attention_kernel": "flash1", "gpus": "8", "global_batch": "512",
           "throughput_tokens_per_s": "169k", "throughput_scope": "8 GPUs"}
    return {**row, **cells}


def test_throughput_over_all_gpus_gives_the_global_batch_time():
    # 512 sequences of 2048 tokens at 169,000 tokens/s on the node
    assert measured_step_s(_row()) == pytest.approx(512 * 2048 / 169e3)


def test_per_gpu_throughput_is_multiplied_by_the_gpu_count():
    row = _row(global_batch="96", throughput_tokens_per_s="4641", throughput_scope="per GPU")
    assert measured_step_s(row) == pytest.approx(96 * 2048 / (4641 * 8))


def test_flash_attention_configs_pad_the_gpt2_vocabulary_to_a_multiple_of_8():
    assert _framework_model(_row()).vocab == 50264
    assert _framework_model(_row(source="llm-foundry-2023", vocab="50368")).vocab == 50368


def test_rows_are_gpt_style_decoders_with_a_4x_gelu_mlp():
    model = _framework_model(_row())
    assert (model.ffn_hidden, model.activation, model.norm, model.position_embedding) == (
        4 * 2048, "gelu", "layernorm", "learned")
    assert model.attention_kernel == "flash1"


def test_triton_kernels_of_llm_foundry_read_as_flash_attention_1():
    assert _framework_model(_row(attention_kernel="triton")).attention_kernel == "flash1"


def test_flash_attention_1_takes_twice_flash_attention_2s_time():
    """The fused kernel takes twice as long; the backward's memory-bound passes around it
    (reading O and dO, the FP32 dQ round trip) are the same work in both."""
    hw = load_hardware("a100-sxm4-80gb")
    launch = hw.gpu.launch_overhead_s + hw.calibration.kernel_overhead_s
    assert hw.calibration.attention_backward_passes
    passes_s = backward_pass_bytes(128 * 2048 * 128, 2) / (hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency)
    for backward in (False, True):
        one = ops.flash_attention(hw, 128, 2048, 2048, 128, 1, True, backward, kernel="flash1").time_s
        two = ops.flash_attention(hw, 128, 2048, 2048, 128, 1, True, backward, kernel="flash2").time_s
        apart = launch + (passes_s if backward else 0.0)
        assert one - apart == pytest.approx(2 * (two - apart))


def test_suite_holds_both_sources_and_every_row_ran():
    cases, verdicts = SUITES["a100_training"]()
    assert {c.source for c in cases} == {"flash-attention-2022", "llm-foundry-2023"}
    assert len(cases) == len(verdicts) == 21
    assert all(c.unit == "s" and c.measured > 0 for c in cases)


def test_unfused_gradient_accumulation_adds_a_cast_and_an_add_per_weight_gradient():
    from core.model.graph import LayerShape, build_layer
    from core.model.loader import load_model

    hw = load_hardware("a100-sxm4-80gb")
    model = load_model("gpt-22b")
    fused = LayerShape(2, 2048, 2048, 1, False, 1, 1)
    unfused = LayerShape(2, 2048, 2048, 1, False, 1, 1, grad_accumulate="fp32")

    def wgrad_s(shape):
        return next(op.time_s for op in build_layer(model, hw, shape).backward if op.name == "mlp_down.wgrad")

    weights = 4 * 6144 * 6144  # mlp_down: 4h x h
    cast = ops.pointwise(hw, weights * (2 + 4)).time_s  # read bf16, write fp32
    add = ops.pointwise(hw, weights * 3 * 4).time_s  # read both fp32, write the sum
    assert wgrad_s(unfused) - wgrad_s(fused) == pytest.approx(cast + add)


def test_flash_attention_1_runs_head_dim_96_on_its_128_kernel():
    hw = load_hardware("a100-sxm4-80gb")
    # 16 heads of 2048 tokens: K and V stay in L2, the kernel is bound by its tile matmuls
    padded = ops.flash_attention(hw, 16, 2048, 2048, 96, 1, True, kernel="flash1")
    full = ops.flash_attention(hw, 16, 2048, 2048, 128, 1, True, kernel="flash1")
    assert padded.time_s == pytest.approx(full.time_s)
    assert padded.flops == pytest.approx(full.flops * 96 / 128)  # the model's FLOPs stay its own
