"""`rapid query`: filters, sorting, column choice, SQL and output formats over a study's table."""
import csv
import io
import json

import pytest

from sweep.cli import main


def query_json(capsys, folder, *args):
    assert main(["query", str(folder), *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_top_by_column_best_first(small_results, capsys):
    rows = query_json(capsys, small_results, "--where", "feasible", "--top", "5", "--by", "step_time_s")
    times = [r["step_time_s"] for r in rows]
    assert len(rows) == 5 and times == sorted(times)
    best_mfu = query_json(capsys, small_results, "--where", "feasible", "--top", "3", "--by", "mfu")
    assert [r["mfu"] for r in best_mfu] == sorted((r["mfu"] for r in best_mfu), reverse=True)


def test_where_and_columns(small_results, capsys):
    rows = query_json(capsys, small_results, "--where", "tp = 2 and recompute = 'full'", "--columns", "point_id", "tp", "recompute")
    assert rows and all(r == {"point_id": r["point_id"], "tp": 2, "recompute": "full"} for r in rows)


def test_sql_and_csv(small_results, capsys):
    assert main(["query", str(small_results), "--sql", "select tp, count(*) as n from results group by tp order by tp",
                 "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["tp"]) for r in table] == [1, 2, 4, 8]


def test_an_sql_result_is_titled_by_its_own_rows_over_the_table(small_results, capsys):
    assert main(["query", str(small_results), "--sql", "select count(*) as n from results"]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert title.startswith(str(small_results)) and "(SQL: 1 row over a table of" in title  # on one line


def test_sql_scans_the_parts_and_reads_as_the_whole_table_does(small_results, capsys):
    from sweep.store.parts import read_results, results_dataset
    from sweep.store.query import query
    statement = "select tp, count(*) as n, min(step_time_s) as best from results group by tp order by tp"
    from sweep.store.parts import part_files
    dataset = results_dataset(part_files(small_results))
    assert query(dataset, sql=statement) == query(read_results(small_results), sql=statement)


def test_table_format_prints_summary_columns(small_results, capsys):
    assert main(["query", str(small_results), "--top", "3", "--by", "step_time_s"]) == 0
    out = capsys.readouterr().out
    assert "step_time_s" in out and "hardware_gpu_hbm_bandwidth" in out and "breakdown_compute_s" not in out


@pytest.mark.parametrize("args, field", [
    (["--where", "no_such_column > 1"], "--where"),
    (["--by", "no_such_column"], "--by"),
    (["--sql", "selec nonsense"], "--sql"),
])
def test_bad_query_is_one_line_error(small_results, capsys, args, field):
    assert main(["query", str(small_results), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{field}'" in err


def test_missing_results_folder(tmp_path, capsys):
    assert main(["query", str(tmp_path / "nothing")]) == 2
    assert "no results table" in capsys.readouterr().err
