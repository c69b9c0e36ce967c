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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
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
