"""On a Ray cluster (a head and two worker nodes), losing a worker node mid-study still
completes every point: Ray retries the lost tasks, the driver resubmits lost results."""
import threading

import pytest
import ray
from ray.cluster_utils import Cluster

from sweep.execution.engine import run_study
from sweep.study.grid import plan_study
from sweep.store.parts import part_files, read_results
from sweep.study.loader import load_study


@pytest.fixture
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    workers = [cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1") for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_removing_a_worker_node_mid_study_completes_every_point(cluster, write_study):
    cluster, workers = cluster
    study = load_study(write_study(name="on-cluster"))
    removed, done = threading.Event(), threading.Event()

    def remove_when_under_way():
        while not part_files(study.output) and not done.is_set():
            done.wait(0.01)
        if not done.is_set():
            cluster.remove_node(workers[1], allow_graceful=False)
            removed.set()

    killer = threading.Thread(target=remove_when_under_way)
    killer.start()
    try:
        report = run_study(study, executor="ray", address=cluster.address, batch_points=4, part_rows=20,
                           progress=False)
    finally:
        done.set()
        killer.join()
    assert removed.is_set(), "the study finished before the node could be removed"
    ids = read_results(study.output).column("point_id").to_pylist()
    assert ids == sorted(p.point_id for p in plan_study(study).points)
    assert report.evaluated == report.legal == len(ids)
