"""The engine simulator (core.serving) on cases small enough to work out by hand."""
import math
from dataclasses import replace

import pytest

from core.errors import SpecError
from core.model.loader import load_hardware, load_model, with_dtype
from core.model.memory import RUNTIME_RESERVE_BYTES, stage_params
from core.model.specs import DTYPE_BYTES, Parallelism
from core.model.graph import build_decode_layer, ranks_per_token
from core.model.ops import gemm
from core.serving import engines as engines_module
from core.serving.engines import engine_spec
from core.serving import iteration
from core.serving._loop import bucket
from core.serving.iteration import IterationModel
from core.serving.service import Pool, kv_bytes_per_element, kv_tokens, serve, serve_disagg
from core.serving.simulate import Load, simulate
from core.validation import serving as serving_rows

# the visible measured rows beside the repository (../shared), which a clone alone lacks
needs_measured_rows = pytest.mark.skipif(not serving_rows.ROWS.is_file(), reason="no ../shared/validation/serving")

MODEL = load_model("llama3.1-8b")
HW = load_hardware("h200-sxm-141gb")


def _engine(name="vllm"):
    return replace(engine_spec(name), iteration_overhead_s=0.0, request_overhead_s=0.0, sequence_overhead_s=0.0)


def test_bucket_keeps_small_counts_and_rounds_large_ones_up_within_a_32nd():
    assert bucket(64) == 64
    assert bucket(1000) == 1008  # step 16 for 10-bit counts
    assert bucket(1024) == 1024


def test_one_request_at_a_time_is_one_prefill_then_one_decode_step_per_further_token():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    result = simulate(it, _engine(), Load(100, 3, concurrency=1, requests=2), 10**6)
    prefill_s = it.time_s(100, 0, 0, 0, False)
    step_s = [it.time_s(0, 0, 1, context, True) for context in (100, 101)]
    assert result.ttft_s[0] == pytest.approx(prefill_s)
    assert result.tpot_s[0] == pytest.approx(sum(step_s) / 2)
    assert result.decode_tokens == 4 and result.prefill_tokens == 200


def test_cuda_graph_iterations_pay_no_kernel_launches():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    assert it.time_s(0, 0, 1, 1000, True) < it.time_s(0, 0, 1, 1000, False)


def test_an_iteration_pays_host_time_for_each_sequence_it_samples():
    plain = IterationModel(MODEL, HW, 1, 1, 2)
    host = IterationModel(MODEL, HW, 1, 1, 2, sequence_overhead_s=20e-6)
    assert host.time_s(0, 0, 8, 1000, True) - plain.time_s(0, 0, 8, 1000, True) == pytest.approx(8 * 20e-6)
    # a prefill chunk alone samples one sequence: its prompt's first token
    assert host.time_s(512, 0, 0, 0, False) - plain.time_s(512, 0, 0, 0, False) == pytest.approx(20e-6)


def test_a_served_request_alone_pays_the_engines_time_per_sequence_on_each_token():
    # one request at a time: its prefill samples one sequence, as does each decode step
    load = Load(100, 3, concurrency=1, requests=2)
    plain = serve(MODEL, HW, _engine(), load, Pool())
    host = serve(MODEL, HW, replace(_engine(), sequence_overhead_s=1e-3), load, Pool())
    assert host["tpot_s"] - plain["tpot_s"] == pytest.approx(1e-3)
    assert host["ttft_s"] - plain["ttft_s"] == pytest.approx(1e-3)


def test_a_cache_for_one_request_serves_a_closed_loop_of_two_one_at_a_time():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    engine = replace(_engine("trtllm"), kv_block_tokens=1)
    alone = simulate(it, engine, Load(100, 10, concurrency=1, requests=4), 110)
    paired = simulate(it, engine, Load(100, 10, concurrency=2, requests=4), 110)
    assert paired.duration_s == pytest.approx(alone.duration_s)
    assert paired.ttft_s[0] > alone.ttft_s[0]  # the second request waits for the first to end


def test_an_on_demand_cache_preempts_when_it_runs_out():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    result = simulate(it, replace(_engine("vllm"), kv_block_tokens=1), Load(100, 50, concurrency=2, requests=2), 210)
    assert result.preemptions >= 1
    assert result.output_tokens == 100


def test_repeated_cycles_give_the_figures_a_full_simulation_gives():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    load = Load(512, 64, concurrency=4, requests=200)
    cycled = simulate(it, _engine(), load, 10**6)
    spread = simulate(it, _engine(), replace(load, length_spread=1e-9), 10**6)  # no cycle skipping
    assert cycled.ttft_s[0] == pytest.approx(spread.ttft_s[0], rel=1e-6)
    assert cycled.duration_s == pytest.approx(spread.duration_s, rel=1e-6)


def test_serve_reports_throughput_per_gpu_and_per_user():
    record = serve(MODEL, HW, _engine(), Load(256, 32, concurrency=4, requests=40), Pool(tp=2))
    assert record["output_tokens_per_s_per_gpu"] == pytest.approx(record["output_tokens_per_s"] / 2)
    assert record["output_tokens_per_s_per_user"] == pytest.approx(1 / record["tpot_s"])
    assert record["max_concurrency_kv"] > 4


def test_disaggregated_ttft_includes_the_kv_transfer():
    record = serve_disagg(MODEL, HW, _engine(), Load(1024, 32, concurrency=4, requests=40), Pool(), Pool())
    assert record["kv_transfer_s"] > 0
    assert record["ttft_s"] > record["kv_transfer_s"]


def test_a_disaggregated_first_wave_queues_at_a_prefill_engine_of_one_request():
    # 8 requests sent at once, each the client's only one, to a prefill engine taking one
    # prompt per iteration: the k-th waits k - 1 prefills, so the mean TTFT is 4.5 prefills
    # (plus the KV transfer); a slot that came back at once instead would keep the queue full
    prefill = Pool(batch=1)
    record = serve_disagg(MODEL, HW, _engine(), Load(1024, 32, concurrency=8, requests=8), prefill, Pool())
    prefill_s = IterationModel(MODEL, HW, 1, 1, 2, attention_kernels="vllm").time_s(1024, 0, 0, 0, False)
    assert record["ttft_s"] == pytest.approx(4.5 * prefill_s + record["kv_transfer_s"], rel=1e-9)


def test_shares_of_a_closed_loop_split_its_requests_too():
    # four engines share 8 requests in flight and 40 in all: each runs 2 in flight and 10 in all
    alone = serve(MODEL, HW, _engine(), Load(256, 16, concurrency=2, requests=10), Pool())
    shared = serve(MODEL, HW, _engine(), Load(256, 16, concurrency=8, requests=40), Pool(workers=4))
    assert shared["ttft_s"] == alone["ttft_s"] and shared["tpot_s"] == alone["tpot_s"]
    assert shared["output_tokens_per_s"] == pytest.approx(4 * alone["output_tokens_per_s"], rel=1e-12)


def test_an_uneven_closed_loop_runs_one_more_request_on_some_engines():
    # 6 requests in flight over 4 engines: two engines run 2, two run 1, pooled; not 8 in flight
    args = dict(isl=256, osl=16)
    two = serve(MODEL, HW, _engine(), Load(**args, concurrency=2, requests=20), Pool())
    one = serve(MODEL, HW, _engine(), Load(**args, concurrency=1, requests=10), Pool())
    six = serve(MODEL, HW, _engine(), Load(**args, concurrency=6, requests=60), Pool(workers=4))
    assert six["output_tokens_per_s"] == pytest.approx(2 * two["output_tokens_per_s"] + 2 * one["output_tokens_per_s"],
                                                       rel=1e-12)
    assert six["decode_tokens"] == 2 * two["decode_tokens"] + 2 * one["decode_tokens"]
    assert one["tpot_s"] < six["tpot_s"] < two["tpot_s"]  # each request weighs the same in the pooled mean
    assert six["request_p50_s"] <= six["request_p90_s"] <= six["request_p99_s"]


def test_fewer_requests_in_flight_than_decode_ranks_leave_the_rest_idle():
    # one request in flight: one decode rank works, whatever the ranks; one user's rate in all (its
    # 15 decode steps at 1 / TPOT each make 16 tokens with the prefill's first)
    one = serve_disagg(MODEL, HW, _engine(), Load(256, 16, concurrency=1, requests=10), Pool(), Pool())
    spread = serve_disagg(MODEL, HW, _engine(), Load(256, 16, concurrency=1, requests=10), Pool(),
                          Pool(tp=4, attention_dp=4))
    assert spread["output_tokens_per_s"] == pytest.approx(16 / 15 * spread["output_tokens_per_s_per_user"], rel=1e-9)
    assert spread["decode_tokens"] == one["decode_tokens"]


def test_an_open_loop_shared_by_engines_serves_its_requests_once():
    alone = serve(MODEL, HW, _engine(), Load(128, 16, request_rate=2.0, requests=40), Pool())
    shared = serve(MODEL, HW, _engine(), Load(128, 16, request_rate=8.0, requests=160), Pool(workers=4))
    assert shared["decode_tokens"] == 4 * alone["decode_tokens"] == 160 * 15


@pytest.mark.parametrize("call, field", [
    (lambda: serve(MODEL, HW, _engine(), Load(10, 10, concurrency=0), Pool()), "concurrency"),
    (lambda: serve(MODEL, HW, _engine(), Load(10, 10, concurrency=8, requests=4), Pool()), "requests"),
    (lambda: serve(MODEL, HW, _engine(), Load(10, 10, concurrency=1), Pool(tp=4, attention_dp=3)), "attention_dp"),
    (lambda: serve_disagg(MODEL, HW, _engine(), Load(10, 10, concurrency=1), Pool(), Pool(workers=0)),
     "decode_workers"),
    (lambda: engine_spec("tgi"), "engine"),
])
def test_bad_serving_input_is_refused_in_one_line_naming_the_field(call, field):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_open_loop_serves_every_request():
    record = serve(MODEL, HW, _engine(), Load(128, 16, request_rate=5.0, requests=30), Pool())
    assert not math.isnan(record["ttft_s"])


def _cli(capsys, *flags):
    from sweep.cli import main
    try:
        code = main(["run", "--model", "llama3.1-8b", "--hardware", "h200-sxm-141gb", *flags])
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr()


@pytest.mark.parametrize("flags, field", [
    (("--mode", "serve", "--concurrency", "0"), "'--concurrency' = 0"),
    (("--mode", "serve", "--request-rate", "-1"), "'--request-rate' = -1"),
    (("--mode", "serve", "--isl", "0"), "'--isl' = 0"),
    (("--mode", "serve", "--tp", "4", "--attention-dp", "3"), "attention_dp (3) must divide an engine's tp (4)"),
    (("--mode", "serve", "--tp", "64"), "heads (32) not divisible by tp (64)"),
    (("--mode", "serve", "--tp", "3"), "heads (32) not divisible by tp (3)"),
    (("--mode", "serve", "--tp", "2", "--gpus", "3"), "gpus (3) is not a multiple of tp*pp*cp (2)"),
    (("--mode", "serve", "--recompute", "full"), "recompute = full: training knobs"),
    (("--mode", "serve", "--kv-dtype", "nvfp4"), "kv_dtype nvfp4 needs a GPU with an nvfp4 peak"),
    (("--mode", "serve", "--disagg", "--prefill-workers", "1"), "'--decode-workers'"),
    (("--mode", "serve", "--prefill-workers", "1"), "'--prefill-workers'"),
    (("--isl", "5",), "'--isl' = 5: applies to --mode serve"),
])
def test_rapid_run_refuses_bad_serving_input_in_one_line(capsys, flags, field):
    code, out = _cli(capsys, *flags)
    assert code != 0
    assert field in out.err and out.err.strip().count("\n") == 0


def test_rapid_run_serve_prints_one_json_record(capsys):
    import json
    code, out = _cli(capsys, "--mode", "serve", "--engine", "sglang", "--isl", "128", "--osl", "16",
                     "--concurrency", "2", "--requests", "20", "--json")
    record = json.loads(out.out)
    assert code == 0 and record["feasible"] and record["output_tokens_per_s"] > 0
    assert record["energy_per_request_j"] == pytest.approx(record["energy_per_output_token_j"] * 16)


def test_an_iteration_of_a_model_whose_layers_differ_sums_its_kinds_by_count():
    """DeepSeek-V3 (3 dense MLA layers, 58 MoE ones): the iteration's layers are each kind's
    layer time times its count, the LM head and the iteration overhead on top."""
    model = load_model("deepseek-v3")
    hw = load_hardware("h200-sxm-141gb")
    it = IterationModel(model, hw, 8, 1, 1)
    groups = model.layer_groups()
    assert [count for _, count in groups] == [3, 58]
    layers_s = sum(count * it._layer_s(spec, 64, 0, 0, 64, 2048)[0] for spec, count in groups)
    lm_head = it.time_s(0, 0, 64, 2048, False) - layers_s
    assert 0 < lm_head < 0.1 * layers_s


def test_each_moe_layer_waits_out_its_routing_chain_even_in_a_cuda_graph(monkeypatch):
    """DeepSeek-V3's 58 MoE layers each add MOE_CHAIN dependent launches to a decode step,
    graph-replayed or not; its 3 dense layers add none."""
    model = load_model("deepseek-v3")
    with_chain = IterationModel(model, HW, 8, 1, 1).time_s(0, 0, 4, 1024, True)
    monkeypatch.setattr(iteration, "MOE_CHAIN", 0)
    without = IterationModel(model, HW, 8, 1, 1).time_s(0, 0, 4, 1024, True)
    assert with_chain - without == pytest.approx(58 * 5 * HW.gpu.launch_overhead_s)


def test_an_mla_cache_holds_one_latent_and_rope_key_per_token_and_layer_on_every_rank():
    """DeepSeek-V3 keeps 512 + 64 elements per token and layer (61 layers), whole on each TP
    rank: the capacity is the engine's share of the free memory over 61 x 576 bytes (FP8)."""
    model = load_model("deepseek-v3")
    hw = with_dtype(load_hardware("h200-sxm-141gb"), "fp8", "test", "dtype")
    engine = _engine("trtllm")
    pool = Pool(tp=8, ep=8)
    per_token = 61 * 576 * 1.0
    served = replace(model, mtp_layers=0)  # an engine loads no MTP module
    weights = max(stage_params(served, Parallelism(tp=8, ep=8, etp=1))) * DTYPE_BYTES[hw.dtype]
    free = hw.gpu.hbm.capacity_bytes - weights - RUNTIME_RESERVE_BYTES
    assert free > 0
    assert kv_tokens(model, hw, pool, engine, 1.0) == int(engine.kv_memory_fraction * free / per_token)


def test_an_nvfp4_cache_element_carries_its_block_scale():
    """Half a byte per element and one E4M3 scale byte per 16 elements, as inference mode sizes it."""
    b200 = load_hardware("b200-sxm-180gb")
    assert kv_bytes_per_element(b200, "nvfp4") == 0.5 + 1 / 16
    assert (kv_bytes_per_element(b200, "fp8"), kv_bytes_per_element(b200, "")) == (1, 2)


def test_a_length_spread_draws_each_request_within_its_share_and_keeps_the_means_close():
    it = IterationModel(MODEL, HW, 1, 1, 2)
    load = Load(1000, 100, concurrency=4, requests=400, length_spread=0.1)
    result = simulate(it, _engine(), load, 10**7)
    assert 0.9 * 400 * 1000 <= result.prefill_tokens <= 1.1 * 400 * 1000
    assert abs(result.output_tokens / (400 * 100) - 1) < 0.02  # uniform draws: mean within 2 %


def test_a_measured_row_with_attention_dp_spans_tp_times_its_ranks():
    """The serving rows give each attention rank's tp: tp 1 with 8 attention-DP ranks is an
    8-GPU engine whose attention runs unsplit on each GPU."""
    row = {"num_workers": "", "tp_size": "1.0", "pp_size": "1.0", "moe_ep_size": "8.0", "attention_dp_size": "8.0"}
    assert serving_rows._pool(row) == Pool(workers=1, tp=8, pp=1, ep=8, attention_dp=8, batch=0)


def test_attention_dp_ranks_run_the_ffn_on_every_ranks_tokens():
    """One of 8 attention-DP ranks (tp 8) with 4 decodes: its FFN is the FFN of 32 tokens over
    8 GPUs, its attention that of 4 tokens on one GPU, so it costs more than a plain tp-8
    iteration of its 4 tokens."""
    dp = IterationModel(MODEL, HW, 8, 1, 2, attention_dp=8).time_s(0, 0, 4, 1000, True)
    plain = IterationModel(MODEL, HW, 8, 1, 2).time_s(0, 0, 4, 1000, True)
    assert plain < dp


def test_a_closed_loop_of_fewer_requests_than_engines_leaves_the_rest_idle():
    """One request in flight over four engines is one engine's single request: the same
    latency and throughput as one engine serving it, per GPU a quarter of that engine's."""
    load = Load(128, 16, concurrency=1, requests=20)
    alone = serve(MODEL, HW, _engine(), load, Pool(workers=1))
    four = serve(MODEL, HW, _engine(), load, Pool(workers=4))
    assert four["tpot_s"] == alone["tpot_s"] and four["output_tokens_per_s"] == alone["output_tokens_per_s"]
    assert four["output_tokens_per_s_per_gpu"] == pytest.approx(alone["output_tokens_per_s_per_gpu"] / 4)


def test_expert_parallel_ranks_each_run_their_share_of_the_experts_and_send_tokens_by_all_to_all():
    """Mixtral (8 experts, top 2) on tp 2 with ep 2: each rank holds 4 whole experts and runs
    the 16 x 2 / 2 = 16 expert copies routed to them (4 rows on each); its own 8 tokens go to
    the ranks holding their experts and back as two all-to-alls, a token once per rank it
    reaches: both its experts miss a rank with odds C(4, 2) / C(8, 2) = 3 / 14, so it reaches
    2 x 11 / 14 = 11 / 7 ranks on average."""
    model = load_model("mixtral-8x7b")
    layer = build_decode_layer(model, HW, 16, 1, 2, 2.0, ep=2, dispatched=8)
    ops_ = {op.name: op for op in layer}
    assert ops_["mlp_up"].time_s == pytest.approx(gemm(HW, 4, 2 * 14336, 4096, 4).time_s)
    a2a = 8 * 11 / 7 * 4096 * HW.act_bytes
    assert [(op.name, op.collective, op.bytes_) for op in layer if op.kind == "comm"] == [
        ("attn.allreduce", "all_reduce", 16 * 4096 * HW.act_bytes),
        ("moe.dispatch", "all_to_all", pytest.approx(a2a)), ("moe.combine", "all_to_all", pytest.approx(a2a))]


def test_a_dispatched_token_reaches_at_most_top_k_ranks_and_at_least_one():
    """DeepSeek-V3 (256 experts, top 8): one rank holds them all (1), every rank one expert
    (8 copies, one per expert), and on 2 ranks a token misses one with odds
    C(128, 8) / C(256, 8)."""
    moe = load_model("deepseek-v3").layer_groups()[-1][0].moe
    assert ranks_per_token(moe, 1) == 1.0
    assert ranks_per_token(moe, 256) == 8.0
    assert ranks_per_token(moe, 2) == pytest.approx(2 * (1 - math.comb(128, 8) / math.comb(256, 8)))
    assert ranks_per_token(load_model("mixtral-8x7b").moe, 16) == 2.0  # more ranks than experts: top_k at most


def test_an_attention_dp_rank_normalizes_and_routes_its_own_tokens_only():
    """DeepSeek-V3's FFN on 8 attention-DP ranks of 64 tokens each: the routed experts take all
    512 tokens' copies, the norm, the router and the shared expert (whole on each rank) only
    the rank's own 64."""
    model = load_model("deepseek-v3")
    spec = [s for s, _ in model.layer_groups() if s.moe][0]
    layer = {op.name: op for op in build_decode_layer(spec, HW, 512, 1, 8, 2.0, ep=8, dispatched=64)}
    own = {op.name: op for op in build_decode_layer(spec, HW, 64, 1, 1, 2.0)}
    for name in ("norm2", "router", "shared_up", "shared_down", "residual2"):
        assert layer[name].time_s == own[name].time_s


def test_expert_parallelism_changes_an_attention_dp_engines_iteration():
    """An 8-GPU DeepSeek-V3 engine with 8 attention-DP ranks: splitting the experts over ep 8
    (all-to-all) instead of over tp 8 (all-reduce) moves its iteration time."""
    model = load_model("deepseek-v3")
    tp_split = IterationModel(model, HW, 8, 1, 1, attention_dp=8).time_s(0, 0, 16, 1024, True)
    ep_split = IterationModel(model, HW, 8, 1, 1, attention_dp=8, ep=8).time_s(0, 0, 16, 1024, True)
    assert ep_split != tp_split



def test_each_engine_takes_its_kv_cache_from_its_own_memory_knob():
    """Llama 3.1 8B (BF16) on one H200: TensorRT-LLM caches 0.9 of what the weights and the
    runtime leave, vLLM fills 0.9 of the whole memory with weights, runtime and cache, SGLang
    0.88 of it with weights and cache alone (its runtime kept outside the fraction)."""
    capacity = HW.gpu.hbm.capacity_bytes
    weights = max(stage_params(MODEL, Parallelism())) * 2
    per_token = 32 * 8 * 128 * 2 * 2  # layers x kv heads x head dim x (K, V) x bytes
    expected = {"trtllm": 0.9 * (capacity - weights - RUNTIME_RESERVE_BYTES),
                "sglang": 0.88 * capacity - weights,
                "vllm": 0.9 * capacity - weights - RUNTIME_RESERVE_BYTES}
    for name, cache_bytes in expected.items():
        assert kv_tokens(MODEL, HW, Pool(), _engine(name), 2.0) == int(cache_bytes / per_token)


def test_sglang_sizes_its_prefill_chunk_and_cuda_graphs_by_the_gpus_memory():
    """SGLang's own tiers: 8,192-token chunks up to 160 GB, 16,384 beyond; CUDA graphs up to 256
    requests below 4 tensor-parallel ranks, 512 from 4 ranks and on every GPU beyond 160 GB."""
    sglang, b200 = engine_spec("sglang"), load_hardware("b200-sxm-180gb").gpu
    sized = lambda gpu, tp: engines_module.on_gpu(sglang, gpu, tp)  # noqa: E731
    assert (sized(HW.gpu, 2).max_num_tokens, sized(HW.gpu, 2).cuda_graph_max_batch) == (8192, 256)
    assert (sized(HW.gpu, 4).max_num_tokens, sized(HW.gpu, 4).cuda_graph_max_batch) == (8192, 512)
    assert (sized(b200, 1).max_num_tokens, sized(b200, 1).cuda_graph_max_batch) == (16384, 512)
    by_hand = engine_spec("sglang", max_num_tokens=4096)
    assert engines_module.on_gpu(by_hand, b200, 1).max_num_tokens == 4096


def test_sglang_keeps_room_for_its_runtime_as_its_release_reserves_it():
    """SGLang's default memory fraction: from 0.5.3, 512 MiB + 1.5 MiB per chunk token + 2 MiB
    per CUDA-graph request + 1 GiB per 8 ranks (attention DP: 4.5 MiB per graph request and
    rank past 300 requests), 10 GiB at least on GPUs beyond 60 GiB; before, 9.5 GiB + 0.5 GiB a
    rank on an H100 (+4 GiB with attention DP)."""
    fraction = engines_module.sglang_memory_fraction
    h100 = load_hardware("h100-sxm5-80gb").gpu.hbm.capacity_bytes  # 81,559 MiB
    b200 = load_hardware("b200-sxm-180gb").gpu.hbm.capacity_bytes  # 184,320 MiB
    assert fraction(h100, 8192, 256, 1) == 0.835  # 13,440 MiB held: 68,119 / 81,559
    assert fraction(h100, 2048, 8, 1) == 0.874  # 3,728 MiB, raised to the 10,240 floor
    assert fraction(h100, 8192, 256, 2, version=(0, 5, 1)) == 0.868  # 10.5 GiB: 70,807 / 81,559
    assert fraction(h100, 8192, 512, 8, attention_dp=8, version=(0, 5, 1)) == 0.78  # 17.5 GiB
    assert fraction(b200, 16384, 512, 8, attention_dp=8) == 0.753  # 45,568 MiB: 512 + 24,576 + 1,024 + 1,024 + 18,432
    assert fraction(b200, 16384, 256, 8, attention_dp=8) == 0.822  # 3 MiB per graph request and rank: 32,768 MiB
    assert fraction(40 * 2**30, 4096, 32, 1) == 0.833  # 6,848 of 40,960 MiB: no floor at 60 GiB or less


def test_sglang_sizes_its_memory_fraction_with_its_chunk_graphs_layout_and_release():
    h100 = load_hardware("h100-sxm5-80gb").gpu
    sized = engines_module.on_gpu(engine_spec("sglang"), h100, 1)
    assert (sized.max_num_tokens, sized.cuda_graph_max_batch, sized.kv_memory_fraction) == (8192, 256, 0.835)
    old = engines_module.release_spec(engine_spec("sglang"), "0.5.1.post1")
    assert engines_module.on_gpu(old, h100, 2).kv_memory_fraction == 0.868
    small_chunk = engines_module.with_knobs(engine_spec("sglang"), max_num_tokens=2048, cuda_graph_max_batch=8)
    assert engines_module.on_gpu(small_chunk, h100, 1).kv_memory_fraction == 0.874
    by_hand = engines_module.with_knobs(engine_spec("sglang"), kv_memory_fraction=0.9)
    assert engines_module.on_gpu(by_hand, h100, 1).kv_memory_fraction == 0.9


def test_an_sglang_pool_sizes_its_memory_with_its_pipeline_and_attention_dp_ranks():
    """Two tensor-parallel ranks in two stages on H100s hold 1 GiB per 8 ranks back for all four
    (13,824 MiB: 0.831, not two ranks' 0.834); the served record's KV capacity is that fraction's."""
    h100 = load_hardware("h100-sxm5-80gb")
    sglang = engine_spec("sglang")
    assert engines_module.on_gpu(sglang, h100.gpu, 2, 2).kv_memory_fraction == 0.831
    assert engines_module.on_gpu(sglang, h100.gpu, 2).kv_memory_fraction == 0.834
    load, pool = Load(1024, 128, concurrency=1, requests=1), Pool(tp=2, pp=2)
    tokens = kv_tokens(MODEL, h100, pool, engines_module.on_gpu(sglang, h100.gpu, 2, 2), 2.0)
    assert serve(MODEL, h100, sglang, load, pool)["max_concurrency_kv"] == tokens // (1024 + 128)


def test_vllm_takes_the_smaller_budget_on_an_a100():
    """vLLM's API server: 8,192 tokens and 1,024 requests on GPUs of 70 GiB and more, but 2,048
    and 256 on an A100 of any memory."""
    vllm = engine_spec("vllm")
    a100 = engines_module.on_gpu(vllm, load_hardware("a100-sxm4-80gb").gpu)
    h100 = engines_module.on_gpu(vllm, load_hardware("h100-sxm5-80gb").gpu)
    assert (a100.max_num_tokens, a100.max_batch) == (2048, 256)
    assert (h100.max_num_tokens, h100.max_batch) == (8192, 1024)
    assert engines_module.on_gpu(engine_spec("vllm", max_batch=64), load_hardware("a100-sxm4-80gb").gpu).max_batch == 64


def test_a_12000_token_prompt_prefills_in_one_sglang_iteration_on_a_b200_and_two_on_an_h200():
    """One request of 12,000 prompt tokens and 2 output tokens: the prompt's chunks, then one
    decode step (the first token leaves with the prompt's last chunk)."""
    load = Load(12000, 2, concurrency=1, requests=1)
    b200 = serve(MODEL, load_hardware("b200-sxm-180gb"), engine_spec("sglang"), load, Pool())
    h200 = serve(MODEL, HW, engine_spec("sglang"), load, Pool())
    assert (b200["iterations"], h200["iterations"]) == (2, 3)


def test_a_version_family_is_the_versions_major_and_minor():
    assert engines_module.version_family("1.0.0rc3") == "1.0"
    assert engines_module.version_family("0.12.0") == "0.12"
    assert engines_module.version_family("") == ""


def test_sglang_releases_before_the_overlap_fix_show_a_first_token_with_the_first_decode_step():
    assert engines_module.release("0.5.1.post1") == (0, 5, 1)
    assert engines_module.release("1.0.0rc3") == (1, 0)
    assert engines_module.release("") == ()
    late = [engines_module.release_spec(engine_spec(name), version).first_token_with_decode
            for name, version in (("sglang", "0.5.1.post1"), ("sglang", "0.5.3"), ("sglang", "0.5.4"),
                                  ("sglang", "0.5.9"), ("sglang", ""), ("vllm", "0.5.1"))]
    assert late == [True, True, False, False, False, False]


@needs_measured_rows
def test_a_measured_row_takes_its_version_familys_request_overhead(monkeypatch):
    """Two rows alike but for their engine version: the family with a request overhead of its
    own waits that much longer for its first token than the one on the engine's own."""
    row = next(r for r in serving_rows.rows() if r["backend"] == "vllm" and r["mode"] == "agg")
    monkeypatch.setattr(serving_rows, "FAMILY_REQUEST_OVERHEAD_S", {("vllm", "9.9"): 1.015})
    slow = serving_rows.predict({**row, "backend_version": "9.9.1"})
    plain = serving_rows.predict({**row, "backend_version": "9.8.1"})
    assert slow["ttft_s"] - plain["ttft_s"] == pytest.approx(1.015 - engine_spec("vllm").request_overhead_s)


@needs_measured_rows
def test_a_workflow_row_takes_its_harness_client_and_request_overhead_whatever_its_version(monkeypatch):
    """The database's workflow runs ("db-dump" sources) were measured by one client for every
    engine: its request overhead replaces the version family's, and a row from another source
    keeps its engine's."""
    row = next(r for r in serving_rows.rows() if r["backend"] == "vllm" and r["mode"] == "agg")
    workflow = {**row, "silicon_data_source": "db-dump/x; " + row["silicon_data_source"]}
    assert (serving_rows.harness(row), serving_rows.harness(workflow)) == ("vllm", "workflow")
    monkeypatch.setattr(serving_rows, "FAMILY_REQUEST_OVERHEAD_S", {("vllm", "9.9"): 1.015})
    monkeypatch.setattr(serving_rows, "REQUESTS_PER_SLOT", {**serving_rows.REQUESTS_PER_SLOT, "workflow": 10.0})
    monkeypatch.setattr(serving_rows, "LENGTH_SPREAD", {**serving_rows.LENGTH_SPREAD,
                                                      "workflow": serving_rows.LENGTH_SPREAD["vllm"]})
    monkeypatch.setattr(serving_rows, "HARNESS_REQUEST_OVERHEAD_S", {"workflow": 0.515})
    mine = serving_rows.predict({**workflow, "backend_version": "9.9.1"})
    plain = serving_rows.predict({**row, "backend_version": "9.8.1"})
    assert mine["ttft_s"] - plain["ttft_s"] == pytest.approx(0.515 - engine_spec("vllm").request_overhead_s)


@needs_measured_rows
def test_a_workflow_version_family_with_an_overhead_of_its_own_takes_it_over_the_harnesss(monkeypatch):
    """Two workflow rows alike but for their engine version: the family keyed (harness, engine,
    family) waits its own request overhead, the other the harness's."""
    row = next(r for r in serving_rows.rows() if r["backend"] == "vllm" and r["mode"] == "agg")
    workflow = {**row, "silicon_data_source": "db-dump/x; " + row["silicon_data_source"]}
    monkeypatch.setattr(serving_rows, "HARNESS_REQUEST_OVERHEAD_S",
                        {"workflow": 0.515, ("workflow", "vllm", "9.9"): 0.715})
    mine = serving_rows.predict({**workflow, "backend_version": "9.9.1"})
    shared = serving_rows.predict({**workflow, "backend_version": "9.8.1"})
    assert mine["ttft_s"] - shared["ttft_s"] == pytest.approx(0.715 - 0.515)


def test_the_70b_sweeps_tensorrt_llm_engines_run_as_its_launch_scripts_start_them():
    """The 2025-10 Llama-3.1-70B sweep ("model=" sources) launched TensorRT-LLM with a 16,384-token
    budget and, at 1k/1k on fewer than 8 GPUs, batch waiting; its vLLM engines and other
    campaigns' rows keep the engines' defaults."""
    sweep = {"backend": "trtllm", "silicon_data_source": "model=Llama-3.1-70B; silicon_concurrency=4",
             "isl": "1024", "osl": "1024", "tp_size": "4.0"}
    trtllm = engine_spec("trtllm")
    waiting = serving_rows.launched(sweep, trtllm)
    assert (waiting.max_num_tokens, waiting.batch_wait_iters, waiting.batch_wait_tokens_ratio) == (16384, 20, 0.9)
    eight = serving_rows.launched({**sweep, "tp_size": "8.0"}, trtllm)
    longer = serving_rows.launched({**sweep, "osl": "8192"}, trtllm)
    assert eight == longer == engines_module.with_knobs(trtllm, max_num_tokens=16384)
    assert serving_rows.launched({**sweep, "backend": "vllm"}, engine_spec("vllm")) == engine_spec("vllm")
    other = {**sweep, "silicon_data_source": "silicon_concurrency=4"}
    assert serving_rows.launched(other, trtllm) == trtllm


@needs_measured_rows
def test_a_held_prompt_waits_about_the_batch_wait_in_decode_steps_at_low_concurrency(monkeypatch):
    """A 70B sweep row at 1k/1k, 4 requests on one B200 (tp 1): batch waiting holds each prompt
    that arrives while others decode for 20 decode steps (about its time per output token each);
    the first wave, 1 in the client's 10 requests per slot, arrives to no decode and goes at
    once, so the mean TTFT grows by 18 steps."""
    row = next(r for r in serving_rows.rows() if r["silicon_data_source"].startswith("model=")
               and r["backend"] == "trtllm" and r["system"] == "b200_sxm" and r["gemm_quant_mode"] == "fp8"
               and (r["isl"], r["osl"], r["tp_size"], r["batch_size"]) == ("1024", "1024", "1.0", "4.0"))
    waited = serving_rows.predict(row)
    monkeypatch.setattr(serving_rows, "SWEEP_BATCH_WAIT", {})
    plain = serving_rows.predict(row)
    assert serving_rows.REQUESTS_PER_SLOT["trtllm"] == 10
    assert waited["ttft_s"] - plain["ttft_s"] == pytest.approx(18 * waited["tpot_s"], rel=0.05)
