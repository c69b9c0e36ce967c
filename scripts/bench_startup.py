"""Whole-process wall time and peak memory of the `rapid` commands users call from scripts,
each the median of several fresh processes (prints figures, asserts nothing).

Targets from issue 26 on a 2-core machine: `rapid run --help` <= 0.35 s, one `rapid run`
point <= 0.5 s. A bare `python -c pass` is printed first as the floor. `rapid` is the compiled
launcher installed beside this Python (it runs `rapid net` itself and hands the other commands to
the Python CLI, whose exec is counted here), else `python -m sweep.cli`. Wall is the figure the
targets judge; CPU time (user + system) holds up better on a busy machine."""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = Path(sys.executable).with_name("rapid")  # the compiled `rapid` the install puts beside Python
RAPID = [str(LAUNCHER)] if LAUNCHER.exists() else [sys.executable, "-m", "sweep.cli"]
PYTHON_CLI = [sys.executable, "-m", "sweep.cli"]
RUNS = 7
NETWORK = ROOT / "core" / "model" / "presets" / "gpus" / "a100-sxm4-80gb.yaml"
RING64 = '{"topology": ["Ring"], "npus_count": [64], "bandwidth": [50.0], "latency": [500.0]}'  # as bench_network
PACKAGES = ("astra_backend", "core", "sweep")
CASES = [
    ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
    ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"], None),
    ("rapid --help", [*RAPID, "--help"], None),
    ("rapid run --help", [*RAPID, "run", "--help"], 0.35),
    ("python -m sweep.cli run --help (no launcher)", [*PYTHON_CLI, "run", "--help"], None),
    ("rapid net --help", [*RAPID, "net", "--help"], None),
    ("rapid query --help", [*RAPID, "query", "--help"], None),
    ("rapid run (one point, analytical)", [*RAPID, "run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb",
                                           "--tp", "8", "--seq", "4096", "--global-batch", "64"], 0.5),
    ("rapid net (ring all-reduce 64 MiB, 64 NPUs)", [*RAPID, "net", "--network", str(NETWORK), "--npus", "64",
                                                     "--collective", "all_reduce", "--size", "64MiB"], None),
    ("rapid net, same on Ring(64) JSON", [*RAPID, "net", "--network", "RING64", "--collective", "all_reduce",
                                          "--size", "64MiB"], None),
    ("python -m sweep.cli net, same (no launcher)", [*PYTHON_CLI, "net", "--network", "RING64", "--collective",
                                                     "all_reduce", "--size", "64MiB"], None),
]


def measure(argv: list) -> tuple:
    """(median wall s, median CPU s, peak RSS MiB) over RUNS fresh processes."""
    walls, cpus, peak_kib = [], [], 0
    for _ in range(RUNS):
        start = time.perf_counter()
        pid = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).pid
        _, status, usage = os.wait4(pid, 0)
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench_startup: {' '.join(argv)} failed")
        peak_kib = max(peak_kib, usage.ru_maxrss)
    return statistics.median(walls), statistics.median(cpus), peak_kib / 1024


def main() -> None:
    # bytecode first, as an installed package has it (where PYTHONDONTWRITEBYTECODE is set, a run
    # never writes its own and compiles every module it imports, each time)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True)
    print(f"bytecode of {', '.join(PACKAGES)} compiled before timing; rapid = {' '.join(RAPID)}; "
          f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs")
    print(f"{'command':<46} {'median_s':>9} {'cpu_s':>9} {'peak_MiB':>9} {'target_s':>9} {'of target':>10}")
    with tempfile.TemporaryDirectory() as scratch:
        ring64 = Path(scratch) / "ring64.json"
        ring64.write_text(RING64)
        for name, argv, target in CASES:
            row(name, [str(ring64) if word == "RING64" else word for word in argv], target)
    print(f"(each the median of {RUNS} processes; peak RSS is the largest of them; "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB for this script)")


def row(name: str, argv: list, target) -> None:
    wall, cpu, peak = measure(argv)
    share = f"{wall / target:>9.0%}" if target else ""
    print(f"{name:<46} {wall:>9.3f} {cpu:>9.3f} {peak:>9.0f} {target or '':>9} {share:>10}")


if __name__ == "__main__":
    main()
