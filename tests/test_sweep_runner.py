"""The batch loop: every batch comes back once, even when a pool worker is killed mid-run."""
import multiprocessing
import os
import signal
import threading

from sweep.execution.engine import work_context
from sweep.study.grid import plan_study
from sweep.execution.runner import LocalExecutor, _set_pool_context, run_batches
from sweep.study.loader import load_study


def test_local_pool_replaces_a_killed_worker_and_finishes_every_batch(write_study):
    study = load_study(write_study())
    plan = plan_study(study)
    points = list(plan.points)
    batches = [points[i:i + 8] for i in range(0, len(points), 8)]
    executor = LocalExecutor(work_context(study, plan.models, plan.hardware), workers=2)
    seen, killed = [], []

    def on_table(table, batch):
        seen.extend(table.column("point_id").to_pylist())
        if not killed:
            victim = next(iter(executor.pool._processes))
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    try:
        run_batches(executor, batches, on_table)
    finally:
        executor.close()
    assert killed
    assert sorted(seen) == sorted(p.point_id for p in points)


def _start_like_a_pool_worker(context, started):
    _set_pool_context(context)
    started.set()
    threading.Event().wait()


def test_a_pool_worker_ends_at_sigterm_whatever_handler_the_driver_holds(write_study):
    """A worker forked from a driver that catches SIGTERM must still end at it: the pool's own
    clean-up of a broken pool terminates the survivors, which would otherwise wait forever.
    The worker is a plain forked process running the pool's initializer, so no pool thread
    reaps it before we read its exit code."""
    study = load_study(write_study())
    plan = plan_study(study)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    fork = multiprocessing.get_context("fork")
    started = fork.Event()
    worker = fork.Process(target=_start_like_a_pool_worker,
                          args=(work_context(study, plan.models, plan.hardware), started))
    try:
        worker.start()
        assert started.wait(30)
        worker.terminate()
        worker.join(30)
        assert worker.exitcode == -signal.SIGTERM
    finally:
        if worker.is_alive():
            worker.kill()
        signal.signal(signal.SIGTERM, previous)
