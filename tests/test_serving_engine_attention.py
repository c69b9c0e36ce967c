"""A serving engine's attention timed by its own fitted kernels (calibration.engine_attention):
the engine's ops replace the fused training kernel, the bandwidth-bound decode sweep and the
layer graph's RoPE and cache-append kernels, which the engine's ops include."""
from dataclasses import replace

import pytest

from core.model import ops
from core.model.graph import build_decode_layer
from core.model.loader import load_hardware, load_model
from core.serving.engines import ENGINES
from core.serving.iteration import IterationModel

MODEL = load_model("llama3.1-8b")  # 32 layers, 32 query heads over 8 KV heads of 128
HW = ops.at_kernel_rates(load_hardware("h200-sxm-141gb"))  # as an engine runs its kernels
OLD_DECODE_HW = replace(HW, calibration=replace(HW.calibration, decode_attention_rate=0.0))


def _preprocessing_s(tokens: int) -> float:
    """The layer graph's RoPE and cache-append kernels for `tokens` new tokens (one rank, BF16 cache)."""
    return sum(op.time_s for op in build_decode_layer(MODEL, HW, tokens, 1, 1, 2)
               if op.name in ("rotary", "kv_append"))


def test_a_decode_iteration_swaps_the_sweep_and_its_preprocessing_for_the_engines_decode_op():
    engine = IterationModel(MODEL, HW, 1, 1, 2, attention_kernels="trtllm").time_s(0, 0, 4, 1024, False)
    plain = IterationModel(MODEL, HW, 1, 1, 2).time_s(0, 0, 4, 1024, False)
    new_s = ops.decode_attention(HW, 4, 32, 8, 1024, 128, 2, "trtllm").time_s
    old_s = ops.decode_attention(OLD_DECODE_HW, 4, 32, 8, 1024, 128, 2).time_s + _preprocessing_s(4)
    assert engine - plain == pytest.approx(32 * (new_s - old_s))


def test_a_first_prefill_chunk_runs_the_engines_prefill_op_as_its_kernel_table_times_it():
    engine = IterationModel(MODEL, HW, 1, 1, 2, attention_kernels="vllm").time_s(1024, 0, 0, 0, False)
    plain = IterationModel(MODEL, HW, 1, 1, 2).time_s(1024, 0, 0, 0, False)
    new_s = ops.flash_attention(HW, 32, 1024, 1024, 128, 4, True, kernel="vllm", kv_bytes_per_element=2).time_s
    old_s = ops.flash_attention(HW, 32, 1024, 512, 128, 4, False, kernel=MODEL.attention_kernel).time_s
    assert engine - plain == pytest.approx(32 * (new_s - old_s - _preprocessing_s(1024)))


def test_a_gpu_without_the_engines_kernels_keeps_the_fused_kernel_and_its_preprocessing():
    bare = replace(HW, calibration=replace(HW.calibration, engine_attention=()))
    engine = IterationModel(MODEL, bare, 1, 1, 2, attention_kernels="trtllm")
    plain = IterationModel(MODEL, bare, 1, 1, 2)
    for mix in ((1024, 0, 0, 0, False), (0, 0, 4, 1024, True)):
        assert engine.time_s(*mix) == plain.time_s(*mix)


def test_each_engine_names_the_kernels_it_runs():
    # SGLang runs vLLM's attention libraries: FlashAttention-3 on Hopper, FlashInfer on Blackwell
    assert {name: e.attention_kernels for name, e in ENGINES.items()} == \
        {"trtllm": "trtllm", "vllm": "vllm", "sglang": "vllm"}
