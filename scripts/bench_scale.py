"""Studies of millions of points: prints the figures issue 23 asks for, asserts nothing.

- `rapid sweep --dry-run` of an 11,059,200-combination training grid (llama3.1-70b on 4,096
  GPUs, hardware what-ifs crossed with layouts): seconds and peak RSS (targets 30 s, 1 GiB);
- a 1,843,200-combination grid (recompute none or full, no FLOP/s what-if) run whole command, `--local --workers 2`:
  points/s over the command's wall time, and the driver's peak RSS (target 20,000 points/s);
- the finished grid run again: seconds (target 10 s), nothing evaluated;
- a multi-node Ray cluster on this one machine (a head without CPUs and 1, 2, then 4 raylets
  of one CPU each, ray.cluster_utils.Cluster), the driver a `rapid sweep --address` process:
  points/s per worker count, the per-worker rate and the driver's CPU per point, and what a
  32-node cluster would give by extrapolation (printed with how it is computed).

Each command runs in a fresh process; peak RSS is the largest maximum resident set of that
process and its workers (the driver's, as a rule). Pass --scale 0.1 for a quick look (fewer
bandwidth values), --parts to run some of the four."""
import argparse
import json
import os
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
    """(wall seconds, peak RSS MiB of the largest process so far, its JSON summary, CPU seconds
    of the command's own process and the workers it waited for) of `rapid sweep ARGS --json`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "sweep.cli", "sweep", *args, "--json", "--yes"],
                         capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode:
        sys.exit(f"rapid sweep {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, max(after.ru_maxrss, before.ru_maxrss) / 1024, json.loads(out.stdout.strip().splitlines()[-1]), cpu_s


WORKER_COUNTS = (1, 2, 4)
CLUSTER_NODES = 32  # the extrapolation's cluster: nodes of this machine's class


def cluster_scaling(folder: Path, bandwidths: int) -> None:
    """The same study on a local cluster of 1, 2 and 4 one-CPU raylets (nodes added between
    runs), the driver a separate `rapid sweep --address` process whose CPU time is its own
    (Ray's workers belong to the raylets): points/s whole command and while evaluating."""
    from ray.cluster_utils import Cluster

    grid = study(folder, "cluster", bandwidths, 1, ["none", "full"])
    cores = os.cpu_count() or 1
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    rates, driver_s_per_point = {}, None
    try:
        for workers in WORKER_COUNTS:
            while len(cluster.list_all_nodes()) - 1 < workers:
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            seconds, _, summary, cpu_s = rapid(str(grid), "--address", cluster.address, "--fresh")
            points = summary["evaluated"]
            rates[workers] = summary["points_per_s"]
            driver_s_per_point = summary["driver_cpu_s"] / points
            print(f"Ray, {workers} one-CPU raylet(s) on this {cores}-core machine: {points:,} points in {seconds:.1f} s "
                  f"whole command = {points / seconds:,.0f} points/s, {summary['points_per_s']:,.0f} points/s while "
                  f"evaluating ({summary['points_per_s'] / workers:,.0f} per worker); driver CPU while evaluating "
                  f"{driver_s_per_point * 1e6:.0f} us/point ({cpu_s:.1f} s whole command)", flush=True)
    finally:
        cluster.shutdown()
    per_worker = rates[1]
    driver_rate = 1 / driver_s_per_point
    workers = CLUSTER_NODES * cores
    print(f"growth beyond {cores} workers flattens here: this machine has {cores} CPU cores for the workers, "
          "the driver and Ray's own processes together")
    print(f"extrapolation to {CLUSTER_NODES} nodes of {cores} cores ({workers} workers): min(per-worker rate "
          f"{per_worker:,.0f} points/s (1 raylet, while evaluating) x {workers}, the driver's rate "
          f"{driver_rate:,.0f} points/s (1 / its CPU per point while evaluating, at {WORKER_COUNTS[-1]} workers)) = "
          f"{min(per_worker * workers, driver_rate):,.0f} points/s, planning included (the workers plan)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of the bandwidth values kept (1 = full size)")
    parser.add_argument("--parts", default="dry,run,rerun,cluster", help="which figures (comma-separated)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores at the start", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        if "dry" in parts:
            big = study(Path(folder), "dry", max(1, round(20 * args.scale)), 4, ["none", "selective", "full"])
            seconds, mib, summary, _ = rapid(str(big), "--dry-run")
            print(f"--dry-run: {summary['combinations']:,} combinations ({summary['legal']:,} legal) planned in "
                  f"{seconds:.1f} s, {summary['combinations'] / seconds:,.0f} combinations/s whole command, "
                  f"peak RSS {mib:.0f} MiB", flush=True)
        grid = study(Path(folder), "run", max(1, round(20 * args.scale)), 1, ["none", "full"])
        if parts & {"run", "rerun"}:
            seconds, mib, summary, cpu_s = rapid(str(grid), "--local", "--workers", "2")
            print(f"--local --workers 2: {summary['combinations']:,} combinations, {summary['evaluated']:,} points "
                  f"evaluated in {seconds:.1f} s whole command = {summary['evaluated'] / seconds:,.0f} points/s "
                  f"({summary['points_per_s']:,.0f} points/s while evaluating; {cpu_s / summary['evaluated'] * 1e6:.0f} "
                  f"us CPU a point, all processes), largest process peak RSS {mib:.0f} MiB", flush=True)
        if "rerun" in parts:
            seconds, mib, summary, _ = rapid(str(grid), "--local", "--workers", "2")
            print(f"finished re-run: {summary['evaluated']} evaluated, {summary['skipped']:,} skipped in {seconds:.1f} s",
                  flush=True)
        if "cluster" in parts:
            cluster_scaling(Path(folder), max(1, round(4 * args.scale)))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
