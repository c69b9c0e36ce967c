"""Fan batches of points out to workers and stream the tables back.

Three executors share one loop (`run_batches`): in the driver's own process, a local
process pool (`--local`), and Ray (embedded, or an existing cluster with `--address`).
The loop keeps a bounded number of batches in flight (back-pressure), resubmits a batch
whose worker or node died, and hands each finished table to the caller as it arrives.

`close()` while an exception unwinds (Ctrl-C, SIGTERM, an error) stops at once: batches still
running are abandoned, not waited for (their rows were never written, so a rerun does them)."""
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from . import raycluster
from sweep.evaluation.context import WorkContext
from .worker import evaluate_batch

MAX_ATTEMPTS = 4  # per batch, on top of Ray's own task retries
IN_FLIGHT_PER_WORKER = 2


def run_batches(executor, batches, on_table) -> None:
    """Evaluate every batch on `executor`, calling `on_table(table, points)` per finished batch."""
    pending = {}
    source = iter(batches)

    def fill():
        while len(pending) < executor.workers * IN_FLIGHT_PER_WORKER:
            batch = next(source, None)
            if batch is None:
                return
            pending[executor.submit(batch)] = (batch, 1)

    fill()
    while pending:
        for handle, outcome in executor.wait(list(pending)):
            batch, attempts = pending.pop(handle)
            if isinstance(outcome, BaseException):
                if attempts >= MAX_ATTEMPTS or not executor.retryable(outcome):
                    raise outcome
                pending[executor.submit(batch)] = (batch, attempts + 1)
            else:
                on_table(outcome, batch)
        fill()


class InProcessExecutor:
    """Evaluates in the driver itself, one batch at a time: the baseline, and for tiny studies."""
    workers = 1
    note = "evaluating in this process"

    def __init__(self, context: WorkContext):
        self.context = context
        self._queue = {}

    def submit(self, batch):
        handle = object()
        self._queue[handle] = batch
        return handle

    def wait(self, handles):
        handle = handles[0]
        return [(handle, evaluate_batch(self.context, self._queue.pop(handle)))]

    def retryable(self, error) -> bool:
        return False

    def close(self, stop: bool | None = None) -> None:
        self._queue.clear()


_POOL_CONTEXT = None
PARENT_POLL_S = 0.5
# Container allocations between a worker's young-generation garbage collections (CPython's
# default: 700): core's memos keep many small objects, which each collection walked again.
GC_YOUNG_ALLOCATIONS = 50_000


def _set_pool_context(context: WorkContext) -> None:
    """Worker start-up: keep the context, leave Ctrl-C to the driver (which stops the pool
    and says so in one line), end at SIGTERM (the driver's handler, inherited at the fork, would
    turn it into a batch's exception, sent back through a result queue a dead sibling may hold
    locked), exit as soon as the driver is gone, even after SIGKILL, and collect garbage less
    often (_settle_gc)."""
    global _POOL_CONTEXT
    _POOL_CONTEXT = context
    _settle_gc()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _settle_gc() -> None:
    """What the worker starts with (modules, the context) leaves the collector's view
    (gc.freeze) and young collections run every GC_YOUNG_ALLOCATIONS allocations: at the
    default rate the 1.8 M-combination study's worker spent ~7 % of its instructions in the
    collector, at this one ~2 %. The model makes no reference cycles per point, so nothing
    waits much longer to be freed."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_ALLOCATIONS, *gc.get_threshold()[1:])


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _evaluate_in_pool(batch):
    return evaluate_batch(_POOL_CONTEXT, batch)


class LocalExecutor:
    """A plain process pool (`--local`), at most one worker per core (the work is all CPU); a
    pool broken by a dying worker is replaced."""

    def __init__(self, context: WorkContext, workers: int | None = None):
        self.context = context
        cores = os.cpu_count() or 1
        self.workers = min(workers or cores, cores)
        self.note = f"running on {self.workers} local worker processes" + (
            f" (--workers {workers} is more than this machine's {cores} cores)" if workers and workers > cores else "")
        self.pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, initializer=_set_pool_context, initargs=(self.context,))

    def submit(self, batch):
        try:
            return self.pool.submit(_evaluate_in_pool, batch)
        except BrokenProcessPool:
            self._kill_pool()  # its live workers may wait forever on a result queue the dead one held
            self.pool = self._start()
            return self.pool.submit(_evaluate_in_pool, batch)

    def wait(self, handles):
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [(f, f.exception() or f.result()) for f in done]

    def retryable(self, error) -> bool:
        return isinstance(error, BrokenProcessPool)

    def close(self, stop: bool | None = None) -> None:
        """Wait for the workers to finish; with `stop` (by default: when closing as an exception
        unwinds) kill them instead, so a stopped sweep exits at once, not after its batches."""
        if _stopping(stop):
            self._kill_pool()
        else:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _kill_pool(self) -> None:
        """Shuts the pool down without waiting for its batches: its workers are killed."""
        workers = list((getattr(self.pool, "_processes", None) or {}).values())
        manager = getattr(self.pool, "_executor_manager_thread", None)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.kill()  # SIGKILL: a batch half done has nothing to keep, and no traceback to print
        for worker in workers:
            worker.join(STOP_JOIN_S)
        if manager is not None:  # it closes its wake-up pipe as it ends: before the interpreter's exit
            manager.join(STOP_JOIN_S)  # hook writes to it (a race CPython 3.11 prints as a traceback)


class RayExecutor:
    """Ray tasks, one per batch, on the cluster `raycluster.connect` picks (reused and left
    running when Ray is already initialised in this process)."""

    def __init__(self, context: WorkContext, address: str | None = None, workers: int | None = None):
        import ray

        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        self.note = "running on the Ray session this process already holds"
        if self.owns_ray:
            self.note = raycluster.connect(ray, address, workers)
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.context_ref = ray.put(context)
        self.task = ray.remote(num_cpus=1, max_retries=3)(evaluate_batch)
        self.in_flight = set()

    def share(self, context: WorkContext) -> None:
        """Ship another context for the batches submitted from now on."""
        self.context_ref = self.ray.put(context)

    def submit(self, batch):
        ref = self.task.remote(self.context_ref, batch)
        self.in_flight.add(ref)
        return ref

    def wait(self, handles):
        ready, rest = [], handles
        while not ready:  # in short waits, so Ctrl-C is handled at once, not when a batch ends
            ready, rest = self.ray.wait(handles, num_returns=1, timeout=WAIT_SLICE_S)
        if rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        outcomes = []
        self.in_flight.difference_update(ready)
        for ref in ready:
            try:
                outcomes.append((ref, self.ray.get(ref)))
            except self.ray.exceptions.RayError as err:
                outcomes.append((ref, err))
        return outcomes

    def retryable(self, error) -> bool:
        """Lost workers, nodes and objects are worth another try; an error in our code is not."""
        return not isinstance(error, self.ray.exceptions.RayTaskError)

    def close(self, stop: bool | None = None) -> None:
        """Shut down a Ray this executor started; stopping on a cluster it joined, cancel the
        tasks still running there (an embedded Ray's shutdown ends its workers anyway)."""
        if _stopping(stop) and not self.owns_ray:
            for ref in self.in_flight:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - a task that just finished cannot be cancelled; nothing to do
                    pass
        self.in_flight.clear()
        if self.owns_ray:
            with _stderr_silenced(_stopping(stop)):
                self.ray.shutdown()


STOP_JOIN_S = 1.0
WAIT_SLICE_S = 0.1


@contextlib.contextmanager
def _stderr_silenced(silence: bool):
    """Stopping, an embedded Ray's shutdown fails the tasks still running and its core worker
    logs each one to file descriptor 2 ('Failed to push error to driver'); the user has been
    told the sweep is stopping, and those lines say nothing more."""
    if not silence:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _stopping(stop: bool | None) -> bool:
    """`stop` as given, or by default whether close() runs while an exception unwinds."""
    return sys.exc_info()[0] is not None if stop is None else stop


def make_executor(kind: str, context: WorkContext, address: str | None = None, workers: int | None = None):
    """`inprocess`, `local` or `ray`."""
    if kind == "inprocess":
        return InProcessExecutor(context)
    if kind == "local":
        return LocalExecutor(context, workers)
    return RayExecutor(context, address, workers)
