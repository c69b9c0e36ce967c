"""A search over a study with a `faults:` block: each trial's point is replayed under its fault
samples (the grid's own rows), and Optuna is told the point's tail under faults."""
import subprocess
import sys

import numpy as np
import optuna
import pytest
import yaml

import sweep.faults.evaluate
from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.search.loop import run_search
from sweep.search.storage import reader_storage
from sweep.store.parts import part_files, read_results
from sweep.study.loader import load_study
from killing import sigkill_after_parts

# 8 GPUs: tp over an inner pair, pp over an outer ring of 4; with 40 GB of HBM the layouts
# tp 1 with ZeRO 0 do not fit, the rest do
NETWORK = [{"name": "inner", "topology": "ring", "size": 2, "link_bandwidth": "100 GB/s", "latency": "1 us"},
           {"name": "outer", "topology": "ring", "size": 4, "link_bandwidth": "25 GB/s", "latency": "1 us"}]
SPACE = {"tp": [1, 2], "pp": [2, 4], "zero": [0, 1]}
SEARCH = {"sampler": "random", "trials": 12, "seed": 0,
          "objectives": ["minimize step_time_s", "minimize slowdown_p95"], "constraints": ["slowdown_max <= 5"]}
KEYS = ("point_id", "fault_sample")
TRIAL_COLUMNS = ["trial_number", "sampler", "eval_time_s"]


def study_file(tmp_path, name, search=SEARCH, faults=None, space=SPACE):
    study = {"name": name, "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb",
             "overrides": {"hardware.network": NETWORK, "hardware.gpu.hbm.capacity": "40 GB"},
             "gpus": 8, "workload": {"mode": "train", "global_batch": 8, "seq": 512}, "space": space,
             "backend": "astra-hierarchical", "output": str(tmp_path / "results" / name),
             "faults": {"samples": 3, "seed": 3, **(faults or {})}}
    if search is not None:
        study["search"] = search
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def grid_rows(tmp_path, points: set, **fields) -> list:
    """The grid fault study's rows of `points`, without the columns a search adds."""
    grid = load_study(study_file(tmp_path, "grid", search=None, **fields))
    run_study(grid, executor="inprocess", progress=False)
    table = read_results(grid.output).drop_columns(["eval_time_s"])
    return [r for r in table.to_pylist() if r["point_id"] in points]


def search_rows(folder) -> list:
    return read_results(folder).drop_columns(TRIAL_COLUMNS).to_pylist()


def test_trials_write_sample_rows_and_are_told_the_tail_of_their_point(tmp_path, monkeypatch):
    sampled, sample_faults = [], sweep.faults.evaluate.sample_faults
    monkeypatch.setattr(sweep.faults.evaluate, "sample_faults", lambda spec, point, index, *rest:
                        sampled.append((point.point_id, index)) or sample_faults(spec, point, index, *rest))
    study = load_study(study_file(tmp_path, "tail"))
    report = run_search(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    rows = table.to_pylist()
    keys = [tuple(r[k] for k in KEYS) for r in rows]
    assert sorted(keys) == sorted(sampled) and len(set(keys)) == len(keys)  # each sample once, none twice
    assert {r["sampler"] for r in rows} == {"random"} and None not in table.column("trial_number").to_pylist()
    points = {r["point_id"] for r in rows}
    assert report.evaluated == len(points) and report.sample_rows == len(rows)
    assert search_rows(study.output) == grid_rows(tmp_path, points)  # the grid's fault rows, as they are

    by_point = {p: [r for r in rows if r["point_id"] == p] for p in points}
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    states = {t.state for t in trials}
    assert len(trials) == 12 and states == {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert report.from_table > 0  # a configuration asked again was answered from its rows
    for trial in trials:
        mine = by_point[trial.user_attrs["point_id"]]
        base = next(r for r in mine if r["fault_sample"] == 0)
        if trial.state == optuna.trial.TrialState.PRUNED:  # does not fit: told so, never timed nor sampled
            assert [r["fault_sample"] for r in mine] == [0] and base["step_time_s"] is None
            assert trial.constraints["feasible"] == 1.0
            continue
        slowdowns = [r["slowdown"] for r in mine if r["fault_sample"] >= 1]
        assert len(slowdowns) == 3
        assert trial.values == [base["step_time_s"], float(np.percentile(slowdowns, 95))]
        assert trial.constraints["slowdown_max <= 5"] == max(slowdowns) - 5


def test_more_trials_answer_known_points_from_the_table_without_sampling(tmp_path, monkeypatch):
    study = load_study(study_file(tmp_path, "again", search={**SEARCH, "trials": 16}))
    run_search(study, executor="inprocess", progress=False)
    before = search_rows(study.output)
    points = {r["point_id"] for r in before}
    sampled, sample_faults = [], sweep.faults.evaluate.sample_faults
    monkeypatch.setattr(sweep.faults.evaluate, "sample_faults", lambda spec, point, index, *rest:
                        sampled.append(point.point_id) or sample_faults(spec, point, index, *rest))
    more = load_study(study_file(tmp_path, "again", search={**SEARCH, "trials": 24}))
    report = run_search(more, executor="inprocess", progress=False)
    assert report.before == 16 and report.trials == 24
    assert not set(sampled) & points and report.evaluated == len(set(sampled))
    after = search_rows(study.output)
    assert [r for r in after if r["point_id"] in points] == before


def test_the_summary_and_queries_read_a_search_with_faults(tmp_path, capsys):
    path = study_file(tmp_path, "summary")
    assert main(["sweep", str(path), "--local", "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "fault-sample rows" in out and "Pareto front" in out and "slowdown_p95" in out
    folder = str(load_study(path).output)
    assert main(["query", folder, "--faults-summary", "--format", "json"]) == 0
    assert "slowdown_p95" in capsys.readouterr().out
    assert main(["query", folder, "--pareto", "step_time_s,memory_peak_gib", "--format", "json"]) == 0
    assert '"fault_sample": 0' in capsys.readouterr().out  # one row per point: its baseline
    assert main(["query", folder, "--pareto", "step_time_s,slowdown_p95", "--format", "json"]) == 0
    assert '"slowdown_p95"' in capsys.readouterr().out


@pytest.mark.parametrize("search, field, shown", [
    ({"objectives": ["minimize slowdown_max"], "constraints": []}, "search.objectives", "slowdown_max"),
    ({"objectives": ["step_time_s"], "constraints": ["step_time_p95_s <= 1"]}, "search.constraints", "step_time_p95_s"),
])
def test_a_fault_aggregate_without_a_faults_block_is_one_line(tmp_path, capsys, search, field, shown):
    path = study_file(tmp_path, "bad", search={**SEARCH, **search})
    data = yaml.safe_load(path.read_text())
    del data["faults"]
    path.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{field}'" in err and shown in err and "needs a faults: block" in err
    assert not (tmp_path / "results").exists()


def test_refinement_with_a_faults_block_is_one_line(tmp_path, capsys):
    path = study_file(tmp_path, "bad", search={**SEARCH, "refine": {"backend": "astra-flattened", "top": 3}})
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'search.refine'" in err and "faults: block" in err
    assert not (tmp_path / "results").exists()


def test_sigkill_midway_then_rerun_loses_and_duplicates_nothing(tmp_path):
    space = {**SPACE, "recompute": ["none", "full"]}
    path = study_file(tmp_path, "killed", search={**SEARCH, "trials": 24}, faults={"samples": 40}, space=space)
    study = load_study(path)
    command = [sys.executable, "-m", "sweep.cli", "sweep", str(path), "--local", "--workers", "1", "--quiet"]
    sigkill_after_parts(command, study.output, 3)
    assert 0 < len(part_files(study.output)) and read_results(study.output).num_rows > 0

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    assert [t.number for t in trials] == list(range(24))
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    rows = search_rows(study.output)
    keys = [tuple(r[k] for k in KEYS) for r in rows]
    assert len(set(keys)) == len(keys)
    points = {r["point_id"] for r in rows}
    assert points == {t.user_attrs["point_id"] for t in trials if "point_id" in t.user_attrs}
    assert rows == grid_rows(tmp_path, points, faults={"samples": 40}, space=space)
