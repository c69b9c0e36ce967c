"""Stopping a sweep: SIGTERM flushes finished rows and stops the workers (on Ray as with
`--local`), Ctrl-C prints one "stopping" line and no worker tracebacks, a batch still running
does not hold the stop up, and a SIGKILLed driver leaves no orphan."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sweep.store.parts import part_files, read_results
from sweep.study.loader import load_study

STOPPING = "rapid sweep: stopping; finished results are kept"
BIG_SPACE = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2, 4], "zero": [0, 1, 2, 3],
             "micro_batch": [1, 2, 4], "recompute": ["none", "selective", "full"],
             "hardware.gpu.hbm.bandwidth": [f"{1000 + 20 * i} GB/s" for i in range(60)]}
# 5,184 layouts x 60 bandwidths: a study that runs for many seconds on any machine, so the signal
# always finds it running (at 3 bandwidths it could end before the signal was sent)


def children(pid: int) -> list:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def started():
    """Processes a test started; whatever still runs at its end is killed (a failing test
    leaves nothing behind)."""
    pids = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_sweep(write_study, name, started, executor=("--local",)):
    study = load_study(write_study(name=name, gpus=64, space=BIG_SPACE,
                                   workload={"mode": "train", "global_batch": 128, "seq": 4096}))
    command = [sys.executable, "-m", "sweep.cli", "sweep", study.path, *executor, "--workers", "2",
               "--batch-points", "5", "--part-rows", "25", "--quiet"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    started.append(process.pid)
    deadline = time.monotonic() + 120
    while (len(part_files(study.output)) < 2 or len(children(process.pid)) < 2) and time.monotonic() < deadline:
        assert process.poll() is None, "the sweep ended before it could be stopped"
        time.sleep(0.01)
    workers = children(process.pid)
    started.extend(workers)
    return study, process, workers


def wait_gone(pids, seconds=10.0) -> list:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_sigterm_flushes_rows_and_stops_workers(write_study, started):
    study, process, workers = start_sweep(write_study, "terminated", started)
    os.kill(process.pid, signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.strip() == STOPPING
    assert wait_gone(workers) == []
    ids = read_results(study.output).column("point_id").to_pylist()
    assert len(ids) == len(set(ids)) > 0


def test_sigterm_on_an_embedded_ray_stops_as_with_local_workers(write_study, started):
    study, process, _ = start_sweep(write_study, "terminated-ray", started, executor=())
    os.kill(process.pid, signal.SIGTERM)  # Ray's own handler would print a native stack and exit 15
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err.strip()) == (130, STOPPING)
    ids = read_results(study.output).column("point_id").to_pylist()
    assert len(ids) == len(set(ids)) > 0


def test_ctrl_c_prints_one_line_and_no_worker_tracebacks(write_study, started):
    _, process, workers = start_sweep(write_study, "interrupted", started)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends: the whole process group
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "Traceback" not in err and err == STOPPING + "\n", err
    assert wait_gone(workers) == []


# `rapid sweep` whose pool workers evaluate one batch each, then hang in the next one
STUCK_SWEEP = textwrap.dedent("""
    import sys, time
    from sweep.cli import main
    from sweep.execution import runner

    real, done = runner.evaluate_batch, []

    def first_batch_only(context, batch):  # runs in each forked worker
        if done:
            time.sleep(3600)
        done.append(1)
        return real(context, batch)

    runner.evaluate_batch = first_batch_only
    sys.exit(main(sys.argv[1:]))
""")


def test_ctrl_c_does_not_wait_for_the_batches_still_running(write_study, started):
    study = load_study(write_study(name="stuck", gpus=64, space=BIG_SPACE,
                                   workload={"mode": "train", "global_batch": 128, "seq": 4096}))
    process = subprocess.Popen([sys.executable, "-c", STUCK_SWEEP, "sweep", study.path, "--local", "--workers", "2",
                                "--batch-points", "5", "--part-rows", "5", "--quiet"],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started.append(process.pid)
    deadline = time.monotonic() + 120
    while len(part_files(study.output)) < 2 and time.monotonic() < deadline:  # both workers' first batch
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.01)
    workers = children(process.pid)
    started.extend(workers)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)  # it waited an hour for the stuck batches before
    assert (process.returncode, err) == (130, STOPPING + "\n")
    assert wait_gone(workers) == []
    assert read_results(study.output).num_rows == 10  # the two finished batches, kept


def test_workers_exit_when_the_driver_is_killed(write_study, started):
    _, process, workers = start_sweep(write_study, "killed", started)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert wait_gone(workers) == [], "orphaned workers outlived the driver"
