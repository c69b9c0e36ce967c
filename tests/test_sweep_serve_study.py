"""Serving studies: the load and the engine are knobs like the layout, every point is simulated
by core.serving exactly as `rapid run --mode serve` does, and the serving columns are
objectives and constraints for a search."""

import pytest
import yaml

from core import Parallelism, SpecError, load_hardware, load_model
from core.model.specs import ServeWorkload
from core.serving.point import serve_point
from sweep.execution.engine import run_study
from sweep.search.loop import run_search
from sweep.store.parts import read_results
from sweep.study.grid import plan_study
from sweep.study.loader import load_study
from sweep.study.plan import Planner

SERVE_STUDY = {"name": "serve", "model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "gpus": 4,
               "workload": {"mode": "serve", "isl": 512, "osl": 64, "requests": 40},
               "space": {"tp": [2, 4], "concurrency": [1, 16], "engine": ["trtllm", "vllm"]}}


def write(tmp_path, **changes) -> str:
    study = {**SERVE_STUDY, "output": str(tmp_path / "out"), **changes}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def test_every_row_is_what_the_engine_simulator_gives_for_its_layout_and_load(tmp_path):
    study = load_study(write(tmp_path))
    run_study(study, executor="inprocess", progress=False)
    rows = read_results(study.output).to_pylist()
    assert len(rows) == 8 and all(r["feasible"] for r in rows)
    model, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm5-80gb")
    for row in rows:
        work = ServeWorkload(512, 64, concurrency=row["concurrency"], requests=40, engine=row["engine"])
        expected = serve_point(model, hw, Parallelism(dp=row["dp"], tp=row["tp"]), work)
        for column in ("ttft_s", "ttft_p90_s", "tpot_s", "output_tokens_per_s_per_gpu", "max_concurrency_kv"):
            assert row[column] == expected[column]
        assert row["tokens_per_s"] == expected["output_tokens_per_s"] and row["step_time_s"] is None  # NaN: null


def test_the_vectorised_planner_gives_each_serving_point_the_id_the_per_point_path_gives(tmp_path):
    study = load_study(write(tmp_path))
    planner = Planner(study)
    planned = {p.values: p.point_id for p in plan_study(study).points}
    for values, point_id in planned.items():
        assert planner.point(dict(zip(study.space.names, values))).point_id == point_id
    assert len(set(planned.values())) == 8  # the load knobs enter the id


def test_a_search_maximises_throughput_per_gpu_under_latency_slos(tmp_path):
    search = {"sampler": "random", "trials": 6, "objectives": ["maximize output_tokens_per_s_per_gpu"],
              "constraints": ["ttft_p90_s <= 0.5", "tpot_s <= 0.05"]}
    study = load_study(write(tmp_path, search=search))
    report = run_search(study, executor="inprocess", progress=False)
    assert report.trials == 6
    assert {"output_tokens_per_s_per_gpu", "ttft_p90_s", "trial_number"} <= set(read_results(study.output).column_names)


@pytest.mark.parametrize("changes, field, allowed", [
    ({"space": {"tp": [2], "concurrency": [0, 4]}}, "space.concurrency", "positive integer"),
    ({"space": {"tp": [2], "engine": ["tensorrt"]}}, "space.engine", "trtllm"),
    ({"space": {"tp": [2], "concurrency": [4]}, "workload": {"mode": "serve", "isl": 8, "osl": 8, "request_rate": 2.0}},
     "workload.request_rate", "exactly one of concurrency"),
    ({"workload": {"mode": "serve", "isl": 8, "osl": 8, "concurrency": "many"}}, "workload.concurrency", "an integer"),
    ({"backend": "astra-flattened"}, "backend", "expected analytical"),
    ({"space": {"tp": [4], "concurrency": [16, 64]}}, "workload.requests", "concurrency (64) above requests (40)"),
    ({"search": {"sampler": "random", "trials": 2, "objectives": ["minimize step_time_s"]}}, "search.objectives",
     "a serve study's rows leave it empty"),
    ({"search": {"sampler": "random", "trials": 2, "constraints": ["mfu >= 0.3"],
                 "objectives": ["maximize output_tokens_per_s_per_gpu"]}}, "search.constraints",
     "a serve study's rows leave it empty"),
])
def test_bad_serving_input_is_refused_naming_the_field(tmp_path, changes, field, allowed):
    with pytest.raises(SpecError) as err:
        load_study(write(tmp_path, **changes))
    assert err.value.field == field and allowed in err.value.allowed


def test_a_training_search_does_not_aim_at_a_serving_column(tmp_path):
    train = {"workload": {"mode": "train", "global_batch": 8, "seq": 1024}, "space": {"tp": [2]},
             "search": {"sampler": "random", "trials": 2, "objectives": ["minimize ttft_p90_s"]}}
    with pytest.raises(SpecError) as err:
        load_study(write(tmp_path, **train))
    assert err.value.field == "search.objectives" and "only a serve study's rows have it" in err.value.allowed


def test_a_training_study_does_not_take_a_serving_knob(tmp_path):
    train = {"workload": {"mode": "train", "global_batch": 8, "seq": 1024}, "space": {"tp": [2], "concurrency": [4]}}
    with pytest.raises(SpecError) as err:
        load_study(write(tmp_path, **train))
    assert err.value.field == "space.concurrency" and "unknown knob" in err.value.allowed


def test_a_serving_moe_engine_splits_its_experts_over_its_own_gpus(tmp_path):
    """ep divides an engine's tp GPUs, each expert over tp / ep of them when etp is left unset."""
    moe = {"model": "qwen3-30b-a3b", "gpus": 8, "space": {"tp": [4, 8], "ep": [1, 4, 8], "concurrency": [8]}}
    study = load_study(write(tmp_path, **moe))
    plan = plan_study(study)
    layouts = {(dict(zip(study.space.names, p.values))["tp"], dict(zip(study.space.names, p.values))["ep"],
                dict(zip(study.space.names, p.values))["etp"]) for p in plan.points}
    assert layouts == {(4, 1, 0), (4, 4, 1), (8, 1, 0), (8, 4, 2), (8, 8, 1)}
    assert any("ep (8) must divide an engine's tp*pp GPUs (4*1)" in reason for reason in plan.illegal_examples.values())


def test_serving_rows_carry_power_and_energy_per_output_token(tmp_path):
    study = load_study(write(tmp_path, space={"tp": [4], "concurrency": [1, 16]}))
    run_study(study, executor="inprocess", progress=False)
    rows = sorted(read_results(study.output).to_pylist(), key=lambda r: r["concurrency"])
    idle = load_hardware("h100-sxm5-80gb").gpu.power.idle_w
    assert all(idle < r["power_avg_w"] < 700 for r in rows)
    assert all(r["energy_per_request_j"] == pytest.approx(r["energy_per_output_token_j"] * 64) for r in rows)
    assert rows[1]["energy_per_output_token_j"] < rows[0]["energy_per_output_token_j"]  # a fuller batch shares the idle floor
