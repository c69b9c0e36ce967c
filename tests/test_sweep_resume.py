"""A study killed with SIGKILL midway and re-run ends with exactly the uninterrupted table."""
import subprocess
import sys
from pathlib import Path

from sweep.execution.engine import run_study
from sweep.store.parts import read_results
from sweep.study.loader import load_study
from killing import sigkill_after_parts

RAPID = [sys.executable, "-m", "sweep.cli"]
BIG_SPACE = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2, 4], "zero": [0, 1, 2, 3],
             "micro_batch": [1, 2, 4], "recompute": ["none", "selective", "full"],
             "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1800 GB/s", "1555 GB/s"]}


def sweep_command(path: Path) -> list:
    # small batches and parts so that a kill lands between many part writes
    return RAPID + ["sweep", str(path), "--local", "--workers", "1", "--batch-points", "5",
                    "--part-rows", "25", "--quiet"]


def test_sigkill_midway_then_rerun_gives_the_uninterrupted_table(write_study):
    killed = load_study(write_study(name="killed", gpus=64, space=BIG_SPACE,
                                    workload={"mode": "train", "global_batch": 128, "seq": 4096}))
    reference = load_study(write_study(name="reference", gpus=64, space=BIG_SPACE,
                                       workload={"mode": "train", "global_batch": 128, "seq": 4096}))
    sigkill_after_parts(sweep_command(Path(killed.path)), killed.output, 5)
    partial = read_results(killed.output).num_rows

    expected = run_study(reference, executor="inprocess", progress=False)
    assert 0 < partial < expected.evaluated

    rerun = subprocess.run(sweep_command(Path(killed.path)), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{partial} already in the table" in rerun.stdout
    assert not list(killed.output.glob(".*.tmp"))
    resumed = read_results(killed.output).drop_columns(["eval_time_s"])
    uninterrupted = read_results(reference.output).drop_columns(["eval_time_s"])
    ids = resumed.column("point_id").to_pylist()
    assert len(ids) == len(set(ids)) == expected.evaluated
    assert resumed.equals(uninterrupted)
