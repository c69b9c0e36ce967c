"""A serving study's layout knobs beyond the Parallelism: attention-DP ranks, the KV cache's dtype
and disaggregated prefill/decode pools, swept as `rapid run --mode serve` takes them, with their
layout rules counted as illegal points or refused in one line; and DeepSeek-V3 on 256 GPUs
swept over tp, pp, ep and attention-DP (etp follows as tp / ep), killed midway and resumed
exactly."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core import Parallelism, SpecError, load_hardware, load_model
from core.model.specs import ServeWorkload
from core.serving.point import serve_point
from sweep.execution.engine import run_study
from sweep.report.page import build_report, figure_specs, write_html
from sweep.search.loop import run_search
from sweep.store.parts import read_results
from sweep.study.grid import plan_study
from sweep.study.loader import load_study
from sweep.study.plan import Planner
from killing import sigkill_after_parts

LAYOUT_STUDY = {"name": "layouts", "model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "gpus": 4,
                "workload": {"mode": "serve", "isl": 256, "osl": 32, "requests": 24, "concurrency": 4},
                "space": {"tp": [1, 2], "attention_dp": [1, 2], "disagg": [False, True], "prefill_tp": [2],
                          "decode_tp": [2], "kv_dtype": ["bf16", "fp8"]}}
POOL_COLUMNS = ("prefill_workers", "prefill_tp", "prefill_ep", "prefill_attention_dp", "prefill_batch",
                "decode_workers", "decode_tp", "decode_ep", "decode_attention_dp", "decode_batch")


def write(tmp_path, study: dict) -> Path:
    path = tmp_path / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / study["name"]), **study}, sort_keys=False))
    return path


def test_attention_dp_kv_dtype_and_pools_are_knobs_each_row_the_simulators(tmp_path):
    study = load_study(write(tmp_path, LAYOUT_STUDY))
    plan = plan_study(study)
    # 16 combinations: aggregated tp1 with 2 attention-DP ranks (x2 kv dtypes) and disaggregated
    # points with tp or attention_dp set (3 x 2) are no deployment
    assert (plan.total, plan.legal) == (16, 8)
    reasons = " | ".join(plan.illegal_examples.values())
    assert "attention_dp (2) must divide an engine's tp (1)" in reasons
    assert "a disaggregated point (disagg true) is laid out by its pools" in reasons
    run_study(study, executor="inprocess", progress=False)
    rows = read_results(study.output).to_pylist()
    assert len(rows) == 8
    model, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm5-80gb")
    for row in rows:
        pools = {name: row[name] for name in POOL_COLUMNS} if row["disagg"] else {}
        work = ServeWorkload(256, 32, concurrency=4, requests=24, kv_dtype=row["kv_dtype"],
                             attention_dp=row["attention_dp"], disagg=row["disagg"], **pools)
        expected = serve_point(model, hw, Parallelism(dp=row["dp"], tp=row["tp"]), work)
        assert row["ttft_p90_s"] == expected["ttft_p90_s"] and row["tpot_s"] == expected["tpot_s"]
        assert row["output_tokens_per_s_per_gpu"] == expected["output_tokens_per_s_per_gpu"]
    disaggregated = [r for r in rows if r["disagg"]]
    assert len(disaggregated) == 2 and all(r["prefill_tp"] == r["decode_tp"] == 2 for r in disaggregated)
    assert all(r["kv_transfer_s"] > 0 and r["energy_per_output_token_j"] is None for r in disaggregated)
    assert all(r[name] is None and r["kv_transfer_s"] is None for r in rows if not r["disagg"] for name in POOL_COLUMNS)
    # the vectorised planner gives every point the per-point path's id, the layout knobs in it
    planner = Planner(study)
    ids = {p.point_id for p in plan_study(study).points}
    assert ids == {planner.point(dict(zip(study.space.names, p.values))).point_id for p in plan_study(study).points}
    assert len(ids) == 8


def test_an_aggregated_point_is_planned_once_whatever_the_pool_knobs_say(tmp_path):
    study = load_study(write(tmp_path, {**LAYOUT_STUDY, "space": {
        "tp": [1, 2], "disagg": [False, True], "prefill_tp": [2, 1], "decode_tp": [2, 3]}}))
    plan = plan_study(study)
    aggregated = [p for p in plan.points if not dict(zip(study.space.names, p.values))["disagg"]]
    # tp 1 and 2, each at the pools' first values only; disaggregated: 2 + 2 GPUs fills the 4
    assert len(aggregated) == 2 and plan.legal == 3


@pytest.mark.parametrize("workload, space, field, allowed", [
    ({}, {"attention_dp": [1, 0]}, "space.attention_dp", "an integer >= 1"),
    ({}, {"kv_dtype": ["int4"]}, "space.kv_dtype", "expected one of"),
    ({}, {"disagg": ["yes"]}, "space.disagg", "true or false"),
    ({}, {"prefill_tp": [2]}, "space.prefill_tp", "needs disagg: true"),
    ({"disagg": True, "prefill_tp": 2}, {}, "workload.prefill_tp", "both a prefill pool and a decode pool"),
    ({"disagg": True, "prefill_tp": 2, "prefill_attention_dp": 3, "decode_tp": 2}, {},
     "workload.prefill_attention_dp", "a divisor of the engine's 2 tensor-parallel GPUs"),
    ({}, {"tp": [2], "attention_dp": [3]}, "space", "attention_dp (3) must divide an engine's tp (2)"),
    ({}, {"etp": [1]}, "space.etp", "derived: sweep tp and ep instead"),
])
def test_bad_serving_layouts_are_refused_in_one_line_naming_the_field(tmp_path, workload, space, field, allowed):
    study = {**LAYOUT_STUDY, "workload": {**LAYOUT_STUDY["workload"], **workload}, "space": {"tp": [1, 2], **space}}
    with pytest.raises(SpecError) as err:
        plan_study(load_study(write(tmp_path, study)))
    assert err.value.field == field and allowed in err.value.allowed


DSV3_256 = {"name": "dsv3-256", "model": "deepseek-v3", "hardware": "b200-sxm-180gb", "gpus": 256,
            "workload": {"mode": "serve", "isl": 128, "osl": 8, "requests": 512, "concurrency": 512},
            "space": {"dtype": ["fp8"], "tp": [8, 16], "pp": [1, 2], "ep": [8, 16], "attention_dp": [1, 8]}}


def test_deepseek_v3_on_256_gpus_sweeps_tp_pp_ep_attention_dp_and_resumes_exactly(tmp_path):
    killed, reference = (load_study(write(tmp_path, {**DSV3_256, "name": name})) for name in ("killed", "reference"))
    plan = plan_study(reference)
    # 16 combinations: ep 16 on a tp8 x pp1 engine (x2 attention-DP) does not split its experts
    # over its own GPUs
    assert (plan.total, plan.legal) == (16, 14)
    command = [sys.executable, "-m", "sweep.cli", "sweep", killed.path, "--local", "--workers", "1",
               "--batch-points", "1", "--part-rows", "1", "--quiet"]
    sigkill_after_parts(command, killed.output, 3)
    partial = read_results(killed.output).num_rows
    expected = run_study(reference, executor="inprocess", progress=False)
    assert 0 < partial < expected.evaluated == 14
    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    resumed = read_results(killed.output).drop_columns(["eval_time_s"])
    assert resumed.equals(read_results(reference.output).drop_columns(["eval_time_s"]))
    assert set(resumed.column("attention_dp").to_pylist()) == {1, 8} and set(resumed.column("ep").to_pylist()) == {8, 16}


def test_the_frontier_names_pools_colours_layouts_and_leaves_constraint_breakers_hollow(tmp_path):
    search = {"sampler": "random", "trials": 12, "objectives": ["maximize output_tokens_per_s_per_gpu"],
              "constraints": ["tpot_s <= 0.006"]}
    study = load_study(write(tmp_path, {**LAYOUT_STUDY, "workload": {**LAYOUT_STUDY["workload"], "requests": 32},
                                        "space": {"tp": [1, 2], "disagg": [False, True], "prefill_tp": [2],
                                                  "decode_tp": [2], "concurrency": [1, 8, 32]},
                                        "search": search}))
    run_search(study, executor="inprocess", progress=False)
    rows = read_results(study.output).to_pandas().drop_duplicates("point_id")
    page = write_html(build_report(study.output), tmp_path / "page.html").read_text()
    frontier = next(spec for spec in figure_specs(page)
                    if spec["layout"]["title"]["text"].startswith("How many tokens does each GPU serve"))
    lines = [t for t in frontier["data"] if t.get("showlegend", True) and not t["name"].startswith("frontier")]
    assert {t["name"] for t in lines} <= {"agg dp4 tp1", "agg dp2 tp2", "disagg 1 x tp2 prefill + 1 x tp2 decode"}
    hollow = {(x, y) for t in frontier["data"] if t["name"].endswith(": breaks a constraint")
              for x, y in zip(t["x"], t["y"])}
    drawn = {(x, y): r["tpot_s"] for t in lines for x, y in zip(t["x"], t["y"])
             for _, r in rows.iterrows() if (r["output_tokens_per_s_per_user"], r["output_tokens_per_s_per_gpu"]) == (x, y)}
    assert len(drawn) == rows["feasible"].sum()
    assert hollow == {point for point, tpot in drawn.items() if tpot > 0.006} and 0 < len(hollow) < len(drawn)
    assert frontier["layout"]["yaxis"]["type"] == "log"
