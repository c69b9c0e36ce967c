"""Closed-form checks of the Megatron-Core MoE mechanisms the model charges (the token
dispatcher's permutations and routing kernels, expert data-parallel gradient traffic) and of
the FLOP count the MoE paper's MFU uses."""
import dataclasses

import pytest

import core
from core.validation import corpus, published, suites as validation
from core.model import ops
from core.model.collectives import collective_time
from core.model.graph import ROUTING_KERNELS, LayerShape, build_layer
from core.model.layout import group_spans
from core.model.loader import load_hardware
from core.model.memory import stage_param_parts
from core.model.specs import ModelSpec, MoESpec, Parallelism, TrainWorkload
from core.model.training import model_flops


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


def moe_model():
    return ModelSpec("moe", 2, 1024, 8, 8, 4096, 32000, moe=MoESpec(8, 2, 2048, 0, 1.0))


def test_dispatcher_moves_every_routed_copy_through_permute_sort_and_unpermute(h100):
    model = moe_model()  # 8 experts, top 2, hidden 1024, BF16
    graph = build_layer(model, h100, LayerShape(1, 1000, 1000, 1, False, 1, 4))  # ep 4: 2 local experts
    forward = {op.name: op for op in graph.forward}
    copies, tokens = 1000 * 2 * 1024 * 2, 1000 * 1024 * 2  # bytes of the top-2 copies, of the tokens
    hbm_bps = h100.gpu.hbm.bandwidth_bps * h100.calibration.memory_efficiency
    launch_s = ops.pointwise(h100, 0.0).time_s
    assert forward["moe.permute"].time_s == pytest.approx(2 * copies / hbm_bps + launch_s)  # gather: read, write
    assert forward["moe.sort_chunks"].time_s == pytest.approx(2 * copies / hbm_bps + launch_s)
    # weight by probability (read, write), scatter-add (read, accumulate) into zeroed tokens
    assert forward["moe.unpermute"].time_s == pytest.approx((4 * copies + tokens) / hbm_bps + launch_s)
    assert forward["moe.routing"].time_s == pytest.approx(ROUTING_KERNELS[0] * launch_s)
    one_expert_each = build_layer(model, h100, LayerShape(1, 1000, 1000, 1, False, 1, 8))
    assert "moe.sort_chunks" not in {op.name for op in one_expert_each.forward}  # nothing to regroup


def test_routing_and_permutations_keep_indices_probabilities_and_the_returned_copies(h100):
    model = moe_model()  # 8 experts, top 2, capacity factor 1, hidden 1024, BF16
    graph = build_layer(model, h100, LayerShape(1, 1000, 1000, 1, False, 1, 4))  # 1000 tokens, 2000 copies
    saved = {op.name: op.saved_bytes for op in graph.forward}
    # FP32 aux-loss softmax over 8 experts; top-2 int64 indices and FP32 probabilities; bool capacity mask
    assert saved["moe.routing"] == 1000 * (8 * 4 + 2 * (8 + 4) + 8 * 1)
    assert saved["moe.permute"] == 2000 * 8  # the gather's int64 indices
    # the 2000 BF16 copies back from the experts (1024 wide) and their BF16 probabilities; masked_select's
    # BF16 input and its bool mask, 8 experts x 1000 tokens
    assert saved["moe.unpermute"] == 2000 * (1024 + 1) * 2 + 1000 * 8 * (2 + 1)
    assert saved["moe.sort_chunks"] == 0  # split and cat keep nothing


def test_grouped_expert_gemm_launches_one_gemm_per_local_expert(h100):
    model = moe_model()  # expert FFN 2048, SwiGLU: the up projection is 2 x 2048 wide
    graph = build_layer(model, h100, LayerShape(1, 1000, 1000, 1, False, 1, 2))  # ep 2: 4 local experts
    up = next(op for op in graph.forward if op.name == "expert_up")
    launch_s = ops.pointwise(h100, 0.0).time_s
    assert up.time_s == pytest.approx(ops.gemm(h100, 500, 4096, 1024, 4).time_s + 3 * launch_s)


def test_expert_data_parallel_group_is_what_expert_groups_leave_of_the_data_ranks(h100):
    dims = h100.dims_for(128)  # 16 nodes of 8
    # tp 2, then ep 4 inside dp 8: the 8 ranks of a node hold 8 different expert shards,
    # the same shards sit in the next node over
    assert group_spans(Parallelism(tp=2, dp=8, pp=8, ep=4), dims)["edp"] == ((1, 2.0),)
    # folded: etp 1, ep 8 over the node's 8 ranks, again one copy per node pair
    assert group_spans(Parallelism(tp=2, dp=8, pp=8, ep=8, etp=1), dims)["edp"] == ((1, 2.0),)
    # ep 2 inside a node of tp 2 x dp 4: each shard on 2 ranks of the node, times the 2 nodes
    assert group_spans(Parallelism(tp=2, dp=8, pp=8, ep=2), dims)["edp"] == ((0, 2.0), (1, 2.0))
    # ep 8 with etp 1 over tp 2 x dp 4 of one node: every rank holds other experts
    assert group_spans(Parallelism(tp=2, dp=4, ep=8, etp=1), h100.dims_for(8))["edp"] == ()


def test_experts_spread_over_every_data_rank_leave_only_dense_gradients_to_reduce(h100):
    model, dims = moe_model(), h100.dims_for(8)
    par = Parallelism(dp=8, ep=8, zero=1)  # one expert per rank: no expert has a replica
    record = core.evaluate(model, h100, par, TrainWorkload(global_batch=8, seq=1024), 8)
    dense, expert = stage_param_parts(model, par)[0]
    assert expert == 2 * 3 * 1024 * 2048  # two layers of one whole expert each
    span = group_spans(par, dims)["dp"]
    expected = (sum(collective_time(h100, dims, "reduce_scatter", dense * 4, span).values())  # FP32 gradients
                + sum(collective_time(h100, dims, "all_gather", dense * 2, span).values()))  # BF16 weights
    assert record["detail"]["dp_comm_total_s"] == pytest.approx(expected)


def test_flop_count_has_the_output_layer_once_and_no_embedding_lookup():
    model, work = moe_model(), TrainWorkload(global_batch=2, seq=1024)
    b, s, layers, h, vocab = 2, 1024, 2, 1024, 32000
    # Megatron-LM's num_floating_point_operations: 12 B s L h^2 times (attention with its
    # causal-halved score term, top-2 SwiGLU experts of 2048, logit)
    megatron = 12 * b * s * layers * h * h * ((1 + 1 + s / h / 2) + 2048 / h * 2 * 1.5
                                                + vocab / (2 * layers * h))
    router_and_norms = 6 * b * s * layers * (h * 8 + 2 * h)  # weights Megatron's formula leaves out
    counted = model_flops(model, work, 0.5)
    assert counted == pytest.approx(megatron + router_and_norms, rel=1e-12)
    tied = dataclasses.replace(model, tied_embeddings=True)  # one table, looked up and multiplied
    assert model_flops(tied, work, 0.5) == pytest.approx(counted, rel=1e-12)


def test_step_overhead_in_micro_batches_from_two_step_times():
    # t = 2 s per micro-batch + 14 s: 32 micro-batches take 78 s, 128 take 270 s
    assert corpus.step_overhead_micro_batches(32, 128, 78 / 270) == pytest.approx(7.0)
    assert corpus.step_overhead_micro_batches(32, 128, 64 / 256) == pytest.approx(0.0)  # no overhead


def test_moe_paper_rows_run_one_layer_per_virtual_stage_unless_the_tables_show_a_1f1b_bubble():
    cases = {c.case_id: c for c in corpus.published_cases("moe")}
    par = published.layout_for(cases["PF-T3-mixtral_8x22b-mcore"], training=True)
    assert (par.pp, par.virtual_stages, par.schedule) == (8, 56 // 8, "interleaved")
    assert par.overlap_p2p_comm  # Megatron-LM's default under the interleaved schedule
    # Mixtral-G8T8 MCore: 17.1 % MFU at global batch 256, 19.8 % at 1024 on the same 128 GPUs
    # (dp 8: 32 and 128 micro-batches) leave 7.1 micro-batches' worth per step, pp - 1 = 7
    assert corpus.step_overhead_micro_batches(32, 128, (256 / 0.171) / (1024 / 0.198)) == pytest.approx(7.1, abs=0.05)
    for case_id in ("PF-T3-mixtral_g8t8-mcore", "PF-T4-mixtral_g8t8-mcore-1024"):
        assert published.layout_for(cases[case_id], training=True).schedule == "1f1b"


def test_a_table_4_cell_that_cannot_have_run_as_printed_is_shown_but_not_counted():
    # Llama3-8x70B folded (tp 8, pp 16, ep 8) at the printed 128 GPUs: dp 1 leaves each rank its
    # experts' whole FP32 optimizer state, which does not fit; Table 3 ran the layout at 256
    _, verdicts = validation.published_cases("moe")
    doubtful = [v for v in verdicts if v.doubt]
    assert [v.case for v in doubtful] == ["moe PF-T4-llama3_8x70b-fold-128"]
    assert not doubtful[0].predicted_feasible and not doubtful[0].disagrees
    assert "Table 3 ran" in doubtful[0].doubt
