"""The results table: Parquet parts written atomically, resumable, one schema, open anywhere."""
import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweep.execution.engine import run_study
from sweep.store.parts import ResultStore, part_files, read_metadata, read_results
from sweep.study.grid import plan_study
from sweep.study.loader import load_study


@pytest.fixture
def finished(write_study):
    study = load_study(write_study())
    report = run_study(study, executor="inprocess", part_rows=100, progress=False)
    return study, report


def test_one_row_per_legal_point_with_knobs_metrics_and_breakdown(finished):
    study, report = finished
    table = read_results(study.output)
    points = plan_study(study).points
    assert table.num_rows == len(points) == report.evaluated == report.legal
    assert table.column("point_id").to_pylist() == sorted(p.point_id for p in points)
    for column in ("tp", "pp", "cp", "dp", "zero", "micro_batch", "recompute", "hardware_gpu_hbm_bandwidth",
                   "feasible", "infeasible_reason", "step_time_s", "mfu", "memory_peak_gib",
                   "breakdown_compute_s", "memory_optimizer_gib", "eval_time_s"):
        assert column in table.column_names
    assert report.parts == len(part_files(study.output)) > 1


def test_memory_infeasible_points_are_written_but_not_timed(finished):
    study, report = finished
    frame = read_results(study.output).to_pandas()
    infeasible = frame[~frame.feasible]
    assert len(infeasible) == report.infeasible > 0
    assert infeasible.infeasible_reason.str.contains("GiB per GPU").all()
    assert infeasible.step_time_s.isna().all() and infeasible.breakdown_compute_s.isna().all()
    assert frame[frame.feasible].step_time_s.notna().all()


def test_metadata_records_study_version_and_commit(finished):
    study, _ = finished
    meta = read_metadata(study.output)
    assert meta["study"] == study.text and meta["version"] and meta["git_commit"]
    assert meta["knobs"].split(",")[:3] == ["dp", "tp", "pp"]


def test_table_opens_directly_in_pandas_and_duckdb(finished):
    study, report = finished
    frame = pd.read_parquet(study.output)
    assert len(frame) == report.evaluated
    count = duckdb.sql(f"select count(*) from read_parquet('{study.output}/*.parquet')").fetchall()[0][0]
    assert count == report.evaluated


def test_table_opens_directly_in_polars(finished):
    polars = pytest.importorskip("polars")
    study, report = finished
    assert polars.read_parquet(f"{study.output}/*.parquet").height == report.evaluated


def test_rerun_resumes_and_fresh_starts_over(finished):
    study, report = finished
    before = read_results(study.output).drop_columns(["eval_time_s"])
    part_files(study.output)[-1].unlink()
    (study.output / ".part-000099.parquet.tmp").write_bytes(b"half a part")
    again = run_study(study, executor="inprocess", progress=False)
    assert again.evaluated == report.evaluated - again.skipped > 0
    assert not list(study.output.glob(".*.tmp"))
    assert read_results(study.output).drop_columns(["eval_time_s"]).equals(before)
    assert run_study(study, executor="inprocess", progress=False).evaluated == 0
    assert run_study(study, executor="inprocess", fresh=True, progress=False).evaluated == report.evaluated


def test_parts_with_different_breakdown_keys_share_one_schema(tmp_path):
    store = ResultStore(tmp_path, {"study": "x"})
    store.write_part([pa.table({"point_id": ["b"], "step_time_s": [1.0], "breakdown_compute_s": [1.0]})])
    store.write_part([pa.table({"point_id": ["a", "c"], "step_time_s": [2.0, None],
                                "breakdown_comm_ib_s": [0.5, None]})])
    store.harmonise()
    schemas = {str(pq_schema) for pq_schema in (pq.read_schema(p).remove_metadata() for p in part_files(tmp_path))}
    assert len(schemas) == 1
    table = read_results(tmp_path).to_pydict()
    assert table["point_id"] == ["a", "b", "c"]
    assert table["breakdown_compute_s"] == [0.0, 1.0, None]  # 0 s where timed, null where not
    assert table["breakdown_comm_ib_s"] == [0.5, 0.0, None]


def test_sql_reads_parts_of_different_columns_as_the_whole_table(tmp_path, capsys):
    """A scan would leave a column a part lacks null; read whole, it is 0 s where timed."""
    from sweep.cli import main
    from sweep.store.parts import results_dataset
    store = ResultStore(tmp_path, {"study": "x"})
    store.write_part([pa.table({"point_id": ["b"], "feasible": [True], "step_time_s": [1.0],
                                "breakdown_compute_s": [1.0]})])
    store.write_part([pa.table({"point_id": ["a"], "feasible": [True], "step_time_s": [2.0],
                                "breakdown_comm_ib_s": [0.5]})])
    store.close()
    assert results_dataset(part_files(tmp_path)) is None
    assert main(["query", str(tmp_path), "--sql", "select avg(breakdown_comm_ib_s) as ib from results",
                 "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "0.25"


def test_batches_of_one_part_with_different_breakdown_keys_get_0_s_where_timed(tmp_path):
    store = ResultStore(tmp_path, {"study": "x"})
    store.write_part([pa.table({"point_id": ["b"], "step_time_s": [1.0], "breakdown_comm_ring_s": [0.2]}),
                      pa.table({"point_id": ["a", "c"], "step_time_s": [2.0, None], "breakdown_compute_s": [2.0, None]})])
    table = read_results(tmp_path).to_pydict()
    assert table["breakdown_comm_ring_s"] == [0.0, 0.2, None] and table["breakdown_compute_s"] == [2.0, 0.0, None]
