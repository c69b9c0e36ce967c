"""The astra backends: core's graphs replayed on the compiled network simulator."""
import dataclasses

import pytest
import yaml

import core
from core.model.layout import chunk_layers
from core.replay.network import rank_groups

HIER, FLAT = "astra-hierarchical", "astra-flattened"


def step_of(model, hw, par, work, backend="analytical"):
    return core.evaluate(model, hw, par, work, par.gpus, backend=backend)["step_time_s"]


def step(model_name, hw, par, work, backend="analytical"):
    return step_of(core.load_model(model_name), hw, par, work, backend)


def test_flattened_and_hierarchical_agree_on_four_gpu_data_parallel_training(a100):
    par = core.Parallelism(dp=4, zero=1, recompute="full")
    work = core.TrainWorkload(global_batch=16, seq=4096)
    flat, hier = step("llama2-7b", a100, par, work, FLAT), step("llama2-7b", a100, par, work, HIER)
    assert flat == pytest.approx(hier, rel=0.01)


@pytest.mark.parametrize("model, par, work", [
    ("llama2-7b", core.Parallelism(dp=4, zero=1, recompute="full"), core.TrainWorkload(16, 4096)),
    ("llama2-7b", core.Parallelism(tp=8, sp=True, recompute="selective"), core.TrainWorkload(8, 4096)),
    ("llama2-13b", core.Parallelism(tp=8, pp=2, sp=True, recompute="selective"), core.TrainWorkload(16, 4096)),
    ("llama3.1-70b", core.Parallelism(tp=8, pp=8, sp=True, recompute="selective"), core.TrainWorkload(64, 4096)),
    ("gpt-22b", core.Parallelism(tp=8, sp=True, micro_batch=4, recompute="full"), core.TrainWorkload(4, 2048)),
])
def test_without_shared_links_the_replay_matches_the_closed_forms(a100, model, par, work):
    assert step(model, a100, par, work, HIER) == pytest.approx(step(model, a100, par, work), rel=0.03)


def communicators(par, axis):
    groups = rank_groups(par)
    return sorted({groups.members[g] for g in groups.of[axis]})


def test_expert_gradients_reduce_over_the_ranks_holding_the_same_experts():
    # dp 4 with ep 2: ranks 0,1 split the experts (ep = dp mod 2), ranks 0 and 2 hold the same half
    par = core.Parallelism(dp=4, ep=2)
    assert communicators(par, "ep") == [(0, 1), (2, 3)]
    assert communicators(par, "edp") == [(0, 2), (1, 3)]
    assert communicators(par, "dp") == [(0, 1, 2, 3)]
    assert communicators(core.Parallelism(dp=4), "edp") == [(0, 1, 2, 3)]  # no expert parallelism
    # Megatron-Core's expert grid: ep takes the context-parallel ranks first
    assert communicators(core.Parallelism(cp=2, dp=2, ep=4), "ep") == [(0, 1, 2, 3)]
    assert communicators(core.Parallelism(tp=2, cp=4, dp=2, ep=4), "ep") == [(0, 2, 4, 6), (1, 3, 5, 7),
                                                                             (8, 10, 12, 14), (9, 11, 13, 15)]


def test_folded_experts_are_laid_out_afresh_over_a_stage():
    # MoE parallel folding: tp 2 for attention, experts on etp 1 x ep 4 over the same 8 ranks
    par = core.Parallelism(tp=2, dp=4, ep=4, etp=1)
    assert communicators(par, "tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert communicators(par, "ep") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert communicators(par, "edp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert communicators(par, "etp") == [(r,) for r in range(8)]


def test_a_folded_moe_replay_matches_the_closed_forms():
    h100 = core.load_hardware("h100-sxm5-80gb")
    model, work = core.load_model("mixtral-8x7b"), core.TrainWorkload(16, 4096)
    par = core.Parallelism(tp=2, dp=8, ep=8, etp=1, sp=True, zero=1, recompute="full", overlap_grad_reduce=False, overlap_param_gather=False)
    replay, closed = (core.evaluate(model, h100, par, work, 16, backend=backend, time_infeasible=True)["step_time_s"]
                      for backend in (HIER, "analytical"))
    assert replay == pytest.approx(closed, rel=0.01)


def test_an_moe_replay_matches_the_closed_forms_with_expert_gradients_across_nodes(a100):
    # 16 GPUs, ep 4 inside a node: each expert shard's 4 replicas sit 4 ranks apart, on two nodes,
    # and the gradients are reduced after the backward (no contention with the pipeline)
    model, par = core.load_model("mixtral-8x7b"), core.Parallelism(dp=16, ep=4, zero=1, recompute="full",
                                                                   overlap_grad_reduce=False, overlap_param_gather=False)
    work = core.TrainWorkload(global_batch=32, seq=4096)
    replay, closed = (core.evaluate(model, a100, par, work, 16, backend=backend, time_infeasible=True)["step_time_s"]
                      for backend in (HIER, "analytical"))
    assert replay == pytest.approx(closed, rel=0.03)


def test_where_gradients_and_activations_share_nics_the_replay_is_never_faster(a100):
    # Gradients reduced during the backward (Megatron-Core's overlap) share the NICs with
    # the pipeline's activations; the closed forms assume they do not contend.
    par = core.Parallelism(tp=8, pp=4, dp=2, sp=True, recompute="selective", overlap_grad_reduce=True)
    work = core.TrainWorkload(global_batch=64, seq=4096)
    analytical = step("llama3.1-70b", a100, par, work)
    assert step("llama3.1-70b", a100, par, work, HIER) >= analytical
    assert step("llama3.1-70b", a100, par, work, FLAT) >= analytical


def ring_hardware(tmp_path, faults=()):
    """Eight GPUs on a bidirectional ring, optionally with degraded links."""
    data = yaml.safe_load(open("core/model/presets/gpus/a100-sxm4-80gb.yaml"))
    data["network"] = [{"name": "ring", "topology": "ring", "size": 8, "link_bandwidth": "25 GB/s",
                        "latency": "2 us"}]
    data["faults"] = [{"link": list(link), "factor": factor} for link, factor in faults]
    path = tmp_path / f"ring{len(list(tmp_path.glob('ring*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return core.load_hardware(path)


def test_a_soft_fault_on_a_pipeline_link_slows_the_step_and_one_on_an_idle_link_does_not(tmp_path):
    # Eight pipeline stages on ring NPUs 0..7: activations flow 0->1->...->7, gradients back;
    # the wrap-around link between 7 and 0 carries nothing.
    par = core.Parallelism(pp=8, recompute="full")
    work = core.TrainWorkload(global_batch=16, seq=2048)
    healthy = step("llama2-7b", ring_hardware(tmp_path), par, work, HIER)
    degraded = step("llama2-7b", ring_hardware(tmp_path, [((3, 4), 0.05)]), par, work, HIER)
    idle = step("llama2-7b", ring_hardware(tmp_path, [((7, 0), 0.05)]), par, work, HIER)
    assert degraded > healthy * 1.001
    assert idle == pytest.approx(healthy, rel=1e-12)


def test_astra_records_name_the_busiest_links(a100):
    record = core.evaluate(core.load_model("llama2-7b"), a100, core.Parallelism(dp=4, zero=1, recompute="full"), core.TrainWorkload(8, 2048),
                           4, backend=HIER)
    top = record["busiest_links"][0]
    assert top["dim"] == "nvlink" and 0 < top["utilisation"] <= 1
    parts = sum(v for k, v in record["breakdown"].items())
    assert parts == pytest.approx(record["step_time_s"], rel=1e-9)


def test_an_inference_pipeline_with_uneven_stages_runs_every_layer(a100):
    model = dataclasses.replace(core.load_model("llama2-7b"), layers=30)  # stages of 7, 8, 8, 7
    work = core.InferWorkload(batch=2, prompt=256, decode=8)
    closed = core.evaluate(model, a100, core.Parallelism(pp=4), work, 4)["step_time_s"]
    assert step_of(model, a100, core.Parallelism(pp=4), work, FLAT) == pytest.approx(closed, rel=0.01)


@pytest.mark.parametrize("backend", [HIER, FLAT])
def test_inference_requests_replay_prefill_and_every_decode_step(a100, backend):
    model = core.load_model("llama2-13b")
    par = core.Parallelism(tp=4, pp=2)
    work = core.InferWorkload(batch=1, prompt=200, decode=50)
    analytical = core.evaluate(model, a100, par, work, 8)
    replayed = core.evaluate(model, a100, par, work, 8, backend=backend)
    assert replayed["step_time_s"] == pytest.approx(analytical["step_time_s"], rel=0.03)
    assert replayed["ttft_s"] < replayed["step_time_s"]


@pytest.mark.parametrize("global_batch", [16, 12])  # four and three groups of pp micro-batches
def test_the_interleaved_schedule_replays_with_the_bubble_the_closed_form_gives(a100, global_batch):
    # 40 layers on pp 4: 1F1B, then two chunks of 5 layers per stage (Megatron-Core's order)
    work = core.TrainWorkload(global_batch, 4096)
    plain = core.Parallelism(tp=4, pp=4, sp=True, recompute="selective")
    interleaved = core.Parallelism(tp=4, pp=4, sp=True, recompute="selective", schedule="interleaved",
                                   virtual_stages=2)
    for backend in (HIER, FLAT):
        replayed = step("llama2-13b", a100, interleaved, work, backend)
        assert replayed == pytest.approx(step("llama2-13b", a100, interleaved, work), rel=0.01)
        assert replayed < step("llama2-13b", a100, plain, work, backend)


def test_uneven_stages_and_chunks_replay_as_megatron_splits_them(a100):
    # 30 layers on pp 4: stages (7, 8, 8, 7); interleaved over 2 chunks, the embedding and the loss
    # count as layers, so the first and last chunks hold one layer fewer
    model = dataclasses.replace(core.load_model("llama2-7b"), layers=30)
    interleaved = core.Parallelism(pp=4, recompute="full", schedule="interleaved", virtual_stages=2)
    assert chunk_layers(30, interleaved) == ((3, 4), (4, 4), (4, 4), (4, 3))
    work = core.TrainWorkload(16, 2048)
    for par in (core.Parallelism(pp=4, recompute="full"), interleaved):
        closed = core.evaluate(model, a100, par, work, 4)["step_time_s"]
        for backend in (HIER, FLAT):
            assert step_of(model, a100, par, work, backend) == pytest.approx(closed, rel=0.03)
    # a heavy first stage (14, 6, 6, 6): the closed form's 1F1B waits only for the first gradient too
    heavy_first = core.Parallelism(pp=4, recompute="full", first_stage_layers=14, last_stage_layers=6)
    assert step_of(dataclasses.replace(model, layers=32), a100, heavy_first, work, HIER) == pytest.approx(
        step_of(dataclasses.replace(model, layers=32), a100, heavy_first, work), rel=0.002)


def test_a_send_held_up_by_a_busy_peer_is_pipeline_bubble_not_traffic(a100_links):
    # two stages: stage 0's sends finish only when stage 1 can take them; what they wait is
    # the bubble the closed form counts, and only the transfer itself is communication
    model, work = core.load_model("llama2-7b"), core.TrainWorkload(8, 2048)
    par = core.Parallelism(pp=2, dp=4, recompute="full", zero=0, overlap_grad_reduce=False)
    closed, replayed = (core.evaluate(model, a100_links, par, work, 8, backend=backend)["breakdown"]
                        for backend in ("analytical", HIER))
    assert replayed["bubble_s"] == pytest.approx(closed["bubble_s"], rel=0.1)
    assert replayed["comm_nvlink_s"] == pytest.approx(closed["comm_nvlink_s"], rel=0.05)


def test_an_inference_pipelines_waits_are_the_other_stages_passes(a100):
    # two stages serve one request: what the last stage waits for is the first stage's passes
    model, par, work = core.load_model("llama2-7b"), core.Parallelism(pp=2), core.InferWorkload(8, 512, 16)
    closed, replayed = (core.evaluate(model, a100, par, work, 2, backend=backend)["breakdown"]
                        for backend in ("analytical", FLAT))
    assert "bubble_s" not in replayed
    assert replayed["compute_s"] == pytest.approx(closed["compute_s"], rel=0.01)


def test_model_chunks_megatron_would_not_split_are_left_to_the_analytical_backend(a100):
    model = dataclasses.replace(core.load_model("llama2-7b"), layers=28)  # 7 a stage, 3 chunks
    par = core.Parallelism(pp=4, recompute="full", schedule="interleaved", virtual_stages=3)
    assert chunk_layers(28, par) == ()
    with pytest.raises(core.SpecError, match="virtual_stages"):
        step_of(model, a100, par, core.TrainWorkload(16, 2048), HIER)
    # explicit first / last stages: each stage's layers shared by its chunks, or none
    assert chunk_layers(32, core.Parallelism(pp=4, schedule="interleaved", virtual_stages=2, first_stage_layers=6,
                                             last_stage_layers=6)) == ((3, 3), (5, 5), (5, 5), (3, 3))
    assert chunk_layers(32, core.Parallelism(pp=4, schedule="interleaved", virtual_stages=2, first_stage_layers=7,
                                             last_stage_layers=7)) == ()  # (7, 9, 9, 7): 7 layers in 2 chunks


def test_hierarchical_mode_says_when_a_layout_breaks_its_assumptions(a100):
    model = core.load_model("llama2-7b")
    work = core.TrainWorkload(global_batch=16, seq=2048)
    kept = core.evaluate(model, a100, core.Parallelism(tp=8, dp=2, sp=True, recompute="full"), work, 16, backend=HIER)
    broken = core.evaluate(model, a100, core.Parallelism(tp=16, sp=True, recompute="full"), work, 16, backend=HIER)
    assert kept["replay_note"] == ""
    assert broken["replay_note"].startswith("tp groups reach beyond nvlink")


def test_inference_replicas_exchange_nothing_so_their_placement_gets_no_note(a100):
    """dp in inference counts independent replicas: no traffic for the split replay to miss,
    while pipeline sends inside the first dimension still get the note."""
    model = core.load_model("llama2-7b")
    work = core.InferWorkload(batch=1, prompt=200, decode=8)
    replicas = core.evaluate(model, a100, core.Parallelism(tp=1, dp=16), work, 16, backend=HIER)
    pipeline = core.evaluate(model, a100, core.Parallelism(pp=16), work, 16, backend=HIER)
    assert replicas["replay_note"] == ""
    assert pipeline["replay_note"].startswith("pp groups use nvlink")
