"""Points per second for 10,000 points: in-process (one core), a local process pool and
embedded Ray, start-up and warm-up excluded. The points are evaluated through the same
batch loop `rapid sweep` uses and their tables collected by the driver; writing Parquet
is left out, since it is the same driver-side cost for every executor.

    python scripts/bench_sweep.py [--points 10000] [--workers 2]
"""
import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from sweep.execution.engine import work_context  # noqa: E402
from sweep.study.grid import plan_study  # noqa: E402
from sweep.study.plan import locality_key  # noqa: E402
from sweep.execution.runner import make_executor, run_batches  # noqa: E402
from sweep.study.loader import load_study  # noqa: E402

STUDY = {
    "name": "bench",
    "model": "llama3.1-70b",
    "hardware": "a100-sxm4-80gb",
    "gpus": 64,
    "workload": {"mode": "train", "global_batch": 128, "seq": 4096},
    "space": {
        "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2], "dp": "auto", "zero": [0, 1, 2, 3],
        "micro_batch": [1, 2, 4], "recompute": ["none", "selective", "full"],
        "hardware.gpu.hbm.bandwidth": [f"{bw} GB/s" for bw in range(1200, 2400, 100)],
    },
}
BATCH_POINTS = 512


def measure(kind: str, context, points, warmup, workers: int, batch_points: int) -> float:
    """Points/s of `kind` over `points`, after start-up and a warm-up that occupies every worker."""
    executor = make_executor(kind, context, workers=workers)
    try:
        slices = 4 * executor.workers
        run_batches(executor, [warmup[i::slices] for i in range(slices)], lambda t, b: None)
        batches = [points[i:i + batch_points] for i in range(0, len(points), batch_points)]
        done = []
        start = time.perf_counter()
        run_batches(executor, batches, lambda table, batch: done.append(table.num_rows))
        seconds = time.perf_counter() - start
    finally:
        executor.close()
    assert sum(done) == len(points)
    return len(points) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-points", type=int, default=BATCH_POINTS, help="points per worker task")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.yaml"
        path.write_text(yaml.safe_dump({**STUDY, "output": folder}))
        study = load_study(path)
    plan = plan_study(study)
    # Warm-up runs on a hardware variant of its own, so it starts the workers without
    # warming the memo caches the measured points use.
    warm_variant = len(plan.hardware) - 1
    warmup = [p for p in plan.points if p.hardware_index == warm_variant]
    measured = [p for p in plan.points if p.hardware_index != warm_variant]
    if len(measured) < args.points:
        raise SystemExit(f"the bench study has only {len(measured)} legal points to measure")
    points = sorted(measured[:args.points], key=locality_key)  # dispatch order, as in `rapid sweep`
    context = work_context(study, plan.models, plan.hardware)
    # Separate processes first, in-process last: a forked pool must not inherit warm caches.
    rates = {
        "local": measure("local", context, points, warmup, args.workers, args.batch_points),
        "ray": measure("ray", context, points, warmup, args.workers, args.batch_points),
        "in-process": measure("inprocess", context, points, warmup, 1, args.batch_points),
    }
    print(f"{len(points)} points, {args.workers} workers, {os.cpu_count()} cores")
    for kind, rate in rates.items():
        print(f"  {kind:<11} {rate:>9,.0f} points/s   {rate / rates['in-process']:.2f}x in-process")


if __name__ == "__main__":
    main()
