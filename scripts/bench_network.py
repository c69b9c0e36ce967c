"""Wall time and peak RSS of the network simulator on three large collectives, each in a fresh
process on one core (prints figures, asserts nothing)."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core: keep numpy's thread pool idle

import json
import resource
import subprocess
import sys
import time

from astra_backend import Dimension, Network

GIB = 2**30
MIB = 2**20
CASES = [
    ("ring all-reduce 1 GiB on Switch(1024)", [Dimension("switch", 1024, 100, 1e-6)], "ring", GIB),
    ("direct all-reduce 64 MiB on Switch(1024)", [Dimension("switch", 1024, 100, 1e-6)], "direct", 64 * MIB),
    ("ring all-reduce 1 GiB on Ring(8) x Switch(128)",
     [Dimension("ring", 8, 300, 1e-6), Dimension("switch", 128, 50, 2e-6)], "ring", GIB),
]


def run_case(index):
    """Runs one case here and prints its figures as JSON."""
    _, dims, algorithm, size = CASES[index]
    network = Network(dims)
    rss_before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    result = network.collective("all_reduce", size, algorithm=algorithm)
    wall_s = time.perf_counter() - start
    print(json.dumps({"wall_s": wall_s, "rss_before_mib": rss_before_mib,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "flows": result.flows, "time_s": result.time_s}))


def main():
    print(f"{'case':<48} {'wall_s':>8} {'peak_rss_MiB':>13} {'(python+numpy)':>15} {'flows':>9} {'sim_time_s':>11}")
    for index, (name, *_rest) in enumerate(CASES):
        out = subprocess.run([sys.executable, __file__, str(index)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        print(f"{name:<48} {r['wall_s']:>8.3f} {r['peak_rss_mib']:>13.0f} {r['rss_before_mib']:>15.0f} "
              f"{r['flows']:>9} {r['time_s']:>11.6f}")


if __name__ == "__main__":
    if len(sys.argv) == 2:
        run_case(int(sys.argv[1]))
    else:
        main()
