"""Commands and tables say what they mean: numbers carry their units in tables (raw in CSV and
JSON), grouped illegal reasons read as a pattern, an infeasible point has no time, validate
prints whole case names into a pipe, `--pareto` agrees with a search's own front, and the
quick start's top rows are not pairs of the same point."""
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.search.loop import best_rows, run_search
from sweep.store.parts import read_results
from sweep.study.loader import load_study
from sweep.study.grid import plan_study
from sweep.study.space import AUTO

ROOT = Path(__file__).resolve().parent.parent


def test_a_search_table_prints_bandwidth_capacity_and_time_with_units(tmp_path, capsys):
    # a search draws hardware knobs as plain numbers in base units (bytes/s, bytes)
    rows = {"point_id": ["a"], "hardware_gpu_hbm_bandwidth": [6.156e12], "hardware_gpu_l2_capacity": [3.2e7],
            "hardware_gpu_hbm_bandwidth_bps": [2.039e12], "step_time_s": [4.092], "breakdown_bubble_s": [0.056],
            "tokens_per_s": [64069.3], "memory_peak_gib": [77.11], "mfu": [0.62]}
    pq.write_table(pa.table(rows), tmp_path / "part-000000.parquet")
    assert main(["query", str(tmp_path), "--columns", *rows]) == 0
    out = capsys.readouterr().out
    for shown in ("6.156 TB/s", "32 MB", "2.039 TB/s", "4.092 s", "56 ms", "64,069", "77.11 GiB", "0.62"):
        assert shown in out, shown
    assert "e+" not in out
    assert main(["query", str(tmp_path), "--format", "json"]) == 0  # machine-readable output stays raw
    assert json.loads(capsys.readouterr().out)[0]["hardware_gpu_hbm_bandwidth"] == 6.156e12


def test_one_column_reads_in_one_unit(tmp_path, capsys):
    pq.write_table(pa.table({"point_id": ["a", "b"], "step_time_s": [2.5, 0.75]}), tmp_path / "part-000000.parquet")
    assert main(["query", str(tmp_path), "--columns", "point_id", "step_time_s"]) == 0
    out = capsys.readouterr().out
    assert "2.5 s" in out and "0.75 s" in out and "ms" not in out


def test_a_dry_run_groups_illegal_points_under_a_pattern_not_one_points_numbers(write_study, capsys):
    # tp 3 and 6 on 32 heads: one group of illegal points whose members carry different numbers
    path = write_study(gpus=96, workload={"mode": "train", "global_batch": 192, "seq": 4096},
                       space={"tp": [1, 2, 3, 4, 6, 8], "pp": [1], "cp": [1], "micro_batch": [1]})
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "illegal: heads (32) not divisible by tp (N)" in out
    assert "(3)" not in out and "(6)" not in out
    assert main(["sweep", str(path), "--dry-run", "--json"]) == 0
    reasons = json.loads(capsys.readouterr().out)["illegal_reasons"]
    assert reasons == {"heads (32) not divisible by tp (N)": plan_study(load_study(path)).illegal_count}


def test_an_infeasible_point_has_no_time_and_says_why(capsys):
    argv = ["run", "--model", "llama3.1-70b", "--hardware", "a100-sxm4-80gb", "--tp", "2", "--global-batch", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "not timed" in out
    assert "MFU" not in out.replace("(MFU,", "") and "iteration" in out and "seconds" not in out
    assert main(argv + ["--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["feasible"] is False and record["breakdown"] == {}
    assert [record[k] for k in ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s")] == [None] * 5


def test_an_infeasible_inference_point_prints_no_ttft(capsys):
    assert main(["run", "--model", "llama3.1-70b", "--hardware", "a100-sxm4-80gb", "--tp", "2", "--mode", "infer",
                 "--batch", "64", "--prompt", "8192"]) == 0
    out = capsys.readouterr().out
    assert "not timed" in out and "TTFT " not in out


def test_validate_into_a_pipe_prints_every_case_name_whole():
    done = subprocess.run([sys.executable, "-m", "sweep.cli", "validate"], capture_output=True, text=True, cwd=ROOT)
    listed = subprocess.run([sys.executable, "-m", "sweep.cli", "validate", "--json"], capture_output=True, text=True,
                            cwd=ROOT)
    assert done.returncode == 0 and "…" not in done.stdout
    lines = done.stdout.splitlines()
    for case in json.loads(listed.stdout)["cases"]:
        assert any(f" {case['case']} " in line for line in lines), case["case"]


def test_pareto_query_agrees_with_the_front_the_search_printed(write_study, capsys):
    # the constraint cuts points off the unconstrained front: the query must leave them out too
    space = {"tp": [1, 2, 4, 8], "pp": [1, 2], "cp": [1], "zero": [0, 1], "micro_batch": [1, 2],
             "recompute": ["none", "full"], "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}
    study = load_study(write_study(name="front", space=space, search={
        "sampler": "random", "trials": 24, "parallel": 1, "seed": 0,
        "objectives": ["minimize step_time_s", "minimize memory_peak_gib"], "constraints": ["memory_peak_gib <= 40"]}))
    run_search(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    searched = set(best_rows(study, table).column("point_id").to_pylist())
    assert main(["query", str(study.output), "--pareto", "step_time_s,memory_peak_gib", "--format", "json"]) == 0
    queried = json.loads(capsys.readouterr().out)
    assert {r["point_id"] for r in queried} == searched
    assert all(r["memory_peak_gib"] <= 40 for r in queried)
    # and the constraint mattered: the fastest feasible point needs more than 40 GiB
    fastest = min((r for r in table.to_pylist() if r["feasible"]), key=lambda r: r["step_time_s"])
    assert fastest["memory_peak_gib"] > 40 and fastest["point_id"] not in searched


def test_the_quick_starts_top_rows_are_not_pairs_of_the_same_point(tmp_path):
    data = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump({**data, "output": str(tmp_path / "out")}, sort_keys=False))
    study = load_study(path)
    run_study(study, executor="inprocess", progress=False)
    rows = [r for r in read_results(study.output).to_pylist() if r["feasible"]]
    chosen = [k.column for k in study.space.knobs if k.values != (AUTO,)]  # not dp and sp, which follow
    knobs = [k for k in chosen if len({r[k] for r in rows}) > 1]
    metrics = ("step_time_s", "memory_peak_gib")
    for knob in knobs:  # no two values of a knob give every layout the same numbers
        others = [k for k in knobs if k != knob]
        by_value = {}
        for r in rows:
            by_value.setdefault(r[knob], {})[tuple(r[k] for k in others)] = tuple(r[m] for m in metrics)
        values = sorted(by_value, key=str)
        for i, a in enumerate(values):
            for b in values[i + 1:]:
                shared = by_value[a].keys() & by_value[b].keys()
                assert not shared or any(by_value[a][k] != by_value[b][k] for k in shared), (
                    f"{knob} {a} and {b} give the same rows in the quick start")
