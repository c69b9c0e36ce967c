"""Optuna search over a study's space: the same points, executors and table as the grid."""
import json
import subprocess
import sys
from importlib import import_module

import optuna
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.search.loop import run_search
from sweep.search.storage import open_storage, reader_storage
from sweep.store.parts import read_metadata, read_results
from sweep.study.loader import load_study
from killing import sigkill_after_parts

SPACE = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "cp": [1], "zero": [0, 1], "micro_batch": [1, 2],
         "recompute": ["none", "full"], "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}
SEARCH = {"sampler": "tpe", "trials": 12, "parallel": 1, "seed": 0}


def search_study(write_study, name, space=None, fields=None, **search):
    return load_study(write_study(name=name, space={**SPACE, **(space or {})}, search={**SEARCH, **search}, **(fields or {})))


def by_trial(table: pa.Table) -> list:
    rows = table.drop_columns(["eval_time_s"]).to_pylist()
    return sorted(rows, key=lambda r: (r["trial_number"], r["backend"]))


def test_search_finds_the_grid_best(write_study):
    grid = load_study(write_study(name="grid", space=SPACE))
    run_study(grid, executor="inprocess", progress=False)
    table = read_results(grid.output)
    best = min(t for t in table.column("step_time_s").to_pylist() if t is not None)

    study = search_study(write_study, "tpe", trials=30)  # seed 0 meets it at trial 13
    report = run_search(study, executor="inprocess", progress=False)
    found = [t for t in read_results(study.output).column("step_time_s").to_pylist() if t is not None]
    assert report.trials == 30 and report.evaluated < table.num_rows
    assert min(found) == best


def test_infeasible_points_are_never_timed_and_told_as_infeasible(write_study, monkeypatch):
    timed, module = [], import_module("core.evaluation")
    real = module._train_timing
    monkeypatch.setattr(module, "_train_timing", lambda model, hw, par, *rest: timed.append(par) or real(model, hw, par, *rest))
    # 8B on 16 GPUs: small tp*pp without ZeRO does not fit in 80 GB; tp 8 with pp 4 is illegal (16 GPUs)
    study = search_study(write_study, "infeasible", sampler="random", trials=25,
                         constraints=["memory_peak_gib <= 60"])
    run_search(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    feasible = [r for r in table.to_pylist() if r["feasible"]]
    assert len(timed) == len({r["point_id"] for r in feasible}) > 0  # only feasible points were timed

    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    assert len(trials) == 25 and not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    infeasible = [t for t in trials if "infeasible_reason" in t.user_attrs or "illegal_reason" in t.user_attrs]
    assert infeasible and len(infeasible) < 25
    for trial in infeasible:
        assert trial.state == optuna.trial.TrialState.PRUNED and trial.values is None
        assert trial.constraints["feasible"] == 1.0
    rows = {r["trial_number"]: r for r in table.to_pylist()}
    for trial in trials:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert trial.constraints["feasible"] == 0.0
            assert trial.constraints["memory_peak_gib <= 60"] == pytest.approx(rows[trial.number]["memory_peak_gib"] - 60)
            assert trial.values == [rows[trial.number]["step_time_s"]]


def test_same_seed_and_parallel_1_give_identical_tables(write_study):
    tables = []
    for name in ("first", "second"):
        study = search_study(write_study, name, space={"hardware.gpu.hbm.bandwidth": {"low": "1 TB/s", "high": "3 TB/s", "log": True}})
        run_search(study, executor="inprocess", progress=False)
        tables.append(by_trial(read_results(study.output)))
    assert tables[0] == tables[1]
    assert {r["sampler"] for r in tables[0]} == {"tpe"}
    metadata = read_metadata(study.output)  # the report reads importances and history through these
    stored = optuna.load_study(study_name=metadata["optuna_study"], storage=reader_storage(metadata["optuna_storage"]))
    assert len(stored.trials) == SEARCH["trials"] and stored.metric_names == ["step_time_s"]


def test_a_configuration_already_in_the_table_is_not_recomputed(write_study):
    study = search_study(write_study, "repeat", space={"tp": [8], "pp": [1, 2], "zero": [1], "micro_batch": [1],
                                                       "recompute": ["none"]}, sampler="random", trials=10)
    report = run_search(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    assert report.evaluated == 2 and report.from_table == 8
    assert sorted(table.column("trial_number").to_pylist()) == list(range(10))
    assert sorted(table.column("eval_time_s").to_pylist())[:8] == [0.0] * 8
    # raising trials continues the same Optuna study, still without recomputing
    again = run_search(search_study(write_study, "repeat", space={"tp": [8], "pp": [1, 2], "zero": [1], "micro_batch": [1],
                                                                  "recompute": ["none"]}, sampler="random", trials=13),
                       executor="inprocess", progress=False)
    assert again.before == 10 and again.trials == 13 and again.evaluated == 0


def test_sigkill_midway_then_rerun_loses_and_duplicates_no_trial(write_study):
    path = write_study(name="killed", space=SPACE, search={**SEARCH, "trials": 40, "sampler": "random"})
    study = load_study(path)
    command = [sys.executable, "-m", "sweep.cli", "sweep", str(path), "--local", "--workers", "1", "--quiet"]
    sigkill_after_parts(command, study.output, 4)
    assert 0 < read_results(study.output).num_rows < 40

    assert subprocess.run(command, capture_output=True).returncode == 0
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    assert [t.number for t in trials] == list(range(40))
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    legal = sorted(t.number for t in trials if "illegal_reason" not in t.user_attrs)
    assert sorted(read_results(study.output).column("trial_number").to_pylist()) == legal


def test_a_trial_stopped_while_optuna_drew_its_parameters_is_finished_on_resume(write_study):
    study = search_study(write_study, "half-asked", sampler="random", trials=2)
    run_search(study, executor="inprocess", progress=False)
    stored = optuna.load_study(study_name=study.name, storage=open_storage(study.search.storage))
    half = stored.ask()  # a Ctrl-C inside Study.ask: the trial exists, RUNNING, with one parameter of five
    half.suggest_categorical("tp", [1, 2, 4, 8])

    report = run_search(search_study(write_study, "half-asked", sampler="random", trials=4),
                        executor="inprocess", progress=False)
    assert report.resumed == 1 and report.trials == 4
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    assert trials[2].params["tp"] == half.params["tp"] and trials[2].params.keys() == trials[0].params.keys()


def test_a_run_stopped_between_writing_rows_and_telling_resumes_from_the_rows(write_study, monkeypatch):
    from sweep.search.loop import SearchLoop

    study = search_study(write_study, "stopped", space={"cp": [1, 2]}, parallel=4, trials=16)
    told, tell = [], SearchLoop.tell

    def tell_then_stop(self, asked, row):
        if len(told) == 6:  # the second round's rows are written; two of its trials are told
            raise KeyboardInterrupt
        told.append(asked.number)
        tell(self, asked, row)

    monkeypatch.setattr(SearchLoop, "tell", tell_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_search(study, executor="inprocess", progress=False)
    monkeypatch.setattr(SearchLoop, "tell", tell)
    first = read_results(study.output)
    report = run_search(study, executor="inprocess", progress=False)
    assert report.resumed == 2 and report.before == 6
    table = read_results(study.output)
    final = {r["trial_number"]: r for r in by_trial(table)}
    assert all(final[r["trial_number"]] == r for r in by_trial(first))  # rows written before the stop are kept as they are
    assert report.evaluated == len(set(table.column("point_id").to_pylist())) - len(set(first.column("point_id").to_pylist()))
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    legal = sorted(t.number for t in trials if "illegal_reason" not in t.user_attrs)
    assert [t.number for t in trials] == list(range(16)) and sorted(table.column("trial_number").to_pylist()) == legal


def test_refinement_adds_simulator_rows_and_compares_rankings(write_study):
    study = search_study(write_study, "refine", trials=10, refine={"backend": "astra-hierarchical", "top": 3})
    report = run_search(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    refined = [r for r in table.to_pylist() if r["backend"] == "astra-hierarchical"]
    assert len(refined) == report.refine.rows == 3
    assert -1.0 <= report.refine.kendall_tau <= 1.0
    assert {r["trial_number"] for r in refined} == {n for n, _, _ in report.refine.ranks}


def test_pareto_query_on_a_hand_made_table(tmp_path, capsys):
    # (step time, memory): b beats a on both; c and d trade off; e ties d exactly; f has no time
    rows = {"point_id": ["a", "b", "c", "d", "e", "f"], "step_time_s": [3.0, 2.0, 1.0, 4.0, 4.0, None],
            "memory_peak_gib": [30.0, 20.0, 40.0, 10.0, 10.0, 5.0], "mfu": [0.1, 0.5, 0.6, 0.2, 0.2, None]}
    pq.write_table(pa.table(rows), tmp_path / "part-000000.parquet")
    assert main(["query", str(tmp_path), "--pareto", "step_time_s,memory_peak_gib", "--format", "json"]) == 0
    assert [r["point_id"] for r in json.loads(capsys.readouterr().out)] == ["c", "b", "d", "e"]
    assert main(["query", str(tmp_path), "--pareto", "mfu,memory_peak_gib", "--format", "json"]) == 0
    # mfu is maximised: a falls to b; best mfu first
    assert [r["point_id"] for r in json.loads(capsys.readouterr().out)] == ["c", "b", "d", "e"]


MALFORMED = {  # changes to the search block or space -> (field named, value shown)
    "unknown sampler": ({"search": {"sampler": "bayes"}}, "search.sampler", "bayes"),
    "zero trials": ({"search": {"trials": 0}}, "search.trials", "0"),
    "bad direction": ({"search": {"objectives": ["fastest step_time_s"]}}, "search.objectives", "fastest step_time_s"),
    "unknown objective": ({"search": {"objectives": ["minimize speed"]}}, "search.objectives", "speed"),
    "fault objective": ({"search": {"objectives": ["minimize slowdown_p95"]}}, "search.objectives", "faults: block"),
    "bad constraint": ({"search": {"constraints": ["memory_peak_gib < 70"]}}, "search.constraints", "memory_peak_gib < 70"),
    "unknown key": ({"search": {"budget": 5}}, "search.budget", "5"),
    "cmaes, two objectives": ({"search": {"sampler": "cmaes", "objectives": ["step_time_s", "memory_peak_gib"]}},
                              "search.sampler", "cmaes"),
    "refine analytical": ({"search": {"refine": {"backend": "analytical"}}}, "search.refine.backend", "analytical"),
    "range low > high": ({"space": {"micro_batch": {"low": 4, "high": 1}}}, "space.micro_batch", "4"),
    "log with step": ({"space": {"hardware.gpu.hbm.bandwidth": {"low": "1 TB/s", "high": "2 TB/s", "log": True, "step": "0.1 TB/s"}}},
                      "space.hardware.gpu.hbm.bandwidth", "step"),
    "step does not divide": ({"space": {"hardware.gpu.hbm.bandwidth": {"low": "1 TB/s", "high": "2 TB/s", "step": "0.3 TB/s"}}},
                             "space.hardware.gpu.hbm.bandwidth.step", "0.3 TB/s"),
    "mixed units": ({"space": {"hardware.gpu.hbm.bandwidth": {"low": "1 TB/s", "high": "40 MB"}}},
                    "space.hardware.gpu.hbm.bandwidth", "40 MB"),
    "float tp": ({"space": {"tp": {"low": 1, "high": 8.5}}}, "space.tp", "8.5"),
    "range on recompute": ({"space": {"recompute": {"low": 1, "high": 2}}}, "space.recompute", "takes a list"),
    "range key": ({"space": {"tp": {"low": 1, "high": 8, "base": 2}}}, "space.tp.base", "2"),
    "range without search": ({"space": {"tp": {"low": 1, "high": 8}}, "search": None}, "space.tp", "needs a search: block"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_search_or_range_gets_one_line_and_writes_nothing(kind, write_study, tmp_path, capsys):
    changes, field, shown = MALFORMED[kind]
    search = changes.get("search", {})
    fields = {"search": None if search is None else {**SEARCH, **search}}
    path = write_study(name="bad", space={**SPACE, **changes.get("space", {})}, **fields)
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rapid sweep: error: ")
    assert f"'{field}'" in err and shown in err
    assert not (tmp_path / "results").exists()


def test_a_sampler_that_cannot_run_names_its_missing_package(write_study, capsys):
    from importlib.util import find_spec
    if find_spec("torch") is not None:
        pytest.skip("torch is installed here, so the gp sampler can run")
    assert main(["sweep", str(write_study(space=SPACE, search={**SEARCH, "sampler": "gp"})), "--quiet"]) == 2
    assert "needs the Python package torch" in capsys.readouterr().err


def test_rapid_sweep_prints_the_pareto_front_of_a_two_objective_search(write_study, capsys):
    path = write_study(name="front", space={**SPACE, "micro_batch": {"low": 1, "high": 2}},
                       search={**SEARCH, "sampler": "nsga2", "trials": 8, "parallel": 4,
                               "objectives": ["minimize step_time_s", "minimize memory_peak_gib"]})
    assert main(["sweep", str(path), "--local", "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "nsga2 search, 8 of 8 trials" in out and "Pareto front" in out and "optuna: study 'front'" in out
    assert set(read_results(load_study(path).output).column("micro_batch").to_pylist()) <= {1, 2}


def test_a_search_with_no_feasible_trial_says_so_and_a_pareto_query_over_no_rows_is_empty(write_study, capsys):
    path = write_study(name="none", space=SPACE, search={**SEARCH, "sampler": "random", "trials": 4,
                                                          "constraints": ["memory_peak_gib <= 1"]})
    assert main(["sweep", str(path), "--local", "--workers", "1", "--quiet"]) == 0
    assert "no trial so far is feasible within memory_peak_gib <= 1" in capsys.readouterr().out
    output = str(load_study(path).output)
    assert main(["query", output, "--pareto", "step_time_s,memory_peak_gib", "--where", "tp = 99", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("sampler", ["nsga2", "random", "qmc", "cmaes"])
def test_every_installed_sampler_runs_a_short_search(sampler, write_study):
    study = search_study(write_study, sampler, sampler=sampler, trials=4)
    report = run_search(study, executor="inprocess", progress=False)
    assert report.trials == 4
    assert set(read_results(study.output).column("sampler").to_pylist()) == {sampler}


def test_output_override_moves_the_default_optuna_storage_with_the_table(tmp_path):
    """`rapid sweep STUDY --output DIR` keeps the search's default storage beside the table."""
    study_file = tmp_path / "s.yaml"
    study_file.write_text(
        "name: moved\nmodel: llama3.1-8b\nhardware: a100-sxm4-80gb\ngpus: 8\n"
        "workload: {mode: train, global_batch: 16, seq: 2048}\n"
        "space: {tp: [1, 2, 4, 8]}\nsearch: {sampler: random, trials: 2}\n")
    moved = load_study(study_file, output=str(tmp_path / "elsewhere"))
    assert moved.output == tmp_path / "elsewhere"
    assert moved.search.storage == f"journal:///{(tmp_path / 'elsewhere' / '_optuna.journal').resolve()}"


def test_the_default_optuna_storage_leaves_the_folder_readable_as_one_parquet_dataset(write_study):
    """pandas.read_parquet(FOLDER) skips only files starting with '_' or '.', so the journal
    file kept beside the table must be one of those."""
    import pandas as pd

    study = search_study(write_study, "readable", sampler="random", trials=3)
    run_search(study, executor="inprocess", progress=False)
    assert len(pd.read_parquet(study.output)) == read_results(study.output).num_rows


def test_a_search_begun_with_the_old_storage_name_keeps_it(write_study):
    """A folder whose Optuna study lives in optuna.db (the earlier default) resumes from it."""
    path = write_study(name="old", space=SPACE, search={**SEARCH, "trials": 2})
    output = load_study(path).output
    output.mkdir(parents=True)
    (output / "optuna.db").touch()
    assert load_study(path).search.storage == f"sqlite:///{(output / 'optuna.db').resolve()}"


def test_a_storage_written_as_a_database_path_stays_sqlite(write_study, tmp_path):
    """A .journal or .log path is a journal file; any other path is SQLite, as before."""
    for name, url in (("trials.db", f"sqlite:///{(tmp_path / 'trials.db').resolve()}"),
                      ("trials.log", f"journal:///{(tmp_path / 'trials.log').resolve()}")):
        path = write_study(name="paths", space=SPACE, search={**SEARCH, "trials": 2, "storage": str(tmp_path / name)})
        assert load_study(path).search.storage == url


def test_the_journal_file_is_optunas_own_format_and_a_removed_one_starts_afresh(write_study):
    study = search_study(write_study, "journal", sampler="random", trials=3)
    run_search(study, executor="inprocess", progress=False)
    assert len(optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).trials) == 3
    (study.output / "_optuna.journal").unlink()
    with pytest.raises(KeyError):
        optuna.load_study(study_name=study.name, storage=open_storage(study.search.storage))
