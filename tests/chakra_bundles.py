"""Bundles of the layouts the ASTRA-sim interop checks cover, shared by the feeder-rules test
and scripts/check_astra_interop.py: (name, model, Parallelism, workload, gpus)."""
from pathlib import Path

import core

LAYOUTS = (
    ("train-tp2-dp2", "qwen2.5-3b", core.Parallelism(tp=2, dp=2, sp=True), core.TrainWorkload(global_batch=4, seq=512), 4),
    ("train-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.TrainWorkload(global_batch=8, seq=512), 4),
    ("train-cp2-tp2", "qwen2.5-3b", core.Parallelism(cp=2, tp=2, sp=True), core.TrainWorkload(global_batch=2, seq=1024), 4),
    ("train-ep2-dp2", "mixtral-8x7b", core.Parallelism(dp=2, ep=2, zero=1), core.TrainWorkload(global_batch=2, seq=256), 2),
    ("infer-tp2", "qwen2.5-3b", core.Parallelism(tp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 2),
    ("infer-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 4),
)


def write_bundles(folder, hardware, backend="astra-flattened") -> dict:
    """{name: (bundle folder, model name, evaluated record)} for every layout."""
    out = {}
    for name, model_name, par, work, gpus in LAYOUTS:
        bundle = Path(folder) / name
        model = core.load_model(model_name)
        record = core.evaluate(model, hardware, par, work, gpus, backend=backend, time_infeasible=True,
                               emit_traces=bundle)
        out[name] = (bundle, model.name, record)
    return out
