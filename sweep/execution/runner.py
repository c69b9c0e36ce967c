"""Fan batches of points out to workers and stream the tables back.

Three executors share one loop (`run_batches`): in the driver's own process, a local
process pool (`--local`), and Ray (embedded, or an existing cluster with `--address`).
The loop keeps a bounded number of batches in flight (back-pressure), resubmits a batch
whose worker or node died, and hands each finished table to the caller as it arrives."""
import os
import signal
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

    def close(self) -> None:
        self._queue.clear()


_POOL_CONTEXT = None
PARENT_POLL_S = 0.5


def _set_pool_context(context: WorkContext) -> None:
    """Worker start-up: keep the context, leave Ctrl-C to the driver (which stops the pool
    and says so in one line), and exit as soon as the driver is gone, even after SIGKILL."""
    global _POOL_CONTEXT
    _POOL_CONTEXT = context
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _evaluate_in_pool(batch):
    return evaluate_batch(_POOL_CONTEXT, batch)


class LocalExecutor:
    """A plain process pool (`--local`); a pool broken by a dying worker is replaced."""

    def __init__(self, context: WorkContext, workers: int | None = None):
        self.context = context
        self.workers = workers or os.cpu_count() or 1
        self.note = f"running on {self.workers} local worker processes"
        self.pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, initializer=_set_pool_context, initargs=(self.context,))

    def submit(self, batch):
        try:
            return self.pool.submit(_evaluate_in_pool, batch)
        except BrokenProcessPool:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._start()
            return self.pool.submit(_evaluate_in_pool, batch)

    def wait(self, handles):
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [(f, f.exception() or f.result()) for f in done]

    def retryable(self, error) -> bool:
        return isinstance(error, BrokenProcessPool)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


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

    def submit(self, batch):
        return self.task.remote(self.context_ref, batch)

    def wait(self, handles):
        ready, rest = self.ray.wait(handles, num_returns=1)
        if rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        outcomes = []
        for ref in ready:
            try:
                outcomes.append((ref, self.ray.get(ref)))
            except self.ray.exceptions.RayError as err:
                outcomes.append((ref, err))
        return outcomes

    def retryable(self, error) -> bool:
        """Lost workers, nodes and objects are worth another try; an error in our code is not."""
        return not isinstance(error, self.ray.exceptions.RayTaskError)

    def close(self) -> None:
        if self.owns_ray:
            self.ray.shutdown()


def make_executor(kind: str, context: WorkContext, address: str | None = None, workers: int | None = None):
    """`inprocess`, `local` or `ray`."""
    if kind == "inprocess":
        return InProcessExecutor(context)
    if kind == "local":
        return LocalExecutor(context, workers)
    return RayExecutor(context, address, workers)
