"""Multi-token prediction as a training option: how many MTP modules a model trains (its
file's count unless a study or `rapid run --mtp-layers` says otherwise), and what each one
costs in the step: its transformer layer, projection, output layer and loss (compute, model
FLOPs, memory), on the last pipeline stage; serving never runs them."""
import dataclasses
import json

import pytest

import core
from core.model.graph import train_shape
from core.model.layout import group_spans
from core.model.memory import GiB, logit_bytes_per_element
from core.model.specs import ModelSpec, Parallelism, TrainWorkload
from core.model.training import edge_ops, layer_profile, model_flops, mtp_edge_s
from sweep.cli import main

H, HEADS, FFN, VOCAB, SEQ = 1024, 8, 4096, 32000, 2048
DENSE = ModelSpec("dense", 4, H, HEADS, HEADS, FFN, VOCAB)  # SwiGLU, RMSNorm, full attention


def test_the_count_comes_from_the_file_and_an_override_replaces_it():
    assert core.load_model("deepseek-v3").mtp_layers == 1  # num_nextn_predict_layers
    assert core.load_model("deepseek-v3", {"mtp_layers": 0}).mtp_layers == 0
    assert core.load_model("llama3.1-8b").mtp_layers == 0
    assert core.load_model("llama3.1-8b", {"mtp_layers": 2}).mtp_layers == 2


def test_model_flops_add_each_modules_layer_projection_and_output_layer():
    """Per token and module, forward and backward: 6 x (the layer's 4 h^2 + 3 h ffn + 2 h
    weights, the 2h -> h projection, the h x vocab output layer) + 12 h seq for attention's two
    matmuls over every score (score_share 1)."""
    work = TrainWorkload(global_batch=4, seq=SEQ)
    per_module = 6 * (4 * H * H + 3 * H * FFN + 2 * H + 2 * H * H + H * VOCAB) + 12 * H * SEQ
    for modules in (1, 2):
        mtp = dataclasses.replace(DENSE, mtp_layers=modules)
        extra = model_flops(mtp, work, score_share=1.0) - model_flops(DENSE, work, score_share=1.0)
        assert extra == pytest.approx(modules * per_module * 4 * SEQ, rel=1e-12)


def test_a_single_stage_computes_the_module_layer_and_edges_beside_the_model():
    """pp = 1, 4 micro-batches: compute grows by 4 x (one layer's forward and backward, the
    module's own work and a second output layer and loss)."""
    hw = core.load_hardware("h100-sxm5-80gb")
    par, work = Parallelism(tp=2, dp=1, sp=True), TrainWorkload(global_batch=4, seq=SEQ)
    mtp = dataclasses.replace(DENSE, mtp_layers=1)
    base, more = (core.evaluate(m, hw, par, work, 2) for m in (DENSE, mtp))
    shape, dims = train_shape(par, work), hw.dims_for(2)
    spans = group_spans(par, dims)
    spans_key = tuple(sorted((axis, spans.get(axis, ())) for axis in ("tp", "cp", "ep", "etp")))
    layer = layer_profile(DENSE, hw, dims, shape, spans_key, "none")
    _, _, head_f, head_b = edge_ops(DENSE, hw, shape.tokens, 2)
    own_f, own_b = mtp_edge_s(DENSE, hw, shape.tokens, 2)
    expected = 4 * (layer.forward.compute_s + layer.backward.compute_s + own_f + own_b + head_f + head_b)
    assert more["breakdown"]["compute_s"] - base["breakdown"]["compute_s"] == pytest.approx(expected, rel=1e-9)
    assert more["mfu"] > 0


def test_the_modules_logits_are_held_beside_the_models():
    """The last stage keeps one more logits tensor (tokens x vocab / tp) per module until its
    loss's backward."""
    hw = core.load_hardware("h100-sxm5-80gb")
    par, work = Parallelism(tp=2, dp=1, sp=True), TrainWorkload(global_batch=4, seq=SEQ)
    base, more = (core.evaluate(m, hw, par, work, 2)["memory"] for m in (DENSE, dataclasses.replace(DENSE, mtp_layers=2)))
    logits = 2 * SEQ * VOCAB / 2 * logit_bytes_per_element(hw, par)
    assert more["transient_gib"] - base["transient_gib"] == pytest.approx(logits / GiB, rel=1e-9)
    assert more["activations_gib"] > base["activations_gib"]  # two more layers' saved tensors and their inputs


def test_serving_never_runs_the_modules():
    hw = core.load_hardware("h100-sxm5-80gb")
    work = core.InferWorkload(batch=2, prompt=256, decode=16)
    a, b = (core.evaluate(m, hw, Parallelism(tp=2), work, 2) for m in (DENSE, dataclasses.replace(DENSE, mtp_layers=1)))
    assert a["step_time_s"] == b["step_time_s"] and a["ttft_s"] == b["ttft_s"]


def test_rapid_run_trains_deepseek_v3_with_and_without_its_module(capsys):
    argv = ["run", "--model", "deepseek-v3", "--hardware", "h100-sxm5-80gb", "--tp", "2", "--pp", "8", "--ep", "32",
            "--etp", "1", "--gpus", "256", "--seq", "4096", "--global-batch", "1024", "--recompute", "full", "--json"]
    records = []
    for flag in ([], ["--mtp-layers", "0"]):
        assert main(argv + flag) == 0
        records.append(json.loads(capsys.readouterr().out))
    with_mtp, without = records
    assert with_mtp["feasible"] and without["feasible"]
    assert with_mtp["step_time_s"] > without["step_time_s"]
    assert with_mtp["memory_peak_gib"] > without["memory_peak_gib"]
