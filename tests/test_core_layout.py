import core
from core.model.layout import group_spans


def test_tensor_parallel_innermost_then_data_then_pipeline(a100):
    dims = a100.dims_for(64)
    spans = group_spans(core.Parallelism(tp=4, dp=4, pp=4), dims)
    assert spans["tp"] == ((0, 4.0),)
    assert spans["dp"] == ((0, 2.0), (1, 2.0))
    assert spans["pp"] == ((1, 4.0),)


def test_layout_reasons(a100):
    model = core.load_model("llama3.1-70b")
    work = core.TrainWorkload(global_batch=64, seq=4096)

    def reason(**kw):
        par = core.Parallelism(**kw)
        return core.check_layout(model, a100, par, work, 64)

    assert reason(tp=8, pp=8) is None
    assert "not gpus = 64" in reason(tp=8, pp=4)
    assert "heads" in reason(tp=3, dp=21, pp=1) or "gpus" in reason(tp=3, dp=21, pp=1)
    assert "layers (80)" in reason(tp=2, pp=32)
    assert "global_batch (64)" in reason(tp=1, dp=64, micro_batch=2)
    assert "no experts" in reason(tp=8, dp=8, ep=2)
    assert "tp > 1" in reason(dp=64, sp=True)
    assert "pp >= 2" in reason(tp=8, dp=8, schedule="interleaved", virtual_stages=2)


def test_knobs_that_would_change_nothing_are_refused_not_ignored(a100):
    """A sweep over such knobs would write identical rows under different settings."""
    dense, work = core.load_model("llama3.1-8b"), core.TrainWorkload(global_batch=16, seq=4096)
    request = core.InferWorkload(batch=4, prompt=128, decode=16)

    def reason(workload=work, **kw):
        return core.check_layout(dense, a100, core.Parallelism(**kw), workload, 16)

    assert "needs dtype fp8, mxfp8, nvfp4, not bf16" in reason(dp=16, fp8_params=True)
    assert "needs zero >= 1" in reason(dp=16, zero=0, overlap_param_gather=True)
    assert "needs zero 3" in reason(dp=16, reshard_after_forward=False)
    assert reason(dp=16, zero=3, reshard_after_forward=False) is None
    assert reason(dp=16, zero=1, overlap_param_gather=True) is None
    assert "needs schedule interleaved" in reason(dp=16, overlap_p2p_comm=True)
    assert "needs sp" in reason(tp=2, dp=8, sp=False, overlap_tp_comm=True)
    assert reason(tp=2, dp=8, overlap_tp_comm=True) is None  # sp is on by default with tp > 1
    assert "no experts" in reason(tp=2, dp=8, sp=True, etp=1)
    assert "need pp > 1" in reason(dp=16, first_stage_layers=4, last_stage_layers=4)
    assert "give both" in reason(dp=4, pp=4, first_stage_layers=4)
    assert reason(request, dp=16) is None
    assert reason(request, dp=16, recompute="full", micro_batch=2) == (
        "micro_batch = 2, recompute = full: training knobs, which the inference model does not take")
    # checked first: no rule for training knobs suggests another training knob
    assert "training knobs" in reason(request, dp=16, overlap_param_gather=False)
    # the distributed optimizer is a default, not a setting: inference takes it and refuses ZeRO 0
    assert "zero = 0" in reason(request, dp=16, zero=0)


def test_expert_parallelism_spans_context_parallel_ranks_before_data_parallel_ones(a100):
    # Megatron-Core's expert grid drops cp: tp 2, cp 4, dp 2 with ep 4 puts each expert group on
    # the 4 context-parallel ranks of one node, and expert data parallelism across the 2 nodes
    spans = group_spans(core.Parallelism(tp=2, cp=4, dp=2, ep=4), a100.dims_for(16))
    assert spans["ep"] == ((0, 4.0),)
    assert spans["edp"] == ((1, 2.0),)
    # without context parallelism ep is the innermost ep data-parallel ranks, as before
    assert group_spans(core.Parallelism(tp=2, dp=8, ep=4), a100.dims_for(16))["ep"] == ((0, 4.0),)
    # no experts laid out apart: the data-parallel ranks over tp, whatever the placement
    cp_first = core.Parallelism(tp=4, cp=4, placement=("cp", "tp", "dp", "pp"))
    assert group_spans(cp_first, a100.dims_for(16))["edp"] == ((0, 4.0),)


def test_layouts_with_experts_take_megatron_cores_orders(a100):
    model, work = core.load_model("mixtral-8x7b"), core.TrainWorkload(global_batch=16, seq=4096)

    def reason(**kw):
        return core.check_layout(model, a100, core.Parallelism(**kw), work, 16)

    assert reason(tp=2, cp=2, dp=4, ep=4) is None
    assert "start tp, cp" in reason(tp=2, cp=2, dp=4, ep=4, placement=("tp", "dp", "cp", "pp"))
    assert reason(tp=2, cp=2, dp=2, pp=2, ep=2, placement=("tp", "cp", "pp", "dp")) is None  # ep*etp = 2*2 = tp*cp
    assert "ep*etp = tp*cp" in reason(tp=2, cp=2, dp=2, pp=2, ep=4, placement=("tp", "cp", "pp", "dp"))


def test_placing_data_parallel_innermost_pushes_tensor_parallel_onto_infiniband(a100):
    model = core.load_model("llama2-7b")
    work = core.TrainWorkload(global_batch=16, seq=2048)
    inner = core.Parallelism(tp=8, dp=2, sp=True, recompute="full")
    outer = core.Parallelism(tp=8, dp=2, sp=True, recompute="full", placement=("dp", "tp", "cp", "pp"))
    assert group_spans(outer, a100.dims_for(16))["tp"] == ((0, 4.0), (1, 2.0))
    fast, slow = (core.evaluate(model, a100, par, work, 16) for par in (inner, outer))
    assert slow["step_time_s"] > fast["step_time_s"]
    assert slow["breakdown"]["comm_ib_s"] > fast["breakdown"].get("comm_ib_s", 0.0)
