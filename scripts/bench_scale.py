"""Studies of millions of points: prints the figures issue 23 asks for, asserts nothing.

- `rapid sweep --dry-run` of an 11,059,200-combination training grid (llama3.1-70b on 4,096
  GPUs, hardware what-ifs crossed with layouts): seconds and peak RSS (targets 30 s, 1 GiB);
- a 1,843,200-combination grid (recompute none or full, no FLOP/s what-if) run whole command, `--local --workers 2`:
  points/s over the command's wall time, and the driver's peak RSS (target 20,000 points/s);
- the finished grid run again: seconds (target 10 s), nothing evaluated.

Each command runs in a fresh process; peak RSS is the largest maximum resident set of that
process and its workers (the driver's, as a rule). Pass --scale 0.1 for a quick look (fewer bandwidth values)."""
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

LAYOUTS = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "cp": [1, 2, 4], "dp": "auto", "zero": [0, 1, 2, 3],
           "micro_batch": [1, 2, 4, 8], "recompute": ["none", "selective", "full"],
           "schedule": ["1f1b", "interleaved"], "virtual_stages": [1, 2, 4],
           "overlap_grad_reduce": [False, True], "overlap_param_gather": [False, True],
           "overlap_tp_comm": [False, True]}  # 138,240 layouts


def study(folder: Path, name: str, bandwidths: int, flops: int, recompute: list) -> Path:
    path = folder / f"{name}.yaml"
    space = {**LAYOUTS, "recompute": recompute, "hardware.gpu.hbm.bandwidth": [f"{3000 + 10 * i} GB/s" for i in range(bandwidths)]}
    if flops > 1:
        space["hardware.gpu.peak_flops.bf16"] = [f"{800 + 10 * i} TFLOP/s" for i in range(flops)]
    path.write_text(yaml.safe_dump({
        "name": name, "model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "gpus": 4096,
        "output": str(folder / name), "workload": {"mode": "train", "global_batch": 2048, "seq": 8192},
        "space": space}))
    return path


def rapid(*args) -> tuple:
    """(wall seconds, peak RSS MiB of the largest process so far, its JSON summary) of
    `rapid sweep ARGS --json`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "sweep.cli", "sweep", *args, "--json", "--yes"],
                         capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode:
        sys.exit(f"rapid sweep {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024, json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of the bandwidth values kept (1 = full size)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        big = study(Path(folder), "dry", max(1, round(20 * args.scale)), 4, ["none", "selective", "full"])
        seconds, mib, summary = rapid(str(big), "--dry-run")
        print(f"--dry-run: {summary['combinations']:,} combinations ({summary['legal']:,} legal) planned in "
              f"{seconds:.1f} s, {summary['combinations'] / seconds:,.0f} combinations/s whole command, "
              f"peak RSS {mib:.0f} MiB")
        grid = study(Path(folder), "run", max(1, round(20 * args.scale)), 1, ["none", "full"])
        seconds, mib, summary = rapid(str(grid), "--local", "--workers", "2")
        print(f"--local --workers 2: {summary['combinations']:,} combinations, {summary['evaluated']:,} points "
              f"evaluated in {seconds:.1f} s whole command = {summary['evaluated'] / seconds:,.0f} points/s "
              f"({summary['points_per_s']:,.0f} points/s while evaluating), largest process peak RSS {mib:.0f} MiB")
        seconds, mib, summary = rapid(str(grid), "--local", "--workers", "2")
        print(f"finished re-run: {summary['evaluated']} evaluated, {summary['skipped']:,} skipped in {seconds:.1f} s")


if __name__ == "__main__":
    main()
