"""Re-running a finished study: seconds and peak memory of `run_study` when the table already
holds every point, answered from the finished record, and when it must plan again (the record
removed). Prints figures, asserts nothing.

    python scripts/bench_resume.py [--bandwidths 12]   # 4*4*2*4*3*3*N combinations
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

CHILD = """
import sys, time, resource
from sweep.execution.engine import run_study
from sweep.study.loader import load_study
start = time.perf_counter()
report = run_study(load_study(sys.argv[1]), executor="local", workers=2, progress=False)
print(f"{time.perf_counter() - start:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
      f"{report.evaluated} {report.skipped}")
"""


def study(folder: Path, bandwidths: int) -> Path:
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump({
        "name": "bench-resume", "model": "llama3.1-70b", "hardware": "a100-sxm4-80gb", "gpus": 64,
        "output": str(folder / "results"), "workload": {"mode": "train", "global_batch": 128, "seq": 4096},
        "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2], "dp": "auto", "zero": [0, 1, 2, 3],
                  "micro_batch": [1, 2, 4], "recompute": ["none", "selective", "full"],
                  "hardware.gpu.hbm.bandwidth": [f"{1200 + 10 * i} GB/s" for i in range(bandwidths)]}}))
    return path


def run(path: Path) -> tuple:
    """(seconds, peak MiB, evaluated, skipped) of one run_study in a fresh process."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
    seconds, mib, evaluated, skipped = out.stdout.split()
    return float(seconds), float(mib), int(evaluated), int(skipped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidths", type=int, default=12, help="values of the bandwidth knob (scales the study)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = study(Path(folder), args.bandwidths)
        seconds, mib, evaluated, _ = run(path)
        print(f"first run: {evaluated} points evaluated in {seconds:.2f} s, peak {mib:.0f} MiB")
        seconds, mib, _, skipped = run(path)
        print(f"finished re-run, from the record: {skipped} points skipped in {seconds:.2f} s, peak {mib:.0f} MiB")
        (Path(folder) / "results" / "_finished.json").unlink()
        seconds, mib, _, skipped = run(path)
        print(f"finished re-run, planning again: {skipped} points skipped in {seconds:.2f} s, peak {mib:.0f} MiB")


if __name__ == "__main__":
    main()
