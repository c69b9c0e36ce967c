"""Training defaults of current Megatron-Core / NeMo recipes, each of which a knob turns off;
ZeRO-3 keeping parameters gathered across micro-batches; the allocator's fixed segments
(issue 21, points 6 and 7)."""
import pytest

import core
from core.model.loader import load_hardware
from core.model.memory import FIXED_SEGMENT_FRAGMENTATION, FRAGMENTATION, RUNTIME_RESERVE_BYTES
from sweep.cli import build_parser
from sweep.cli.run import parse_config

H100 = load_hardware("h100-sxm5-80gb")
MODEL = core.load_model("llama3.1-8b")


def test_the_defaults_are_the_distributed_optimizer_with_overlap_and_sp_with_tp():
    par = core.Parallelism(tp=2, dp=4)
    assert (par.zero, par.overlap_grad_reduce, par.overlap_param_gather, par.training_sp) == (1, True, True, True)
    assert core.Parallelism(dp=8).training_sp is False  # nothing to split at tp 1
    assert core.Parallelism(tp=2, sp=False).training_sp is False
    assert core.Parallelism(zero=0).overlap_param_gather is False  # no shards to gather
    assert core.Parallelism(zero=3).overlap_param_gather is True  # ZeRO-3 prefetches each layer's parameters


def run_args(*extra):
    parser = build_parser("run")
    return parser.parse_args(["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
                              "--tp", "2", *extra])


def test_rapid_run_takes_the_defaults_and_each_flag_turns_one_off():
    par = parse_config(run_args())[2]
    assert (par.sp, par.zero, par.overlap_grad_reduce, par.overlap_param_gather) == (True, 1, True, True)
    par = parse_config(run_args("--no-sp", "--zero", "0", "--no-overlap-grad-reduce"))[2]
    assert (par.sp, par.zero, par.overlap_grad_reduce, par.overlap_param_gather) == (False, 0, False, False)
    par = parse_config(run_args("--no-overlap-param-gather"))[2]
    assert (par.zero, par.overlap_param_gather) == (1, False)


def test_inference_takes_the_defaults_without_sequence_parallelism():
    model, work = core.load_model("llama2-7b"), core.InferWorkload(4, 256, 8)
    assert core.check_layout(model, H100, core.Parallelism(tp=2), work, 2) is None
    default = core.evaluate(model, H100, core.Parallelism(tp=2), work, 2)["step_time_s"]
    assert default == core.evaluate(model, H100, core.Parallelism(tp=2, sp=False), work, 2)["step_time_s"]


def zero3(micro_batches: int, reshard: bool, dp: int = 8):
    par = core.Parallelism(dp=dp, zero=3, reshard_after_forward=reshard)
    work = core.TrainWorkload(global_batch=dp * micro_batches, seq=2048)
    return core.evaluate(MODEL, H100, par, work, dp, time_infeasible=True)


def test_kept_parameters_are_gathered_once_per_step_instead_of_twice_per_micro_batch():
    # per layer and micro-batch, g for a gather and s for a scatter: resharded L m (2 g + s),
    # kept L g + L m s; their difference L g (2 m - 1) is 1 and 3 times L g at m = 1 and 2
    one = zero3(1, True)["detail"]["dp_comm_total_s"] - zero3(1, False)["detail"]["dp_comm_total_s"]
    two = zero3(2, True)["detail"]["dp_comm_total_s"] - zero3(2, False)["detail"]["dp_comm_total_s"]
    assert one > 0 and two == pytest.approx(3 * one, rel=1e-9)
    assert zero3(4, False)["step_time_s"] <= zero3(4, True)["step_time_s"]


def test_zero3_without_its_overlaps_waits_for_all_its_traffic():
    def dp_traffic(gather: bool, scatter: bool) -> tuple:
        par = core.Parallelism(dp=8, zero=3, overlap_param_gather=gather, overlap_grad_reduce=scatter)
        record = core.evaluate(MODEL, H100, par, core.TrainWorkload(global_batch=16, seq=2048), 8)
        return record["breakdown"]["comm_nvlink_s"], record["detail"]["dp_comm_total_s"]  # dp 8: NVLink is DP's alone

    both, total = dp_traffic(True, True)
    no_prefetch, no_scatter, neither = dp_traffic(False, True)[0], dp_traffic(True, False)[0], dp_traffic(False, False)[0]
    assert neither == pytest.approx(total)  # nothing hidden: every gather and scatter exposed
    assert both < no_prefetch < neither and both < no_scatter < neither


def test_kept_parameters_hold_the_stages_gathered_weights_beside_their_shard():
    par = core.Parallelism(dp=8, zero=3)
    work = core.TrainWorkload(global_batch=8, seq=2048)
    resharded = core.estimate_memory(MODEL, H100, par, work)
    kept = core.estimate_memory(MODEL, H100, core.Parallelism(dp=8, zero=3, reshard_after_forward=False), work)
    assert kept.weights_bytes == pytest.approx(9 * resharded.weights_bytes)  # full copy + the 1/8 shard
    assert "gathered copy kept all step" in kept.describe()


def test_fixed_allocator_segments_count_their_fragmentation():
    work, par = core.TrainWorkload(global_batch=8, seq=4096), core.Parallelism(dp=8)
    expandable = core.estimate_memory(MODEL, H100, par, work)
    fixed = core.estimate_memory(MODEL, H100, core.Parallelism(dp=8, expandable_segments=False), work)
    assert fixed.allocated_bytes == expandable.allocated_bytes
    assert expandable.reserved_bytes == pytest.approx(RUNTIME_RESERVE_BYTES + FRAGMENTATION * expandable.allocated_bytes)
    assert fixed.reserved_bytes == pytest.approx(RUNTIME_RESERVE_BYTES + 0.42 * fixed.allocated_bytes)
    # the bound the one measured run sets: 58.8 GB allocated went out of memory on 81,559 MiB
    assert RUNTIME_RESERVE_BYTES + (1 + FIXED_SEGMENT_FRAGMENTATION) * 58.8e9 > 81559 * 2**20
    assert RUNTIME_RESERVE_BYTES + (1 + FIXED_SEGMENT_FRAGMENTATION - 0.01) * 58.8e9 < 81559 * 2**20
