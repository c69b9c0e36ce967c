"""Which Ray a sweep runs on: a cluster already running on this machine is joined (not a
crash), a stale record of one is ignored, and an address nobody answers fails in one line.
Each test keeps Ray's bookkeeping in a private RAY_TMPDIR so it never sees, nor is seen
by, another Ray on the machine."""
import shutil
import tempfile
import time

import pytest
import ray
from ray.cluster_utils import Cluster

from core import SpecError
from sweep.execution.engine import run_study
from sweep.store.parts import read_results
from sweep.study.loader import load_study

TINY_SPACE = {"tp": [1, 2], "pp": [1], "cp": [1], "zero": [0], "micro_batch": [1], "recompute": ["none"],
              "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}


@pytest.fixture
def private_ray_tmp(monkeypatch):
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    monkeypatch.setenv("RAY_TMPDIR", folder)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_running_local_cluster_is_joined_not_a_crash(private_ray_tmp, write_study, capsys):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    try:
        study = load_study(write_study(name="joined", space=TINY_SPACE, gpus=2))
        report = run_study(study, executor="ray", workers=2, progress=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert "already running on this machine" in capsys.readouterr().err
    assert read_results(study.output).num_rows == report.evaluated == 2


def test_a_stale_cluster_record_is_ignored(private_ray_tmp, write_study):
    with open(f"{private_ray_tmp}/ray_current_cluster", "w") as record:
        record.write("127.0.0.1:9")  # the discard port: nothing answers
    study = load_study(write_study(name="stale", space=TINY_SPACE, gpus=2))
    try:
        report = run_study(study, executor="ray", workers=1, progress=False)
    finally:
        ray.shutdown()
    assert report.evaluated == 2


def test_an_address_nobody_answers_fails_fast_in_one_line(private_ray_tmp, write_study):
    study = load_study(write_study(name="dead", space=TINY_SPACE, gpus=2))
    start = time.monotonic()
    with pytest.raises(SpecError, match="--address.*no Ray cluster answers there") as err:
        run_study(study, executor="ray", address="127.0.0.1:9", progress=False)
    assert time.monotonic() - start < 30
    assert "\n" not in str(err.value)
    assert not ray.is_initialized()
