"""Closed-form checks of what the published corpus needs the model to express: FP8 GEMMs,
uneven pipeline stages, data-parallel overlap, MoE routing volume, expert TP, memory reserve."""
import dataclasses

import pytest

import core
from core.model import ops
from core.model.graph import LayerShape, build_layer, routed_rows
from core.model.layout import check_layout, stage_layers
from core.model.loader import load_hardware, load_model, with_dtype
from core.model.memory import FRAGMENTATION, GiB, RUNTIME_RESERVE_BYTES, MemoryEstimate, stage_params
from core.model.ops.gemm import EXPOSED_OVERLAP
from core.model.specs import ModelSpec, MoESpec, Parallelism, TrainWorkload
from core.model.training import _exposed_overlapped, ddp_bucket_params, one_f_one_b_s, optimizer_step_s


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


def test_a_compute_bound_fp8_gemm_runs_at_the_fp8_peak(h100):
    """Each runs at its dtype's peak times its shares, plus the tail wave (2,048 tiles of
    256 x 128 on 132 SMs: 16 waves for 15.5) and the pipeline's exposed share of its HBM time."""
    fp8 = with_dtype(h100, "fp8", "test", "dtype")
    cal = fp8.calibration
    slowest_bps = h100.gpu.hbm.bandwidth_bps * min(cal.memory_efficiency, cal.stream_efficiency)
    waves = 16 / (2048 / 132)
    fp8_rate = fp8.gpu.flops("fp8") * cal.compute_efficiency * cal.step_efficiency * cal.fp8_efficiency \
        * cal.fp8_step_efficiency
    for hw, rate in ((fp8, fp8_rate), (h100, h100.gpu.flops("bf16") * cal.compute_efficiency * cal.step_efficiency)):
        kernel = ops.gemm(hw, 8192, 8192, 8192)
        floor_s = kernel.flops / rate
        assert floor_s < kernel.time_s - ops.launch_s(hw) <= floor_s * waves + EXPOSED_OVERLAP * kernel.hbm_bytes / slowest_bps


def test_fp8_keeps_activations_in_bf16_and_adds_casts(h100):
    fp8 = with_dtype(h100, "fp8", "test", "dtype")
    assert (fp8.act_dtype, fp8.act_bytes) == ("bf16", 2)
    assert ops.fp8_cast(h100, 1e6).time_s == 0.0
    assert ops.fp8_cast(fp8, 1e6, transpose=True).hbm_bytes == 1e6 * (2 + 2)


def test_uneven_stages_split_as_megatron_does():
    assert stage_layers(126, Parallelism(pp=16)) == (7,) + (8,) * 14 + (7,)  # embedding and loss count as layers
    assert stage_layers(126, Parallelism(pp=9)) == (14,) * 9
    assert stage_layers(30, Parallelism(pp=4)) == (7, 8, 8, 7)
    assert stage_layers(80, Parallelism(pp=4, first_stage_layers=17, last_stage_layers=17)) == (17, 23, 23, 17)
    assert stage_layers(80, Parallelism(pp=4, first_stage_layers=17, last_stage_layers=16)) == ()


def test_a_1f1b_pipeline_slowed_by_its_first_stage_waits_only_for_the_first_gradient():
    # stage 0: forward 2, backward 4; stage 1: 1 and 2; 4 micro-batches. Stage 0 runs F0 F1,
    # waits until 5 for the gradient of micro-batch 0 (2 + 1 + 2), then never again: 4 * 6 + 1
    assert one_f_one_b_s((2.0, 1.0), (6.0, 3.0), 4) == 25.0
    # the last stage slowest: the closed form, (micro - 1) * its pass + every stage's pass
    assert one_f_one_b_s((1.0, 2.0), (3.0, 6.0), 4) == 3 * 6.0 + 9.0


def test_llama3_405b_on_16384_gpus_with_126_layers_on_16_stages_is_legal(h100):
    model = dataclasses.replace(load_model("llama3.1-405b"), layers=126)
    par = Parallelism(dp=128, tp=8, pp=16, sp=True, zero=1)
    assert check_layout(model, h100, par, TrainWorkload(2048, 8192), 16384) is None
    record = core.evaluate(model, h100, par, TrainWorkload(2048, 8192), 16384, time_infeasible=True)
    assert record["step_time_s"] > 0


def test_dp_traffic_is_exposed_unless_the_framework_overlaps_it():
    assert _exposed_overlapped(2.0, 5.0, 0.1, 0.0, overlap=False) == 2.0
    assert _exposed_overlapped(2.0, 5.0, 0.1, 0.0, overlap=True) == pytest.approx(0.2)  # the last bucket
    assert _exposed_overlapped(2.0, 1.5, 0.1, 0.0, overlap=True) == pytest.approx(0.5)  # what the pass cannot cover
    assert _exposed_overlapped(2.0, 1.5, 0.1, 0.3, overlap=True) == pytest.approx(0.2)  # a later stage's head start
    assert ddp_bucket_params(8) == 40e6 and ddp_bucket_params(64) == 64e6


def test_overlapping_gradient_reduction_shortens_the_step():
    a100 = load_hardware("a100-sxm4-80gb")
    model, work = load_model("llama3.1-8b"), TrainWorkload(64, 4096)
    plain = core.evaluate(model, a100, Parallelism(dp=16, recompute="full", zero=1, overlap_grad_reduce=False,
                                                   overlap_param_gather=False), work, 16)
    overlapped = core.evaluate(model, a100, Parallelism(dp=16, recompute="full", zero=1, overlap_grad_reduce=True,
                                                        overlap_param_gather=True), work, 16)
    assert overlapped["step_time_s"] < plain["step_time_s"]


def _a100_stream_s(bytes_):
    """One bandwidth-bound kernel on the A100 preset: 2039 GB/s at the preset's fitted
    memory_efficiency, plus the launch and the calibrated kernel overhead."""
    a100 = load_hardware("a100-sxm4-80gb")
    return (bytes_ / (2039e9 * a100.calibration.memory_efficiency) + a100.gpu.launch_overhead_s
            + a100.calibration.kernel_overhead_s)


def test_the_optimizer_step_also_zeroes_the_whole_main_gradient_buffer():
    a100 = load_hardware("a100-sxm4-80gb")
    model = ModelSpec("dense", 2, 1024, 8, 8, 4096, 32000)
    params = stage_params(model, Parallelism())[0]
    adam_sharded = _a100_stream_s(params / 4 * 30)  # ZeRO 1 over 4 replicas: fp32 Adam on a quarter
    assert optimizer_step_s(model, a100, Parallelism(dp=4, zero=1)) == pytest.approx(
        adam_sharded + _a100_stream_s(params * 4))  # but the fp32 gradient buffer is zeroed in full
    assert optimizer_step_s(model, a100, Parallelism(dp=4, zero=2)) == pytest.approx(
        adam_sharded + _a100_stream_s(params / 4 * 4))  # ZeRO 2 shards that buffer too


def moe_model(capacity_factor=0.0):
    return ModelSpec("moe", 2, 1024, 8, 8, 4096, 32000, moe=MoESpec(8, 2, 2048, 1024, capacity_factor))


def test_moe_all_to_all_carries_top_k_copies_less_what_capacity_drops(h100):
    assert routed_rows(moe_model(), 1000) == 2000
    assert routed_rows(moe_model(0.5), 1000) == 1000
    assert routed_rows(moe_model(1.25), 1000) == 2000
    graph = build_layer(moe_model(), h100, LayerShape(1, 1000, 1000, 1, False, 1, 4))
    dispatch = next(op for op in graph.forward if op.name == "moe.dispatch")
    assert dispatch.bytes_ == 2000 * 1024 * 2


def test_expert_tensor_parallelism_splits_expert_weights_by_etp_not_tp(h100):
    model = moe_model()
    per_expert = 3 * 1024 * 2048
    dense = stage_params(model, Parallelism(dp=4, tp=2, ep=4))[0]
    folded = stage_params(model, Parallelism(dp=4, tp=2, ep=4, etp=1))[0]
    assert folded - dense == pytest.approx(2 * 2 * per_expert / 2)  # 2 local experts, whole instead of halved
    assert "ep*etp" in check_layout(model, h100, Parallelism(dp=1, tp=2, ep=4, etp=1), TrainWorkload(8, 1000), 2)


def test_memory_counts_the_allocator_reserve():
    estimate = MemoryEstimate(10 * GiB, 0, 0, 0, 0, 0, 80 * GiB, 0)
    assert estimate.reserved_bytes == RUNTIME_RESERVE_BYTES + FRAGMENTATION * 10 * GiB
    assert estimate.peak_bytes == 10 * GiB + estimate.reserved_bytes
    assert estimate.by_kind()["reserved"] == estimate.reserved_bytes


def test_nemo_sft_rows_run_interleaved_with_tp_overlap():
    """The NeMo 24.07 launcher's 70B SFT example (examples/peft/llama/h100/70b_2node.sh) sets
    ub_tp_comm_overlap, overlap_p2p_comm and vp 20 on pp 4; NeMo 2.0's fine-tuning script,
    which turns TP overlap off, came later."""
    from core.validation import corpus
    from core.validation.published import layout_for

    rows = {c.case_id: c for c in corpus.published_cases("h100_dense")}
    par = layout_for(rows["NEMO2407-FT-SFT-LLAMA2-70B"], training=True)
    assert (par.virtual_stages, par.schedule, par.overlap_tp_comm, par.overlap_p2p_comm) == \
        (20, "interleaved", True, True)
    assert not layout_for(rows["NEMO2407-FT-SFT-LLAMA2-7B"], training=True).overlap_tp_comm  # tp 1


def test_dgxc_nemotron_340b_sends_wait_as_its_yaml_says_while_gpt3_overlaps():
    """dgxc v24.11.1's nemotron4-340b-synth.yaml sets overlap_p2p_comm False (batch_p2p_comm True)
    under vp 12; its gpt3_175b_hydra.yaml keeps the overlap, Megatron's default under vp > 1."""
    from core.validation import corpus
    from core.validation.published import layout_for

    rows = {c.case_id: c for c in corpus.published_cases("h100_dense")}
    nemotron = rows["DGXC2411-nemotron4_340b-FP8-128"]
    assert nemotron.layout["overlap_p2p_comm"] is False
    assert "overlap_p2p_comm False" in nemotron.note
    assert layout_for(nemotron, training=True).overlap_p2p_comm is False
    gpt3 = rows["DGXC2411-GPT175B-FP8-128"]
    assert gpt3.layout["overlap_p2p_comm"] is None
    assert layout_for(gpt3, training=True).overlap_p2p_comm is True
