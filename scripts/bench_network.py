"""Wall time and peak RSS of the network simulator on three large collectives (prints, asserts nothing)."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core: keep numpy's thread pool idle

import resource
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


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    print(f"{'case':<48} {'wall_s':>8} {'peak_rss_MiB':>13} {'flows':>9} {'sim_time_s':>11}")
    for name, dims, algorithm, size in CASES:
        network = Network(dims)
        start = time.perf_counter()
        result = network.collective("all_reduce", size, algorithm=algorithm)
        wall = time.perf_counter() - start
        print(f"{name:<48} {wall:>8.3f} {peak_rss_mib():>13.0f} {result.flows:>9} {result.time_s:>11.6f}")


if __name__ == "__main__":
    main()
