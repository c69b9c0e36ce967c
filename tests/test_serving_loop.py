"""The compiled iteration loop (core/serving/src/loop.cpp): small schedules worked out by hand,
the plain-Python loop it replaced (tests/serving_reference.py) matched bit for bit, and its
iteration-time memo asking the operator model once per token mix."""
from dataclasses import replace

import pytest
import serving_reference

from core.model.loader import load_hardware, load_model
from core.serving.engines import engine_spec
from core.serving.iteration import IterationModel
from core.serving.service import lifetime_s
from core.serving.simulate import Load, simulate

MODEL = load_model("llama3.1-8b")
HW = load_hardware("h200-sxm-141gb")
IT = IterationModel(MODEL, HW, 1, 1, 2)


def _engine(name):
    return replace(engine_spec(name), iteration_overhead_s=0.0, request_overhead_s=0.0)


def test_two_prompts_share_one_prefill_iteration_then_decode_together():
    # vLLM mixes: both 100-token prompts fit one 8192-token iteration; their 2 further tokens
    # are one decode span of 2 steps over contexts 100 and 101
    result = simulate(IT, _engine("vllm"), Load(100, 3, concurrency=2, requests=2), 10**6)
    prefill_s = IT.time_s(200, 0, 0, 0, False)
    span_s = IT.time_s(0, 0, 2, 100, True) + IT.time_s(0, 0, 2, 101, True)
    assert result.ttft_s == (prefill_s,) * 4
    assert result.tpot_s[0] == pytest.approx(span_s / 2, rel=1e-12)
    assert result.duration_s == pytest.approx(prefill_s + span_s, rel=1e-12)
    assert (result.prefill_tokens, result.decode_tokens, result.iterations) == (200, 4, 3)


def test_a_prefill_that_does_not_mix_stalls_the_running_decode():
    # SGLang's default: request 1 arrives 2.5 decode steps into request 0's 9; request 0's
    # decode span stops at the 3rd step, request 1's prefill runs alone, then both decode
    prefill_s, step_s = IT.time_s(100, 0, 0, 0, False), IT.time_s(0, 0, 1, 100, True)
    second_s = prefill_s + 2.5 * step_s
    result = simulate(IT, _engine("sglang"), Load(100, 10, concurrency=2, requests=2, ramp_s=2 * second_s), 10**6)
    t = IT.time_s
    first_span_s = 3 * (t(0, 0, 1, 100, True) + t(0, 0, 1, 102, True)) / 2
    both_s = 6 * (t(0, 0, 2, 101, True) + t(0, 0, 2, 106, True)) / 2  # contexts (103 + 100) // 2 = 101 on
    last_s = 3 * (t(0, 0, 1, 106, True) + t(0, 0, 1, 108, True)) / 2
    ends = (prefill_s + first_span_s + prefill_s + both_s, prefill_s + first_span_s + prefill_s + both_s + last_s)
    firsts = (prefill_s, prefill_s + first_span_s + prefill_s)
    assert result.ttft_s[0] == pytest.approx((firsts[0] + firsts[1] - second_s) / 2, rel=1e-12)
    assert result.tpot_s[0] == pytest.approx(((ends[0] - firsts[0]) + (ends[1] - firsts[1])) / 18, rel=1e-12)
    assert result.duration_s == pytest.approx(ends[1], rel=1e-12)
    assert (result.prefill_tokens, result.decode_tokens, result.iterations) == (200, 18, 1 + 3 + 1 + 6 + 3)


def test_a_first_token_seen_with_the_decode_step_waits_out_the_prefills_queued_behind_it():
    # SGLang prefills three 8,192-token prompts one per iteration before any decode; an engine
    # whose client sees a first token only when the request's first decode step ends gives all
    # three the same TTFT: three prefills and one decode step of three sequences
    engine = replace(_engine("sglang"), first_token_with_decode=True)
    result = simulate(IT, engine, Load(8192, 3, concurrency=3, requests=3), 10**6)
    prefill_s, step_s = IT.time_s(8192, 0, 0, 0, False), IT.time_s(0, 0, 3, 8192, True)
    plain = simulate(IT, _engine("sglang"), Load(8192, 3, concurrency=3, requests=3), 10**6)
    assert result.ttft_s == pytest.approx((3 * prefill_s + step_s,) * 4, rel=1e-12)
    assert plain.ttft_s[0] == pytest.approx(2 * prefill_s, rel=1e-12)  # 1, 2 and 3 prefills
    # the last token ends as before: what TTFT gains, the two further tokens' gaps lose
    assert result.request_s == plain.request_s
    assert result.tpot_s[0] == pytest.approx((plain.request_s[0] - result.ttft_s[0]) / 2, rel=1e-12)


def test_a_preempted_request_keeps_the_tokens_it_made():
    # 8 requests of 200 + 60 tokens share a 1,200-token cache: decodes get preempted, and each
    # victim recomputes its prompt and output so far, then decodes only what is left, so the
    # decode steps are every request's output but its first token (made by the prefill), once
    result = simulate(IT, _engine("vllm"), Load(200, 60, concurrency=8, requests=40), 1200)
    assert result.preemptions > 0
    assert result.decode_tokens == 40 * (60 - 1)


def test_a_closed_loop_slot_comes_back_after_its_return_time():
    # one slot, three one-token requests (prefill only): each successor arrives 0.5 s after its
    # predecessor ends, so the engine idles between them and no prefill waits
    prefill_s = IT.time_s(100, 0, 0, 0, False)
    result = simulate(IT, _engine("sglang"), Load(100, 1, concurrency=1, requests=3, return_s=0.5), 10**6)
    assert result.ttft_s == pytest.approx((prefill_s,) * 4, rel=1e-9)
    assert result.duration_s == pytest.approx(3 * prefill_s + 2 * 0.5, rel=1e-12)
    assert result.busy_s == pytest.approx(3 * prefill_s, rel=1e-12)


def test_a_first_wave_queues_for_prefill_then_returning_slots_do_not():
    # two slots sent at once to an engine that prefills one request at a time: the second waits
    # one prefill; each successor arrives 10 s after its predecessor's end, to an idle engine
    engine = replace(_engine("trtllm"), max_batch=1)
    prefill_s = IT.time_s(100, 0, 0, 0, False)
    result = simulate(IT, engine, Load(100, 1, concurrency=2, requests=4, return_s=10.0), 10**6)
    assert result.ttft_s[0] == pytest.approx((prefill_s + 2 * prefill_s + prefill_s + prefill_s) / 4, rel=1e-12)


def _waiting(engine, iters, ratio=0.9):
    return replace(engine, batch_wait_iters=iters, batch_wait_tokens_ratio=ratio)


def test_batch_waiting_holds_a_prompt_that_arrives_during_decodes_for_its_iterations():
    # TensorRT-LLM's batch waiting: request 1 arrives 2.5 decode steps into request 0's 39; its
    # 100 tokens and the one decode are far below 90 % of the budget, so it is held while 4 more
    # decode steps run, then prefills beside the decode; without waiting it goes at once
    t = IT.time_s
    prefill_s, step_s = t(100, 0, 0, 0, False), t(0, 0, 1, 100, True)
    arrival_s = prefill_s + 2.5 * step_s
    load = Load(100, 40, concurrency=2, requests=2, ramp_s=2 * arrival_s)
    first_span_s = 3 * (t(0, 0, 1, 100, True) + t(0, 0, 1, 102, True)) / 2
    held_span_s = 4 * (t(0, 0, 1, 103, True) + t(0, 0, 1, 106, True)) / 2
    waited = simulate(IT, _waiting(_engine("trtllm"), 4), load, 10**6)
    at_once = simulate(IT, _engine("trtllm"), load, 10**6)
    held_first_s = prefill_s + first_span_s + held_span_s + t(100, 0, 1, 107, False)
    assert waited.ttft_s[0] == pytest.approx((prefill_s + held_first_s - arrival_s) / 2, rel=1e-12)
    assert at_once.ttft_s[0] == pytest.approx(
        (prefill_s + prefill_s + first_span_s + t(100, 0, 1, 103, False) - arrival_s) / 2, rel=1e-12)


def test_batch_waiting_lets_prompts_go_at_once_when_they_fill_the_budget_share_or_nothing_decodes():
    # the held prompt and the decode make 101 tokens: a share of 100 of 8,192 tokens lets it go
    # at once; a first wave (no decode running yet) is never held
    t = IT.time_s
    arrival_s = t(100, 0, 0, 0, False) + 2.5 * t(0, 0, 1, 100, True)
    load = Load(100, 40, concurrency=2, requests=2, ramp_s=2 * arrival_s)
    filled = simulate(IT, _waiting(_engine("trtllm"), 4, ratio=100 / 8192), load, 10**6)
    assert filled == simulate(IT, _engine("trtllm"), load, 10**6)
    wave = Load(100, 3, concurrency=2, requests=2)
    assert simulate(IT, _waiting(_engine("trtllm"), 20), wave, 10**6) == simulate(IT, _engine("trtllm"), wave, 10**6)


CASES = {
    "vllm closed ramp": ("vllm", Load(300, 40, concurrency=6, requests=60, ramp_s=0.05), 10**6),
    "vllm cycles": ("vllm", Load(512, 64, concurrency=4, requests=200), 10**6),
    "vllm preempts": ("vllm", Load(200, 60, concurrency=8, requests=40), 1200),
    "vllm small budget": ("vllm-512", Load(1500, 20, concurrency=5, requests=30), 10**6),
    "vllm spread open": ("vllm", Load(400, 50, request_rate=40.0, requests=80, length_spread=0.3), 10**6),
    "vllm prefilled": ("vllm", Load(800, 30, concurrency=12, requests=60, prefilled=True, ramp_s=0.02), 10**6),
    "trtllm closed ramp": ("trtllm", Load(1000, 30, concurrency=16, requests=120, ramp_s=0.1), 10**6),
    "trtllm tight cache": ("trtllm", Load(600, 50, concurrency=10, requests=50), 3000),
    "trtllm warmup skipped": ("trtllm", Load(256, 16, concurrency=3, requests=40, skip_warmup=True), 10**6),
    "sglang closed ramp": ("sglang", Load(2000, 25, concurrency=16, requests=120, ramp_s=0.1), 10**6),
    "sglang preempts": ("sglang", Load(300, 80, concurrency=6, requests=30, length_spread=0.2), 1500),
    "sglang one token": ("sglang", Load(64, 1, concurrency=3, requests=20), 10**6),
    "trtllm slots return": ("trtllm", Load(900, 1, concurrency=6, requests=40, length_spread=0.1, return_s=0.02),
                            10**6),
    "vllm slots return decoding": ("vllm", Load(300, 40, concurrency=5, requests=30, return_s=0.05), 10**6),
    "sglang first token seen late": ("sglang-late", Load(2000, 25, concurrency=16, requests=120, ramp_s=0.1), 10**6),
    "sglang late cycles": ("sglang-late", Load(512, 64, concurrency=4, requests=200), 10**6),
    "sglang late preempts": ("sglang-late", Load(300, 80, concurrency=6, requests=30, length_spread=0.2), 1500),
    "trtllm batch waiting": ("trtllm-wait", Load(1000, 30, concurrency=16, requests=120, ramp_s=0.1), 10**6),
    "trtllm waiting cycles": ("trtllm-wait", Load(512, 64, concurrency=4, requests=200, ramp_s=0.2), 10**6),
    "trtllm waiting spread": ("trtllm-wait", Load(700, 90, concurrency=24, requests=150, length_spread=0.1), 10**6),
}


@pytest.mark.parametrize("name", CASES)
def test_the_compiled_loop_gives_the_plain_python_loops_figures_to_the_bit(name):
    engine_name, load, kv_tokens = CASES[name]
    engine = _engine(engine_name.split("-")[0])
    if engine_name.endswith("-512"):
        engine = replace(engine, max_num_tokens=512, max_batch=4)
    if engine_name.endswith("-late"):
        engine = replace(engine, first_token_with_decode=True)
    if engine_name.endswith("-wait"):
        engine = _waiting(engine, 6, ratio=0.5)
    compiled, plain = simulate(IT, engine, load, kv_tokens), serving_reference.simulate(IT, engine, load, kv_tokens)
    assert repr(compiled) == repr(plain)  # every float's shortest repr: bit for bit, NaN (no TPOT) included


@pytest.mark.parametrize("engine_name", ["vllm", "trtllm"])
def test_a_requests_recurrent_state_takes_its_cache_in_both_loops(engine_name):
    engine, kv_tokens = _engine(engine_name), 4000
    load = Load(300, 80, concurrency=12, requests=60, length_spread=0.2)
    compiled = simulate(IT, engine, load, kv_tokens, state_tokens=128)
    assert repr(compiled) == repr(serving_reference.simulate(IT, engine, load, kv_tokens, 128))
    # the state leaves less cache for tokens: fewer requests run at once, each waits longer
    assert compiled.ttft_s > simulate(IT, engine, load, kv_tokens).ttft_s


def test_a_scheduler_state_whose_decodes_end_at_other_steps_is_not_taken_for_a_cycle():
    # a client ramped over one request's lifetime: states at completions agree on the cheap
    # fingerprint (queue, cache, decodes, sum of ends) long before the ends themselves recur
    engine = _engine("vllm")
    load = Load(128, 64, concurrency=4, requests=100)
    load = replace(load, ramp_s=lifetime_s(IT, engine, load))
    compiled, plain = simulate(IT, engine, load, 10**6), serving_reference.simulate(IT, engine, load, 10**6)
    assert repr(compiled) == repr(plain)


def test_preemption_and_cycle_cases_exercise_what_they_name():
    engine, load, kv_tokens = CASES["vllm preempts"]
    assert simulate(IT, _engine(engine), load, kv_tokens).preemptions > 0
    engine, load, kv_tokens = CASES["vllm cycles"]
    cycled = simulate(IT, _engine(engine), load, kv_tokens)
    assert cycled.iterations > 0 and len(set(cycled.ttft_s)) > 1
    for name in ("trtllm batch waiting", "trtllm waiting cycles", "trtllm waiting spread"):
        _, load, kv_tokens = CASES[name]
        plain = simulate(IT, _engine("trtllm"), load, kv_tokens)
        assert simulate(IT, _waiting(_engine("trtllm"), 6, ratio=0.5), load, kv_tokens).ttft_s != plain.ttft_s


def test_the_memo_asks_the_operator_model_once_per_bucketed_token_mix():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    asked = []

    def operator_model(*mix):
        asked.append(mix)
        return IterationModel._time_s(it, *mix)

    it._time_s = operator_model
    load = Load(700, 90, concurrency=5, requests=30, ramp_s=0.05)
    first = simulate(it, _engine("vllm"), load, 10**6)
    assert len(asked) == len(set(asked)) == len(it.memo) > 0
    before = len(asked)
    assert simulate(it, _engine("vllm"), load, 10**6) == first
    assert len(asked) == before  # a warm memo runs the loop without the operator model
    it.time_s(0, 0, 3, 1000, True)
    it.time_s(0, 0, 3, 1001, True)  # 1000 and 1001 both round up to 1008
    assert asked[before:] == [(0, 0, 3, 1008, True)]
