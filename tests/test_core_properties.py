"""Any legal layout of any preset gives a finite, positive, self-consistent prediction."""
import math

import pytest

from hypothesis import given, settings, strategies as st

import core

MODELS = core.list_presets()["models"]
GPUS = core.list_presets()["gpus"]
POW2 = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), tp=POW2, pp=POW2, cp=st.sampled_from([1, 2]),
       dp=POW2, ep=st.sampled_from([1, 2, 8]), zero=st.integers(0, 3), mb=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]), train=st.booleans())
def test_legal_layouts_predict_sensibly(model, gpu, tp, pp, cp, dp, ep, zero, mb, recompute, train):
    spec, hw = core.load_model(model), core.load_hardware(gpu)
    if spec.moe is None:
        ep = 1
    if train:
        par = core.Parallelism(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sp=tp > 1, zero=zero, micro_batch=mb,
                               recompute=recompute)
        work = core.TrainWorkload(global_batch=dp * mb * 4, seq=2048)
    else:
        par = core.Parallelism(dp=dp, tp=tp, pp=pp, ep=ep)
        work = core.InferWorkload(batch=mb, prompt=256, decode=32)
    gpus = par.gpus
    if core.check_layout(spec, hw, par, work, gpus) is not None:
        return
    record = core.evaluate(spec, hw, par, work, gpus, time_infeasible=True)
    assert record["memory_peak_gib"] > 0
    assert math.isfinite(record["step_time_s"]) and record["step_time_s"] > 0
    assert 0 < record["mfu"] < 1
    parts = sum(record["breakdown"].values())
    assert parts == pytest.approx(record["step_time_s"], rel=1e-9)
