"""Inference engines' own all-reduce (calibration.engine_allreduce): one-shot for small messages,
two-shot for larger ones, NCCL's ring where that is faster still, and only inside one NVLink
domain; serving's tensor-parallel decode runs it, training keeps NCCL's."""
import pytest

from core.errors import SpecError
from core.model import ops
from core.model.collectives import collective_time, custom_all_reduce_s, engine_all_reduce_s
from core.model.graph import build_decode_layer
from core.model.layout import group_spans
from core.model.loader import load_hardware, load_model
from core.model.specs import EngineAllReduce, Parallelism
from core.serving.iteration import IterationModel

SPEC = EngineAllReduce(floor_s=2e-6, per_peer_s=0.1e-6, bandwidth_bps=200e9)
H200 = ops.at_kernel_rates(load_hardware("h200-sxm-141gb"))


def _span(hw, gpus):
    dims = hw.dims_for(gpus)
    return dims, group_spans(Parallelism(tp=gpus), dims)["tp"]


def test_a_small_message_goes_one_shot_and_a_large_one_two_shot():
    """8 GPUs start in 2 + 7 x 0.1 = 2.7 us. 64 KiB one-shot: each reads its 7 peers' buffers,
    7 x 65,536 B at 200 GB/s, 2.29 us more (two-shot would pay the start twice, 5.97 us). 4 MiB
    two-shot: 5.4 us and 2 x 7/8 x 4 MiB at 200 GB/s, 36.7 us (one-shot 149.5 us)."""
    assert custom_all_reduce_s(SPEC, 8, 65536) == pytest.approx(2.7e-6 + 7 * 65536 / 200e9)
    assert custom_all_reduce_s(SPEC, 8, 4 * 2**20) == pytest.approx(5.4e-6 + 2 * 7 / 8 * 4 * 2**20 / 200e9)


def test_the_engine_takes_its_own_kernel_only_where_it_beats_nccls_ring():
    dims, span = _span(H200, 8)
    small = engine_all_reduce_s(H200, dims, "trtllm", 65536, span)
    own = custom_all_reduce_s(H200.calibration.allreduce_of("trtllm"), 8, 65536)
    assert small == {dims[0].name: pytest.approx(own)}
    assert own < sum(collective_time(H200, dims, "all_reduce", 65536, span).values()) / 3
    large = 512 * 2**20
    assert engine_all_reduce_s(H200, dims, "trtllm", large, span) == collective_time(H200, dims, "all_reduce",
                                                                                        large, span)
    assert engine_all_reduce_s(H200, dims, "", 65536, span) == collective_time(H200, dims, "all_reduce", 65536, span)


def test_a_group_beyond_one_nvlink_domain_all_reduces_with_nccl():
    dims, span = _span(H200, 16)  # two DGX H200 nodes
    assert len(span) == 2
    assert engine_all_reduce_s(H200, dims, "trtllm", 65536, span) == collective_time(H200, dims, "all_reduce",
                                                                                        65536, span)


def test_a_tensor_parallel_decode_step_saves_what_the_engines_all_reduce_saves():
    """Llama 3.1 70B on 8 H200s, 4 requests decoding: two all-reduces of 4 x 8,192 BF16 values a
    layer, 80 layers, each the engine's kernel in place of NCCL's ring."""
    model = load_model("llama3.1-70b")
    engine = IterationModel(model, H200, 8, 1, 2, allreduce_kernels="trtllm").time_s(0, 0, 4, 1024, False)
    plain = IterationModel(model, H200, 8, 1, 2).time_s(0, 0, 4, 1024, False)
    dims, span = _span(H200, 8)
    layer = build_decode_layer(model, H200, 4, 1, 8, 2)
    reduces = [op.bytes_ for op in layer if op.kind == "comm" and op.collective == "all_reduce"]
    assert reduces == [4 * 8192 * 2] * 2
    saved_s = sum(sum(collective_time(H200, dims, "all_reduce", b, span).values())
                  - custom_all_reduce_s(H200.calibration.allreduce_of("trtllm"), 8, b) for b in reduces)
    assert plain - engine == pytest.approx(80 * saved_s)


def test_an_engine_allreduce_block_needs_a_bandwidth_above_zero_with_its_unit():
    fields = {"floor": "3 us", "per_peer": "0.1 us"}
    with pytest.raises(SpecError, match="engine_allreduce.trtllm.bandwidth"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_allreduce": {"trtllm": {**fields, "bandwidth": "0 GB/s"}}})
    with pytest.raises(SpecError, match="a unit is needed"):
        load_hardware("h100-sxm5-80gb", {"calibration.engine_allreduce": {"trtllm": {**fields, "bandwidth": 250}}})
    with pytest.raises(SpecError, match="expected one of trtllm, vllm"):
        load_hardware("h100-sxm5-80gb",
                      {"calibration.engine_allreduce": {"sglang": {**fields, "bandwidth": "250 GB/s"}}})


def test_a_group_larger_than_the_kernel_takes_all_reduces_with_nccl():
    """GB300's NVLink domain holds 72 GPUs: TensorRT-LLM's kernel takes 16 (its max_gpus), vLLM's
    at most 8, so a 16-GPU group of vLLM's falls back to NCCL's ring."""
    hw = ops.at_kernel_rates(load_hardware("gb300-nvl72"))
    dims, span = _span(hw, 16)
    assert span == ((0, 16),)
    assert (hw.calibration.allreduce_of("trtllm").max_gpus, hw.calibration.allreduce_of("vllm").max_gpus) == (16, 8)
    own = custom_all_reduce_s(hw.calibration.allreduce_of("trtllm"), 16, 65536)
    assert engine_all_reduce_s(hw, dims, "trtllm", 65536, span) == {dims[0].name: pytest.approx(own)}
    assert engine_all_reduce_s(hw, dims, "vllm", 65536, span) == collective_time(hw, dims, "all_reduce", 65536, span)


def test_a_calibration_takes_one_engines_figures_and_keeps_the_others():
    calibration = H200.calibration.with_engine("engine_allreduce", "trtllm", SPEC)
    assert calibration.allreduce_of("trtllm") == SPEC
    assert calibration.allreduce_of("vllm") == H200.calibration.allreduce_of("vllm")
    assert [name for name, _ in calibration.engine_allreduce] == ["trtllm", "vllm"]
