"""Metrics that mean what they say: MFU from the FLOPs the kernels execute (causal attention
counted as executed, embedding lookups not counted) stays below 100 % at long context, the breakdown columns add up to the
step time, unit-string knobs get numeric twins, and the hierarchical replay's note is kept."""
import math

import pyarrow.compute as pc
import pytest

import core
from core.model.ops import FLASH_TILE_KV
from core.model.training import model_flops
from sweep.execution.engine import run_study
from sweep.store.parts import read_results
from sweep.study.loader import load_study


def test_mfu_at_long_context_with_cp_counts_causal_attention_as_executed():
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("h100-sxm5-80gb")
    seq = 512 * 1024
    work = core.TrainWorkload(global_batch=1, seq=seq)
    record = core.evaluate(model, hw, core.Parallelism(tp=8, cp=8, sp=True, recompute="full"), work, 64)
    causal = 0.5 * (1 + 1 / (seq // FLASH_TILE_KV))
    transformer = model.active_params() - 2 * model.vocab * model.hidden  # untied tables: lookup and output
    per_token = 6 * (transformer + model.vocab * model.hidden) + 12 * model.layers * model.q_dim * seq * causal
    assert model_flops(model, work) == pytest.approx(per_token * seq, rel=1e-12)
    assert record["mfu"] == pytest.approx(per_token * seq / (record["step_time_s"] * hw.gpu.flops("bf16") * 64))
    assert 0 < record["mfu"] < 1


def test_unfused_attention_counts_every_score():
    gpt = core.load_model("gpt-22b")
    work = core.TrainWorkload(global_batch=4, seq=2048)
    positions = gpt.max_position * gpt.hidden  # learned position table: a lookup, no FLOPs
    per_token = 6 * (gpt.active_params() - positions) + 12 * gpt.layers * gpt.q_dim * 2048
    assert gpt.attention_kernel == "standard"
    assert model_flops(gpt, work) == pytest.approx(per_token * 4 * 2048, rel=1e-12)


@pytest.mark.parametrize("backend", ["analytical", "astra-hierarchical"])
@pytest.mark.parametrize("work", [core.TrainWorkload(global_batch=32, seq=4096),
                                  core.InferWorkload(batch=4, prompt=512, decode=64)])
def test_breakdown_sums_to_step_time(backend, work):
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("a100-sxm4-80gb")
    par = core.Parallelism(dp=2, tp=4, pp=2, sp=work.mode == "train", micro_batch=1)
    record = core.evaluate(model, hw, par, work, 16, backend=backend, time_infeasible=True)
    assert sum(record["breakdown"].values()) == pytest.approx(record["step_time_s"], rel=1e-9)
    assert set(record["detail"]) <= set(core.evaluate.__globals__["DETAIL_KEYS"])


def test_table_columns_add_up_and_unit_knobs_have_numbers(write_study):
    study = load_study(write_study(name="honest", gpus=16, backend="astra-hierarchical",
                                   space={"tp": [4, 8], "pp": [1, 2], "cp": [1], "zero": [1], "micro_batch": [1],
                                          "recompute": ["full"], "placement": ["tp,cp,dp,pp", "dp,tp,cp,pp"],
                                          "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1.5 TB/s"]}))
    run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output).filter(pc.field("feasible"))
    assert table.num_rows > 0
    parts = [c for c in table.column_names if c.startswith("breakdown_")]
    for row in table.select(parts + ["step_time_s"]).to_pylist():
        assert sum(row[c] for c in parts) == pytest.approx(row["step_time_s"], rel=1e-9)
    bandwidth = dict(zip(table.column("hardware_gpu_hbm_bandwidth").to_pylist(),
                         table.column("hardware_gpu_hbm_bandwidth_bps").to_pylist()))
    assert bandwidth == {"2039 GB/s": 2.039e12, "1.5 TB/s": 1.5e12}
    notes = set(table.column("replay_note").to_pylist())
    assert "" in notes and any("astra-flattened sees it" in n for n in notes)


def test_a_request_of_one_output_token_has_no_time_per_output_token():
    """The prefill emits the first token; with no token after it there is no TPOT to report
    (0 s would rank such a point best by tpot_s)."""
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("h100-sxm5-80gb")
    for backend in ("analytical", "astra-hierarchical"):
        record = core.evaluate(model, hw, core.Parallelism(), core.InferWorkload(batch=1, prompt=128, decode=1), 1,
                               backend=backend)
        assert math.isnan(record["tpot_s"]) and record["ttft_s"] == record["step_time_s"]
