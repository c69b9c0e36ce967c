"""Shared helpers: study files written into a temporary folder, results kept there too."""
import dataclasses
import os

import pytest
import yaml

import core

# Ray on these machines must stay on loopback (see README: Running on Ray).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

SMALL_STUDY = {
    "name": "small",
    "model": "llama3.1-8b",
    "hardware": "a100-sxm4-80gb",
    "gpus": 16,
    "workload": {"mode": "train", "global_batch": 64, "seq": 4096},
    "space": {
        "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "cp": [1, 2], "dp": "auto",
        "zero": [0, 1], "micro_batch": [1, 2], "recompute": ["none", "full"],
        "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1555 GB/s"],
    },
}


@pytest.fixture
def write_study(tmp_path):
    """write_study(**fields) -> path of a study file; `space` entries merge into the small study's."""
    def write(name="small", space=None, drop=(), **fields):
        study = {**SMALL_STUDY, "name": name, "output": str(tmp_path / "results" / name), **fields}
        study["space"] = {**SMALL_STUDY["space"], **(space or {})}
        for key in drop:
            study.pop(key)
        path = tmp_path / f"study-{len(list(tmp_path.glob('study-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        return path
    return write


@pytest.fixture(scope="session")
def small_results(tmp_path_factory):
    """The small study, evaluated once in-process: its results folder."""
    from sweep.execution.engine import run_study
    from sweep.study.loader import load_study

    folder = tmp_path_factory.mktemp("small")
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump({**SMALL_STUDY, "output": str(folder / "results")}, sort_keys=False))
    run_study(load_study(path), executor="inprocess", progress=False)
    return folder / "results"


@pytest.fixture(scope="session")
def a100():
    return core.load_hardware("a100-sxm4-80gb")


@pytest.fixture(scope="session")
def a100_links():
    """A100 as the link-level simulator sees it: its NVLink without NCCL's pipeline fills, which
    core's closed forms cost and the simulator's bare rings do not, so that the analytical and
    replay backends can be held to the same communication time."""
    hw = core.load_hardware("a100-sxm4-80gb")
    nvlink = dataclasses.replace(hw.network[0], ring_fill_chunks=0.0, all_to_all_fill_chunks=0.0,
                                 byte_reduce_fill_chunks=0.0)
    return dataclasses.replace(hw, network=(nvlink, *hw.network[1:]))


@pytest.fixture(scope="session")
def h100():
    return core.load_hardware("h100-sxm5-80gb")
