"""Whole-process wall time and peak memory of the `rapid` commands users call from scripts,
each the median of several fresh processes (prints figures, asserts nothing).

Targets from issue 26 on a 2-core machine: `rapid run --help` <= 0.35 s, one `rapid run`
point <= 0.5 s. A bare `python -c pass` is printed first as the floor."""
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAPID = [sys.executable, "-m", "sweep.cli"]
RUNS = 7
NETWORK = ROOT / "core" / "model" / "presets" / "gpus" / "a100-sxm4-80gb.yaml"
# What a `rapid net` without numpy could not go below: its standard-library modules, yaml and the
# extension module loaded on its own (astra_backend/__init__ would bring numpy).
NET_FLOOR = ("import argparse, dataclasses, json, re, yaml, glob, importlib.machinery as m, importlib.util as u\n"
             "path = glob.glob('astra_backend/_netsim*.so')[0]\n"
             "u.module_from_spec(u.spec_from_file_location('_netsim', path, loader=m.ExtensionFileLoader('_netsim', path)))")
CASES = [
    ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
    ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"], None),
    ("floor of a numpy-free rapid net", [sys.executable, "-c", NET_FLOOR], None),
    ("rapid --help", [*RAPID, "--help"], None),
    ("rapid run --help", [*RAPID, "run", "--help"], 0.35),
    ("rapid net --help", [*RAPID, "net", "--help"], None),
    ("rapid query --help", [*RAPID, "query", "--help"], None),
    ("rapid run (one point, analytical)", [*RAPID, "run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb",
                                           "--tp", "8", "--seq", "4096", "--global-batch", "64"], 0.5),
    ("rapid net (ring all-reduce 64 MiB, 64 NPUs)", [*RAPID, "net", "--network", str(NETWORK), "--npus", "64",
                                                     "--collective", "all_reduce", "--size", "64MiB"], None),
]


def measure(argv: list) -> tuple:
    """(median wall s, peak RSS MiB) over RUNS fresh processes."""
    walls, peak_kib = [], 0
    for _ in range(RUNS):
        start = time.perf_counter()
        pid = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).pid
        _, status, usage = os.wait4(pid, 0)
        walls.append(time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench_startup: {' '.join(argv[2:])} failed")
        peak_kib = max(peak_kib, usage.ru_maxrss)
    return statistics.median(walls), peak_kib / 1024


def main() -> None:
    print(f"{'command':<46} {'median_s':>9} {'peak_MiB':>9} {'target_s':>9} {'of target':>10}")
    for name, argv, target in CASES:
        wall, peak = measure(argv)
        share = f"{wall / target:>9.0%}" if target else ""
        print(f"{name:<46} {wall:>9.3f} {peak:>9.0f} {target or '':>9} {share:>10}")
    print(f"(each the median of {RUNS} processes; peak RSS is the largest of them; "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB for this script)")


if __name__ == "__main__":
    main()
