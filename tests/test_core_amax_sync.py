"""FP8 delayed scaling's amax all-reduces (core.model.training.amax_sync): two per model chunk
per micro-batch, each its latency over the tp x cp x dp group plus, over several nodes, the
wait for the latest rank."""
import dataclasses
import math

import pytest

import core
from core.model.loader import with_dtype
from core.model.training import amax_sync, train_step

MODEL = core.load_model("llama3.1-8b")
WORK = core.TrainWorkload(global_batch=64, seq=2048)  # dp 16, micro-batch 1: 4 micro-batches


def h100(dtype: str, recipe: str = "", skew_s: float = 0.0):
    hw = with_dtype(core.load_hardware("h100-sxm5-80gb"), dtype, "test", "dtype", recipe)
    return dataclasses.replace(hw, calibration=dataclasses.replace(hw.calibration, sync_skew_s=skew_s))


def test_only_delayed_scaling_reduces_amaxes():
    par = core.Parallelism(dp=16)
    assert amax_sync(MODEL, h100("bf16"), par, WORK, 16) == {}
    assert amax_sync(MODEL, h100("fp8", "current"), par, WORK, 16) == {}
    assert amax_sync(MODEL, h100("fp8", "delayed"), par, WORK, 16)


def test_a_group_inside_one_node_waits_for_no_skew():
    par = core.Parallelism(dp=8)  # 8 ranks, one DGX node
    work = core.TrainWorkload(global_batch=32, seq=2048)
    assert amax_sync(MODEL, h100("fp8", "delayed", 1e-3), par, work, 8) == \
        amax_sync(MODEL, h100("fp8", "delayed", 0.0), par, work, 8)


def test_over_two_nodes_each_reduction_waits_skew_times_sqrt_2_ln_2():
    par = core.Parallelism(dp=16)  # two nodes of 8
    without = amax_sync(MODEL, h100("fp8", "delayed", 0.0), par, WORK, 16)
    skewed = amax_sync(MODEL, h100("fp8", "delayed", 100e-6), par, WORK, 16)
    # 4 micro-batches x 1 chunk x (forward + backward) = 8 reductions of 100 us x sqrt(2 ln 2) more
    assert skewed["ib"] - without["ib"] == pytest.approx(8 * 100e-6 * math.sqrt(2 * math.log(2)))
    assert skewed["nvlink"] == without["nvlink"]


def test_virtual_stages_double_the_regions_and_the_step_pays_them():
    hw = h100("fp8", "delayed", 100e-6)
    one = core.Parallelism(dp=16, pp=4)  # dp over two nodes
    two = dataclasses.replace(one, schedule="interleaved", virtual_stages=2)
    work = core.TrainWorkload(global_batch=64, seq=2048)
    # the same skew per region, twice the regions (each chunk half the layers, latency alike)
    skew_share = lambda par: amax_sync(MODEL, hw, par, work, 64)["ib"] - amax_sync(
        MODEL, h100("fp8", "delayed", 0.0), par, work, 64)["ib"]
    assert skew_share(two) == pytest.approx(2 * skew_share(one))
    with_skew, _, _ = train_step(MODEL, hw, two, work, 64)
    without, _, _ = train_step(MODEL, h100("fp8", "delayed", 0.0), two, work, 64)
    assert with_skew - without == pytest.approx(skew_share(two))
