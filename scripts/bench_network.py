"""Ring and direct all-reduce, 64 MiB and 1 GiB, on Switch(1024), Ring(8) x Switch(128) and Ring(64):
`rapid net` as a whole process (the installed `rapid`, a compiled launcher that runs these ASTRA-sim
network files without starting Python) and its simulation alone (through the Python API), against stock
ASTRA-sim's analytical binaries when ASTRA_SIM_BIN names them (':'-separated). Prints figures,
asserts nothing: wall and CPU seconds (CPU time holds up better on a busy machine), peak RSS, and
the ratios stock / ours of the whole processes, or ours whole / simulation alone. With --repeat N
each whole process runs N times, ours and the stock binaries in turn, and a row gives the medians
(a stock binary repeats only where one run takes under REPEAT_UNDER_S: a run of a few milliseconds
is at the mercy of one busy moment of a shared machine; a run of a minute is not). This process
imports only the standard library (a child's peak RSS starts from its parent's at the fork). It
compiles our packages' bytecode first, as an installed package has it, and prints the load average
(the machine may be shared: run it when quiet).

    ASTRA_SIM_BIN=.../AstraSim_Analytical_Congestion_Unaware:.../AstraSim_Analytical_Congestion_Aware \\
        .venv/bin/python scripts/bench_network.py [--keep DIR] [--repeat N] [--networks NAME ...]
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core: keep numpy's thread pool idle

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
GIB = 2**30
NETWORKS = {  # ASTRA-sim's network YAML (bandwidth GiB/s, latency ns), read by both simulators, written as JSON
    "Switch(1024)": {"topology": ["Switch"], "npus_count": [1024], "bandwidth": [100.0], "latency": [1000.0]},
    "Ring(8)xSwitch(128)": {"topology": ["Ring", "Switch"], "npus_count": [8, 128], "bandwidth": [300.0, 50.0],
                            "latency": [1000.0, 2000.0]},
    "Ring(64)": {"topology": ["Ring"], "npus_count": [64], "bandwidth": [50.0], "latency": [500.0]},
}
ALGORITHMS = ("ring", "direct")
SIZES = {"64MiB": 64 * MIB, "1GiB": GIB}
STOCK_TIMEOUT_S = 900
REPEAT_UNDER_S = 5.0
PACKAGES = ("astra_backend", "core", "sweep")
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def timed_run(command, cwd=None, timeout=None):
    """(exit status or None on timeout, stdout + stderr, wall s, CPU s, peak RSS MiB) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout, child.kill) if timeout else None
    if timer:
        timer.start()
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.stdout.close()
    if timer:
        timer.cancel()
    cpu = usage.ru_utime + usage.ru_stime
    code = None if timeout and wall >= timeout else os.waitstatus_to_exitcode(status)
    return code, output, wall, cpu, usage.ru_maxrss / 1024


def rapid_command():
    """`rapid` next to this Python, else the same CLI through `python -m sweep.cli`."""
    script = Path(sys.executable).with_name("rapid")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sweep.cli"]


def ours_whole(network_file, algorithm, size):
    """(simulated time s, wall s, CPU s, peak RSS MiB) of `rapid net`, or a reason it gave none."""
    command = rapid_command() + ["net", "--network", str(network_file), "--collective", "all_reduce",
                                 "--size", str(size), "--algorithm", algorithm, "--json", "--top", "0"]
    status, output, wall, cpu, rss = timed_run(command, cwd=ROOT)
    if status != 0:
        return f"rapid net exit {status}: {output.strip().splitlines()[-1:]}"
    return json.loads(output.splitlines()[-1])["time_s"], wall, cpu, rss


def ours_in_process(network_file, algorithm, size):
    """(wall s, CPU s) of the simulation alone (network built, one collective simulated), in a fresh process."""
    command = [sys.executable, __file__, "--simulate", str(network_file), algorithm, str(size)]
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout)


def simulate(network_file, algorithm, size):
    """Prints [wall s, CPU s] of one simulated all-reduce (the child side of ours_in_process)."""
    sys.path.insert(0, str(ROOT))
    from astra_backend import Network, load_network_file

    wall, cpu = time.perf_counter(), time.process_time()
    Network(load_network_file(network_file)).collective("all_reduce", int(size), algorithm=algorithm)
    print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))


def write_stock_configs(folder, network, algorithm):
    """system.json for `algorithm` on every dimension, and the remote-memory file stock ASTRA-sim needs."""
    dims = len(network["topology"])
    implementation = [algorithm] * dims
    system = {"scheduling-policy": "FIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1,
              "preferred-dataset-splits": 1, "collective-optimization": "baseline",
              "all-reduce-implementation": implementation, "all-gather-implementation": implementation,
              "reduce-scatter-implementation": implementation, "all-to-all-implementation": implementation}
    (folder / f"system_{algorithm}_{dims}.json").write_text(json.dumps(system))
    (folder / "remote_memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    return folder / f"system_{algorithm}_{dims}.json"


def stock(binary, workload, system, network_file, npus):
    """(simulated time s, wall s, CPU s, peak RSS MiB) of one stock ASTRA-sim run, or why it gave none."""
    command = [binary, f"--workload-configuration={workload}", f"--system-configuration={system}",
               f"--network-configuration={network_file}",
               f"--remote-memory-configuration={system.with_name('remote_memory.json')}"]
    status, output, wall, cpu, rss = timed_run(command, cwd=workload.parent, timeout=STOCK_TIMEOUT_S)
    if status is None:
        return f"timed out after {STOCK_TIMEOUT_S} s"
    ends = [int(cycles) for _, cycles in FINISHED.findall(output)]
    if status != 0 or len(ends) != npus:
        return f"exit {status}, {len(ends)}/{npus} NPUs finished: {' | '.join(output.strip().splitlines()[-2:])}"
    return max(ends) * 1e-9, wall, cpu, rss


def npu_count(network):
    return math.prod(network["npus_count"])


def workload_sets(folder):
    """{(npus, bytes): Chakra prefix} of one all-reduce per NPU, written by a child process."""
    wanted = sorted({(npu_count(network), size) for network in NETWORKS.values() for size in SIZES.values()})
    command = [sys.executable, __file__, "--write-workloads", str(folder), json.dumps(wanted)]
    subprocess.run(command, check=True, cwd=ROOT)
    return {(npus, size): folder / f"allreduce_{npus}_{size}" / "coll" for npus, size in wanted}


def write_workloads(folder, wanted):
    """Writes each (npus, bytes) set as ASTRA-sim's microbenchmark generator does (the child side)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from chakra_bundles import write_generator_set

    for npus, size in json.loads(wanted):
        case = Path(folder) / f"allreduce_{npus}_{size}"
        case.mkdir(exist_ok=True)
        write_generator_set(case, npus, size)


def label(binary):
    return Path(binary).name.replace("AstraSim_Analytical_", "")


def row(case, simulator, collective_s, wall, cpu, rss=None, ratios=()):
    rss_text = f"{rss:>8.0f}" if rss is not None else f"{'':>8}"
    return (f"{case:<46} {simulator:<23} {collective_s * 1e3:>13.4f} {wall:>8.3f} {cpu:>8.3f} {rss_text} "
            + " ".join(f"{r:>12}" for r in ratios)).rstrip()


def medians(runs):
    """(simulated time s, median wall s, median CPU s, peak RSS MiB) of runs of one command."""
    return (runs[0][0], statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs),
            max(r[3] for r in runs))


def bench_case(folder, name, network, algorithm, size_name, binaries, workloads, repeat):
    """Prints one case: ours (whole process, simulation alone) and each stock binary against ours,
    each whole process the median of `repeat` runs taken in turn (stock: while a run is short)."""
    size = SIZES[size_name]
    network_file = folder / f"{name}.yml"
    case = f"{algorithm} all-reduce {size_name} on {name}"
    npus = npu_count(network)
    system = write_stock_configs(folder, network, algorithm)
    ours_runs, stock_runs = [], {binary: [] for binary in binaries}
    for _ in range(repeat):
        ours = ours_whole(network_file, algorithm, size)
        if isinstance(ours, str):
            print(f"{case:<46} skipped: {ours}")
            return
        ours_runs.append(ours)
        for binary, runs in stock_runs.items():
            if runs and (isinstance(runs[0], str) or runs[0][1] >= REPEAT_UNDER_S):
                continue
            runs.append(stock(binary, workloads[npus, size], system, network_file, npus))
    collective_s, wall, cpu, rss = medians(ours_runs)
    sim_wall, sim_cpu = ours_in_process(network_file, algorithm, size)
    print(row(case, "ours", collective_s, wall, cpu, rss, [f"{wall / sim_wall:.2f}x", f"{cpu / sim_cpu:.2f}x"]))
    print(row("", "ours, sim alone", collective_s, sim_wall, sim_cpu))
    for binary, runs in stock_runs.items():
        if isinstance(runs[0], str):
            print(f"{'':<46} {label(binary):<23} skipped: {runs[0]}")
            continue
        end_s, stock_wall, stock_cpu, stock_rss = medians(runs)
        print(row("", label(binary) + ("" if len(runs) == repeat else f" ({len(runs)}x)"), end_s, stock_wall,
                  stock_cpu, stock_rss, [f"{stock_wall / wall:.2f}x", f"{stock_cpu / cpu:.2f}x"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="write the configs and Chakra files here and keep them")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help=f"medians of N whole runs each, in turn (stock: where a run takes under {REPEAT_UNDER_S:g} s)")
    parser.add_argument("--networks", nargs="+", choices=list(NETWORKS), default=list(NETWORKS), metavar="NAME",
                        help=f"only these networks (of {', '.join(NETWORKS)})")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    binaries = [b for b in os.environ.get("ASTRA_SIM_BIN", "").split(os.pathsep) if b]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        for name, network in NETWORKS.items():
            (folder / f"{name}.yml").write_text(json.dumps(network))
        workloads = workload_sets(folder) if binaries else {}
        # bytecode first, as an installed package has it (where PYTHONDONTWRITEBYTECODE is set, a
        # run never writes its own and compiles every module it imports, each time)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True)
        print(f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs; bytecode of "
              f"{', '.join(PACKAGES)} compiled before timing")
        print("ASTRA-sim: " + (", ".join(binaries) or "none (set ASTRA_SIM_BIN)"))
        print(f"ours = `{' '.join(rapid_command())} net`, the whole command as installed; sim alone = our network built and "
              "one collective simulated, timed inside a fresh process; collective_ms = the simulated time; ratios = stock / "
              "ours (whole processes), or ours / sim alone, of wall and of CPU time"
              + (f"; whole processes: medians of {args.repeat} runs in turn ((k x): a stock binary's k runs, "
                 f"repeated only under {REPEAT_UNDER_S:g} s a run)" if args.repeat > 1 else "") + "\n")
        print(f"{'case':<46} {'simulator':<23} {'collective_ms':>13} {'wall_s':>8} {'cpu_s':>8} {'rss_MiB':>8} "
              f"{'wall ratio':>12} {'cpu ratio':>12}")
        for name in args.networks:
            network = NETWORKS[name]
            for algorithm in ALGORITHMS:
                for size_name in SIZES:
                    bench_case(folder, name, network, algorithm, size_name, binaries, workloads, args.repeat)
        print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--simulate"]:
        simulate(*sys.argv[2:])
    elif sys.argv[1:2] == ["--write-workloads"]:
        write_workloads(*sys.argv[2:])
    else:
        main()
