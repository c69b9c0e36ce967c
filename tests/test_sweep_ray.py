"""The same study on embedded Ray, a local process pool and in-process gives one table."""
import pytest
import ray

from sweep.execution.engine import run_study
from sweep.store.parts import read_results
from sweep.study.loader import load_study

# Evaluation time is measured per point on whichever worker ran it: the one column that
# legitimately differs between runs.
VOLATILE = ["eval_time_s"]


@pytest.fixture(scope="module")
def ray_session():
    # address="local": a new embedded Ray even when `ray start` left a cluster running on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def comparable(study):
    return read_results(study.output).drop_columns(VOLATILE)


def test_ray_and_local_give_identical_tables(ray_session, write_study):
    on_ray = load_study(write_study(name="on-ray"))
    on_pool = load_study(write_study(name="on-pool"))
    in_process = load_study(write_study(name="in-process"))
    ray_report = run_study(on_ray, executor="ray", batch_points=16, part_rows=50, progress=False)
    run_study(on_pool, executor="local", workers=2, batch_points=16, part_rows=50, progress=False)
    run_study(in_process, executor="inprocess", progress=False)
    table = comparable(on_ray)
    assert table.num_rows == ray_report.legal == ray_report.evaluated > 100
    assert table.equals(comparable(on_pool))
    assert table.equals(comparable(in_process))


def test_ray_run_resumes_without_duplicates(ray_session, write_study):
    study = load_study(write_study(name="resumed"))
    first = run_study(study, executor="ray", batch_points=16, part_rows=50, progress=False)
    again = run_study(study, executor="ray", progress=False)
    assert again.evaluated == 0 and again.skipped == first.evaluated
    ids = read_results(study.output).column("point_id").to_pylist()
    assert len(ids) == len(set(ids)) == first.evaluated


def test_on_ray_the_workers_plan_the_grid(ray_session, write_study, monkeypatch):
    """The driver judges no chunk and plans no point on Ray (its own planner refuses here;
    the workers' is untouched): the count pass's totals, reasons and the table are still
    those of a --local run, which plans in the driver."""
    from sweep.study.grid import GridPlanner

    local = load_study(write_study(name="planned-here"))
    local_report = run_study(local, executor="local", workers=2, batch_points=16, part_rows=50, progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the driver planned a chunk")

    monkeypatch.setattr(GridPlanner, "chunk", refuse)
    monkeypatch.setattr(GridPlanner, "picked", refuse)
    on_ray = load_study(write_study(name="planned-on-workers"))
    ray_report = run_study(on_ray, executor="ray", batch_points=16, part_rows=50, progress=False)
    assert (ray_report.legal, ray_report.evaluated) == (local_report.legal, local_report.evaluated)
    assert ray_report.plan.illegal == local_report.plan.illegal
    assert list(ray_report.plan.illegal) == list(local_report.plan.illegal)  # the order the reasons are shown in
    assert ray_report.plan.illegal_examples == local_report.plan.illegal_examples
    assert comparable(on_ray).equals(comparable(local))


def test_ray_workers_skip_the_points_the_table_holds(ray_session, write_study):
    """A table that lost a part is completed on Ray with exactly that part's rows."""
    from sweep.store.parts import part_files

    study = load_study(write_study(name="lost-a-part"))
    first = run_study(study, executor="ray", batch_points=16, part_rows=50, part_seconds=1e9, progress=False)
    lost = part_files(study.output)[0]
    rows = read_results(study.output).num_rows
    lost.unlink()
    missing = rows - read_results(study.output).num_rows
    again = run_study(study, executor="ray", batch_points=16, progress=False)
    assert 0 < missing < first.evaluated
    assert (again.evaluated, again.skipped) == (missing, first.evaluated - missing)
    ids = read_results(study.output).column("point_id").to_pylist()
    assert len(ids) == len(set(ids)) == first.evaluated
