"""The analytical executor: pipeline bubbles, recompute and DP traffic, inference sums."""
import dataclasses
import math

import pytest

import core
from core.model.training import train_step
from core.model.inference import infer_request


@pytest.fixture(scope="module")
def llama():
    return core.load_model("llama2-7b")


def test_pipeline_bubble_of_uniform_stages(a100):
    # A model whose embedding and LM head are negligible: stages are near uniform, so the
    # 1F1B bubble is (p-1)/m of the steady state.
    model = dataclasses.replace(core.load_model("gpt-22b"), vocab=8, max_position=0)
    work = core.TrainWorkload(global_batch=32, seq=2048)
    par = core.Parallelism(tp=8, pp=4, sp=True, recompute="selective")
    _, breakdown, _ = train_step(model, a100, par, work, 32)
    steady = breakdown["compute_s"] + sum(v for k, v in breakdown.items() if k.startswith("comm_"))
    assert breakdown["bubble_s"] / steady == pytest.approx(3 / 32, rel=0.02)


def test_interleaving_divides_the_bubble(a100):
    model = core.load_model("gpt-175b")
    work = core.TrainWorkload(global_batch=64, seq=2048)
    plain = train_step(model, a100, core.Parallelism(tp=8, pp=8, sp=True), work, 64)[1]["bubble_s"]
    chunked = train_step(model, a100, core.Parallelism(tp=8, pp=8, sp=True, schedule="interleaved",
                                                       virtual_stages=3), work, 64)[1]["bubble_s"]
    assert chunked == pytest.approx(plain / 3, rel=0.05)


def test_recompute_costs_time(llama, a100):
    work = core.TrainWorkload(global_batch=8, seq=4096)
    times = [train_step(llama, a100, core.Parallelism(tp=8, sp=True, recompute=r), work, 8)[0]
             for r in ("none", "selective", "full")]
    assert times[0] <= times[1] < times[2]


def test_data_parallel_gradients_cross_the_network(llama, a100):
    work = core.TrainWorkload(global_batch=64, seq=4096)
    _, breakdown, _ = train_step(llama, a100, core.Parallelism(dp=16), work, 16)
    assert breakdown["dp_comm_total_s"] > 0


def test_inference_request_is_prefill_plus_decode(llama, a100):
    # 64 output tokens: the prefill emits the first, 63 decode steps the rest.
    work = core.InferWorkload(batch=4, prompt=512, decode=64)
    request, ttft, tpot, breakdown, flops = infer_request(llama, a100, core.Parallelism(tp=2), work, 2)
    assert request == pytest.approx(ttft + 63 * tpot)
    assert breakdown["prefill_s"] == pytest.approx(ttft)
    assert flops == pytest.approx(2 * llama.active_params() * 4 * (512 + 63))


def test_one_output_token_is_the_prefill_alone(llama, a100):
    request, ttft, tpot, _, _ = infer_request(llama, a100, core.Parallelism(tp=2),
                                              core.InferWorkload(batch=4, prompt=512, decode=1), 2)
    assert request == ttft and math.isnan(tpot)  # no token after the first: no time per output token


def test_evaluate_record_fields(llama, a100):
    record = core.evaluate(llama, a100, core.Parallelism(tp=2), core.InferWorkload(1, 128, 32), 2)
    for key in ("feasible", "infeasible_reason", "step_time_s", "memory_peak_gib", "mfu", "ttft_s",
                "tpot_s", "tokens_per_s", "breakdown"):
        assert key in record
    assert 0 < record["mfu"] < 1
    assert record["tokens_per_s"] == pytest.approx(32 / record["step_time_s"])


def test_infeasible_points_are_not_timed(a100):
    model = core.load_model("llama2-70b")
    record = core.evaluate(model, a100, core.Parallelism(), core.InferWorkload(1, 200, 200), 1)
    assert record["feasible"] is False and record["step_time_s"] != record["step_time_s"]
