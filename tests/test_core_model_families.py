"""The 2025-26 model families: published parameter counts, KV-cache and state bytes against
closed forms, every shared config trained and served, and layers that differ costed as the
sum of their kinds."""
import dataclasses
import math
from pathlib import Path

import pytest

import core
from core.model.graph import LayerShape, build_layer
from core.model.inference import decode_points
from core.model.layout import stage_groups
from core.model.memory import kv_cache_bytes_per_token, layer_cache_bytes, state_bytes_per_sequence
from core.model.ops.common import launch_s
from core.model.ops.mla import mla_decode
from core.model.specs import LayerKind, Parallelism

MODELS = Path(__file__).resolve().parent.parent.parent / "shared" / "models"
if not MODELS.is_dir():
    MODELS = Path("/work/shared/models")
needs_models = pytest.mark.skipif(not MODELS.is_dir(), reason="no ../shared/models")


def load(name: str):
    return core.load_model(MODELS / f"{name}.json")


# (config, published total, published active) in billions, from ../shared/models/README.md
PUBLISHED = [("deepseek-ai--DeepSeek-V3", 671, 37), ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 109, 17),
             ("Qwen--Qwen3-235B-A22B", 235, 22), ("Qwen--Qwen3-32B", 32.8, None),
             ("meta-llama--Meta-Llama-3.1-70B", 70.6, None), ("mistralai--Mixtral-8x7B-v0.1", 46.7, 12.9)]


@needs_models
@pytest.mark.parametrize("name, total_b, active_b", PUBLISHED)
def test_parameter_counts_match_the_published_figures(name, total_b, active_b):
    model = load(name)
    assert model.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b is not None:
        assert model.active_params() / 1e9 == pytest.approx(active_b, rel=0.02)


@needs_models
def test_gpt_oss_counts_as_openai_publishes_them():
    """OpenAI's 5.1 B active leaves the input embedding table out (a lookup, not a matmul);
    its 116.8 B total counts everything."""
    model = load("openai--gpt-oss-120b")
    assert model.total_params() / 1e9 == pytest.approx(116.8, rel=0.02)
    assert (model.active_params() - model.embedding_params()) / 1e9 == pytest.approx(5.1, rel=0.02)


@needs_models
def test_deepseek_v3_layers_mla_and_mtp():
    model = load("deepseek-ai--DeepSeek-V3")
    assert model.name == "DeepSeek-V3"
    assert [k.ffn for k in model.layer_kinds[:4]] == ["dense", "dense", "dense", "moe"]
    assert model.mla.latent_dim == 512 + 64 and model.moe.shared_expert_ffn_hidden == 2048
    assert (model.moe.groups, model.moe.groups_per_token) == (8, 4)
    assert model.weight_dtype == "fp8_block" and model.mtp_layers == 1
    # the MTP module (one MoE layer, two norms, the 2h -> h projection) is what the checkpoint's 685 B adds
    assert (model.total_params() + model.mtp_params()) / 1e9 == pytest.approx(685, rel=0.02)


@needs_models
def test_a_deepseek_config_saved_by_transformers_keeps_its_qk_head_dim(tmp_path):
    import json

    config = json.loads((MODELS / "deepseek-ai--DeepSeek-V3.json").read_text())
    for value, accepted in ((192, True), (100, False)):  # 192 = qk_nope_head_dim 128 + qk_rope_head_dim 64
        path = tmp_path / f"qk{value}.json"
        path.write_text(json.dumps({**config, "qk_head_dim": value}))
        if accepted:
            assert core.load_model(path).total_params() == load("deepseek-ai--DeepSeek-V3").total_params()
        else:
            with pytest.raises(core.SpecError, match="qk_head_dim' = 100: expected qk_nope_head_dim"):
                core.load_model(path)


@needs_models
def test_kv_cache_bytes_per_token_follow_closed_forms():
    bf16 = 2
    assert kv_cache_bytes_per_token(load("deepseek-ai--DeepSeek-V3"), bf16) == (512 + 64) * 61 * 2
    # the latent is whole on every TP rank: tensor parallelism does not shrink it
    assert kv_cache_bytes_per_token(load("deepseek-ai--DeepSeek-V3"), bf16, tp=8) == (512 + 64) * 61 * 2
    assert kv_cache_bytes_per_token(load("meta-llama--Meta-Llama-3.1-70B"), bf16, tp=8) == 2 * 80 * 1 * 128 * 2
    assert kv_cache_bytes_per_token(load("openai--gpt-oss-120b"), bf16) == 2 * 36 * 8 * 64 * 2
    # GLM-5: the latent plus the sparse indexer's 128-wide key
    assert kv_cache_bytes_per_token(load("zai-org--GLM-5"), bf16) == (512 + 64 + 128) * 78 * 2
    # Gemma 4 26B-A4B: 25 sliding layers of 8 KV heads x 256 (K and V), 5 global ones of 2 x 512 (K = V)
    assert kv_cache_bytes_per_token(load("google--gemma-4-26B-A4B"), bf16) == (25 * 2 * 8 * 256 + 5 * 2 * 512) * 2


@needs_models
def test_windows_and_chunks_bound_the_cache():
    gpt_oss = load("openai--gpt-oss-120b")
    sliding, full = (spec for spec, _ in gpt_oss.layer_groups())
    assert (sliding.window, full.window) == (128, 0)
    per_token = 2 * 8 * 64 * 2
    assert layer_cache_bytes(sliding, 1, 10_000, 2) == 128 * per_token
    assert layer_cache_bytes(full, 1, 10_000, 2) == 10_000 * per_token
    scout = load("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    chunked = [spec for spec, count in scout.layer_groups() if spec.chunk]
    assert [count for spec, count in scout.layer_groups()] == [36, 12] and chunked[0].chunk == 8192
    assert layer_cache_bytes(chunked[0], 1, 20_000, 2) == 8192 * 2 * 8 * 128 * 2


@needs_models
def test_linear_attention_and_mamba_keep_a_fixed_state():
    qwen = load("Qwen--Qwen3.5-397B-A17B")
    linear = 45  # 60 layers, every 4th full attention
    gdn_state = 64 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 64 * 128) * 2  # FP32 state + the convolution's taps
    assert state_bytes_per_sequence(qwen, 2) == linear * gdn_state
    assert kv_cache_bytes_per_token(qwen, 2) == 15 * 2 * 2 * 256 * 2
    nemotron = load("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    mamba_state = 64 * 128 * 64 * 4 + 3 * (2 * 8 * 128 + 64 * 64) * 2
    assert state_bytes_per_sequence(nemotron, 2) == pattern.count("M") * mamba_state
    assert kv_cache_bytes_per_token(nemotron, 2) == pattern.count("*") * 2 * 2 * 128 * 2


# one training layout that fits and one serving layout per shared config, 256 H100s at most
SERVED = {"deepseek-ai--DeepSeek-V3": dict(tp=8, pp=2), "moonshotai--Kimi-K2.5": dict(tp=8, pp=2),
          "zai-org--GLM-5": dict(tp=8, pp=4), "Qwen--Qwen3.5-397B-A17B": dict(tp=8, pp=2)}
TRAINED = {"moonshotai--Kimi-K2.5": dict(tp=8, pp=8, ep=32, etp=1, dp=4, zero=1),  # on H200s: 1 T parameters
           "Qwen--Qwen3.5-397B-A17B": dict(tp=8, pp=4, ep=8, etp=2, dp=8, zero=1),
           "zai-org--GLM-5": dict(tp=8, pp=8, ep=32, etp=1, dp=4, zero=1)}


@needs_models
@pytest.mark.parametrize("path", sorted(MODELS.glob("*.json")) if MODELS.is_dir() else [], ids=lambda p: p.stem)
def test_every_shared_config_loads_trains_and_serves(path):
    model = core.load_model(path)
    hw = core.load_hardware("h200-sxm-141gb" if "Kimi" in path.stem else "h100-sxm5-80gb")
    layout = TRAINED.get(path.stem, dict(tp=8, pp=4, ep=8 if model.moe else 1, dp=8))
    par = Parallelism(sp=True, recompute="full", **layout)
    record = core.evaluate(model, hw, par, core.TrainWorkload(global_batch=256, seq=4096), par.gpus)
    assert record["feasible"], record["infeasible_reason"]
    assert 0 < record["mfu"] < 1
    serve = Parallelism(**SERVED.get(path.stem, dict(tp=8)))
    record = core.evaluate(model, hw, serve, core.InferWorkload(batch=8, prompt=2048, decode=64), serve.gpus)
    assert record["feasible"], record["infeasible_reason"]
    assert 0 < record["ttft_s"] < record["step_time_s"] and record["tpot_s"] > 0


def test_layers_declared_one_by_one_cost_what_a_uniform_model_costs():
    """The per-kind path (stage groups) gives the single-layer path's numbers when every
    layer is the same kind."""
    uniform = core.load_model("mixtral-8x7b")
    declared = dataclasses.replace(uniform, layer_kinds=(LayerKind(ffn="moe"),) * uniform.layers)
    assert not declared.uniform and declared.total_params() == uniform.total_params()
    hw = core.load_hardware("h100-sxm5-80gb")
    work = core.TrainWorkload(global_batch=64, seq=4096)
    for par in (Parallelism(tp=2, pp=4, ep=4, dp=4, sp=True, zero=1, recompute="selective"),
                Parallelism(tp=2, pp=2, ep=2, dp=2, sp=True, schedule="interleaved", virtual_stages=2),
                Parallelism(tp=2, pp=1, ep=2, dp=4, sp=True, zero=3)):
        a, b = (core.evaluate(m, hw, par, work, par.gpus, time_infeasible=True) for m in (uniform, declared))
        assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-9)
        assert b["memory_peak_gib"] == pytest.approx(a["memory_peak_gib"], rel=1e-9)
    serve = core.InferWorkload(batch=4, prompt=512, decode=32)
    a, b = (core.evaluate(m, hw, Parallelism(tp=2), serve, 2) for m in (uniform, declared))
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-9)


def test_a_stage_costs_its_layers_kinds():
    """Two dense layers then two MoE layers over two stages: each stage holds one kind, the
    MoE stage is the slower, and the step is set by it."""
    base = core.load_model("mixtral-8x7b")
    mixed = dataclasses.replace(base, layers=4, layer_kinds=(LayerKind(),) * 2 + (LayerKind(ffn="moe"),) * 2)
    par = Parallelism(tp=1, pp=2, dp=1)
    groups = stage_groups(mixed, par)
    assert [[(spec.moe is not None, n) for spec, n in stage] for stage in groups] == [[(False, 2)], [(True, 2)]]
    hw = core.load_hardware("h100-sxm5-80gb")
    shape = LayerShape(1, 2048, 2048, 1, False, 1, 1)
    dense, moe = (sum(op.time_s for op in build_layer(spec, hw, shape).forward) for (spec, _), in groups)
    assert moe > dense  # two experts of 14336 per token beside one dense FFN of 14336


def test_sliding_window_decode_points_split_at_the_window():
    model = dataclasses.replace(core.load_model("llama3.1-8b"), window=1000)
    assert decode_points(model, 1001, 1100) == ((1000, 100),)
    assert decode_points(model, 901, 1100) == ((901, 49.5), (999, 49.5), (1000, 101))
    full = core.load_model("llama3.1-8b")
    assert decode_points(full, 901, 1100) == ((901, 100.0), (1100, 100.0))


def test_absorbed_mla_decode_reads_the_latent_once_per_sequence():
    hw = core.load_hardware("h100-sxm5-80gb")
    kernel = mla_decode(hw, 4, 16, 1000, 512, 64, 1)
    queries = 4 * 16 * (2 * 512 + 64) * 2
    assert kernel.hbm_bytes == 4 * 1000 * (512 + 64) * 1 + queries
    assert kernel.flops == 2.0 * 4 * 16 * 1000 * (2 * 512 + 64)
    assert math.isclose(kernel.time_s, mla_decode(hw, 4, 16, 1000, 512, 64, 1).time_s)


def test_mla_decode_fills_whole_head_tiles_and_waits_out_its_split_kv_chain():
    """16 heads per rank cost a whole 64-row MMA tile once compute-bound, for a quarter of the
    useful work; the smallest step is the chain of dependent launches (three beyond its own)."""
    hw = core.load_hardware("h200-sxm-141gb")
    sixteen = mla_decode(hw, 256, 16, 16384, 512, 64, 1)
    sixty_four = mla_decode(hw, 256, 64, 16384, 512, 64, 1)
    assert sixteen.time_s == sixty_four.time_s
    assert 4 * sixteen.flops == sixty_four.flops
    tiny = mla_decode(hw, 1, 16, 1, 512, 64, 1)
    assert tiny.time_s - launch_s(hw) == pytest.approx(3 * hw.gpu.launch_overhead_s, rel=0.01)


def test_presets_name_the_model_and_count_it():
    for preset, total_b, active_b in (("deepseek-v3", 671, 37), ("kimi-k2", 1026, 32.9), ("gpt-oss-120b", 116.8, 5.7),
                                      ("qwen3-235b-a22b", 235, 22), ("qwen3-30b-a3b", 30.5, 3.3),
                                      ("llama4-scout", 109, 17), ("gpt-oss-20b", 20.9, 4.2), ("qwen3-8b", 8.2, 8.2),
                                      ("qwen3-14b", 14.8, 14.8)):
        model = core.load_model(preset)
        assert model.name == preset
        assert model.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
        assert model.active_params() / 1e9 == pytest.approx(active_b, rel=0.02)


@needs_models
def test_group_limited_routing_halves_deepseek_v3s_traffic_between_nodes():
    """DeepSeek-V3's tokens reach at most topk_group = 4 of the 8 expert groups (nodes), one copy
    per node: 4 of its 8 expert copies cross the node boundary; inside the node all 8 move. The
    InfiniBand part, the slower, sets the all-to-all's time."""
    from core.model.graph import _comm
    from core.model.layout import group_spans
    from core.model.training import time_ops
    model = load("deepseek-ai--DeepSeek-V3")
    hw = core.load_hardware("h100-sxm5-80gb")
    dims = hw.dims_for(256)
    spans = group_spans(Parallelism(dp=32, tp=8, ep=64, etp=1), dims)
    assert len(spans["ep"]) == 2  # 8 GPUs per node, 8 nodes
    op = _comm("moe.dispatch", "all_to_all", "ep", 64e6)
    limited = dataclasses.replace(op, outer_share=0.5)
    whole, half = (dict(time_ops(hw, dims, spans, [o]).comm_s) for o in (op, limited))
    ib = dims[1].name
    assert set(whole) == set(half) == {ib}
    assert half[ib] < whole[ib]
    moe_spec = next(spec for spec, _ in model.layer_groups() if spec.moe is not None)
    shape = LayerShape(1, 4096, 4096, 8, True, 1, 64, etp=1)
    dispatch = next(o for o in build_layer(moe_spec, hw, shape).forward if o.name == "moe.dispatch")
    assert dispatch.outer_share == 4 / 8


@needs_models
def test_rapid_run_prints_the_models_name_and_counts(capsys):
    from sweep.cli import main
    path = MODELS / "deepseek-ai--DeepSeek-V3.json"
    argv = ["run", "--model", str(path), "--hardware", "h100-sxm5-80gb", "--gpus", "16", "--tp", "8", "--pp", "2",
            "--mode", "infer", "--batch", "4", "--prompt", "1024", "--decode", "16"]
    assert main(argv) == 0
    header = capsys.readouterr().out.split(" on ")[0]
    assert header.split()[0] == "DeepSeek-V3" and "671.03 B parameters, 37.55 B active" in header
    assert "11.61 B in 1 MTP module" in header


@needs_models
def test_a_hybrid_models_served_requests_hold_their_recurrent_state_beside_their_tokens():
    from core.serving.engines import engine_spec
    from core.serving.service import Pool, state_tokens

    nemotron, engine = load("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), engine_spec("vllm")
    ratio = state_bytes_per_sequence(nemotron, 2) / kv_cache_bytes_per_token(nemotron, 2)  # tokens' worth of state
    tokens = state_tokens(nemotron, Pool(), engine, 2)
    assert tokens % engine.kv_block_tokens == 0 and tokens - engine.kv_block_tokens < ratio <= tokens
    assert state_tokens(core.load_model("llama3.1-8b"), Pool(), engine, 2) == 0


@needs_models
def test_an_inference_engine_loads_no_mtp_module():
    from core.model.memory import served_weight_bytes

    hw, par = core.load_hardware("h200-sxm-141gb"), Parallelism(tp=8)
    deepseek = load("deepseek-ai--DeepSeek-V3")
    assert served_weight_bytes(deepseek, hw, par) == served_weight_bytes(dataclasses.replace(deepseek, mtp_layers=0), hw, par)


@needs_models
def test_rapid_run_serves_deepseek_on_tp_8_ep_8_and_names_the_model(capsys):
    import json

    from sweep.cli import main
    argv = ["run", "--model", str(MODELS / "deepseek-ai--DeepSeek-V3.json"), "--hardware", "h200-sxm-141gb",
            "--mode", "serve", "--tp", "8", "--ep", "8", "--isl", "256", "--osl", "8", "--concurrency", "4",
            "--requests", "8", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["model"] == "DeepSeek-V3" and record["parameters"] == deepseek_parameters() and record["feasible"]


def deepseek_parameters() -> int:
    return load("deepseek-ai--DeepSeek-V3").total_params()


@needs_models
def test_a_deepseek_config_of_no_moe_layer_is_refused(tmp_path):
    import json

    path = tmp_path / "dense.json"
    path.write_text(json.dumps({**json.loads((MODELS / "deepseek-ai--DeepSeek-V3.json").read_text()),
                                "first_k_dense_replace": 100}))
    with pytest.raises(core.SpecError, match="first_k_dense_replace' = 100: expected fewer than num_hidden_layers"):
        core.load_model(path)
