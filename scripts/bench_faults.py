"""Fault samples per second per core on the paper's fault-sensitivity study, and the whole
study's wall time with `rapid sweep` on Ray. Prints figures; asserts nothing.

Part 1 runs in this process, one layout after another: each layout's replay is built once
(its cost reported apart), then its samples are answered; samples answered from the
baseline without a replay are counted separately. CPU seconds are this process's own, so
the per-core rate holds even on a shared machine; wall seconds are printed beside them."""
import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sweep.execution.engine import run_study, work_context
from sweep.faults.evaluate import evaluate_blocks
from sweep.faults.draws import FaultBlock, memory_fits
from sweep.study.grid import plan_study
from sweep.study.loader import load_study

STUDY = Path(__file__).resolve().parent.parent / "studies" / "paper_fault_sensitivity.yaml"


def per_core(study) -> None:
    plan = plan_study(study)
    context = work_context(study, plan.models, plan.hardware)
    fits = memory_fits(context)
    points = [p for p in plan.points if fits(p)]
    setup_cpu = sample_cpu = wall = 0.0
    samples = skipped = 0
    for point in points:
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        evaluate_blocks(context, [FaultBlock(point, 0, 1)])  # builds the point's replay once
        setup_cpu += time.process_time() - cpu_start
        cpu_start = time.process_time()
        table = evaluate_blocks(context, [FaultBlock(point, 1, study.faults.samples + 1)])
        sample_cpu += time.process_time() - cpu_start
        wall += time.perf_counter() - wall_start
        samples += table.num_rows
        skipped += table.num_rows - sum(table.column("fault_replayed").to_pylist())
    print(f"layouts: {len(points)} memory-feasible of {len(plan.points)} legal; {samples} fault samples")
    print(f"samples answered without a replay: {skipped} ({skipped / samples:.1%})")
    print(f"per layout, built once: {setup_cpu / len(points) * 1e3:.1f} ms CPU (grid row + replay programs)")
    print(f"fault samples/s per core, samples only:      {samples / sample_cpu:8.0f}")
    print(f"fault samples/s per core, including set-up:  {samples / (sample_cpu + setup_cpu):8.0f}")
    print(f"  of which replayed samples/s per core:      {(samples - skipped) / sample_cpu:8.0f}")
    print(f"wall time in this process: {wall:.1f} s ({samples / wall:.0f} samples/s)")


def whole_study(study, workers: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        study = replace(study, output=Path(folder) / study.name)
        start = time.perf_counter()
        report = run_study(study, executor="ray", workers=workers, progress=False)
        seconds = time.perf_counter() - start
    print(f"rapid sweep on Ray, {workers} workers: {report.evaluated} rows in {seconds:.1f} s wall "
          f"(Ray start-up included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(STUDY))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    study = load_study(args.study)
    per_core(study)
    whole_study(study, args.workers)


if __name__ == "__main__":
    main()
