"""Activation memory per layer against the closed forms of Korthikanti et al. (2022)."""
import pytest

import core
from core.evaluation import estimate_memory
from core.model.graph import LayerShape, build_layer
from core.model.memory import in_flight, saved_per_layer, stage_params

S, B = 2048, 4


@pytest.fixture(scope="module")
def gpt22b():
    return core.load_model("gpt-22b")


def layer_bytes(model, hw, tp, sp, recompute):
    graph = build_layer(model, hw, LayerShape(B, S, S, tp, sp, 1, 1))
    return saved_per_layer(graph, recompute, S * B * model.hidden * 2 / (tp if sp else 1))


def test_no_parallelism_no_recompute(gpt22b, a100):
    h, a = gpt22b.hidden, gpt22b.heads
    assert layer_bytes(gpt22b, a100, 1, False, "none") == pytest.approx(S * B * h * (34 + 5 * a * S / h), rel=1e-12)


def test_tensor_parallel_without_sequence_parallel(gpt22b, a100):
    h, a, t = gpt22b.hidden, gpt22b.heads, 8
    expected = S * B * h * (10 + 24 / t + 5 * a * S / (h * t))
    assert layer_bytes(gpt22b, a100, t, False, "none") == pytest.approx(expected, rel=1e-12)


def test_tensor_and_sequence_parallel_with_selective_recompute(gpt22b, a100):
    t = 8
    assert layer_bytes(gpt22b, a100, t, True, "selective") == 34 * S * B * gpt22b.hidden / t


def test_full_recompute_keeps_only_the_layer_input(gpt22b, a100):
    assert layer_bytes(gpt22b, a100, 8, True, "full") == 2 * S * B * gpt22b.hidden / 8


def test_zero_stages_shard_optimizer_then_gradients_then_weights(a100):
    model = core.load_model("llama2-7b")
    work = core.TrainWorkload(global_batch=8, seq=2048)
    params = stage_params(model, core.Parallelism(dp=8))[0]
    kinds = [estimate_memory(model, a100, core.Parallelism(dp=8, zero=z), work) for z in range(4)]
    assert kinds[0].optimizer_bytes == 12 * params
    assert kinds[1].optimizer_bytes == 12 * params / 8 and kinds[1].gradients_bytes == 4 * params
    assert kinds[2].gradients_bytes == 4 * params / 8 and kinds[2].weights_bytes == 2 * params
    assert kinds[3].weights_bytes == 2 * params / 8


def test_kv_cache_and_the_70b_that_does_not_fit_one_gpu(a100):
    model = core.load_model("llama2-70b")
    work = core.InferWorkload(batch=2, prompt=1000, decode=24)
    one = estimate_memory(model, a100, core.Parallelism(), work)
    # K and V, 80 layers, 2 sequences, 1024 tokens, 8 KV heads of 128, 2 bytes.
    assert one.kv_cache_bytes == 2 * 80 * 2 * 1024 * 8 * 128 * 2
    assert not one.feasible and "needs" in one.reason()
    assert estimate_memory(model, a100, core.Parallelism(tp=4), work).feasible


def test_micro_batches_in_flight_per_schedule():
    one_f_one_b = core.Parallelism(pp=4)
    assert [in_flight(one_f_one_b, 16, stage) for stage in range(4)] == [4, 3, 2, 1]
    assert in_flight(core.Parallelism(pp=4, schedule="gpipe"), 16, 0) == 16
    interleaved = core.Parallelism(pp=4, schedule="interleaved", virtual_stages=3)
    assert in_flight(interleaved, 16, 0) == pytest.approx(4 * (1 + 3 / 12))
