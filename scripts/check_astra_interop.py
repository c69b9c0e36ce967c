"""Runs the interop layouts' bundles on a stock ASTRA-sim binary and prints its end time next to
ours. Not part of `make test` (the binary is not on PyPI); build ASTRA-sim's analytical backend
and point ASTRA_SIM_BIN at AstraSim_Analytical_Congestion_Unaware (or _Aware).

    ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware .venv/bin/python scripts/check_astra_interop.py [--keep DIR]

A second table replays an all-reduce written in the shape of ASTRA-sim's microbenchmark
generator on both, and times both on a large one (our time includes Python start-up)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import core  # noqa: E402
from chakra_bundles import ring_network, write_bundles, write_generator_set  # noqa: E402
from core.astra_bundle import astra_sim_command  # noqa: E402

FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def run_astra_sim(binary, folder, prefix, npus, comm_groups=True, network="network.yml", system="system.json"):
    """(end time in seconds over all NPUs, NPUs that finished, wall seconds) of one stock run."""
    command = astra_sim_command(binary, str(folder), prefix)
    command = [c for c in command if comm_groups or not c.startswith("--comm-group")]
    command = [c.replace("network.yml", network).replace("system.json", system) for c in command]
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - start
    ends = {int(m.group(1)): int(m.group(2)) for m in FINISHED.finditer(out.stdout + out.stderr)}
    if out.returncode != 0 or len(ends) != npus:
        tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
        print(f"    ASTRA-sim exit {out.returncode}, {len(ends)}/{npus} NPUs finished: {' | '.join(tail)}")
    return (max(ends.values()) * 1e-9 if ends else float("nan")), len(ends), wall


def _npus(folder, prefix):
    return len(list(folder.glob(f"{prefix}.*.et")))


def interop_table(binary, folder, hw):
    print(f"{'layout':<16} {'npus':>4} {'finished':>8} {'ours (ms)':>12} {'ASTRA-sim (ms)':>15} {'diff':>8}")
    for name, (bundle, prefix, record) in write_bundles(folder, hw).items():
        npus = _npus(bundle, prefix)
        end_s, finished, _ = run_astra_sim(binary, bundle, prefix, npus)
        ours = record["step_time_s"]
        print(f"{name:<16} {npus:>4} {finished:>8} {ours * 1e3:>12.3f} {end_s * 1e3:>15.3f} "
              f"{(end_s - ours) / ours:>+8.2%}")


def foreign_table(binary, folder):
    system = folder / "ring_system.json"
    system.write_text('{"scheduling-policy": "FIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1, '
                      '"preferred-dataset-splits": 1, "collective-optimization": "baseline", '
                      '"all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"], '
                      '"reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"]}')
    (folder / "remote_memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    print(f"\n{'all-reduce':<22} {'ours (ms)':>12} {'ASTRA-sim (ms)':>15} {'diff':>8} {'our wall (s)':>13} "
          f"{'ASTRA-sim wall (s)':>19}")
    for npus, size in ((8, 1 << 20), (64, 1 << 30), (256, 1 << 30)):
        case = folder / f"ar_{npus}_{size}"
        case.mkdir()
        prefix = write_generator_set(case, npus, size)
        network = ring_network(case, npus)
        (case / "remote_memory.json").write_text((folder / "remote_memory.json").read_text())
        (case / "system.json").write_text(system.read_text())
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "sweep.cli", "replay", str(prefix), "--network", str(network),
                              "--json"], capture_output=True, text=True, cwd=ROOT)
        ours_wall = time.perf_counter() - start
        ours = float(re.search(r'"end_time_s": ([0-9.e-]+)', out.stdout).group(1))
        end_s, _, astra_wall = run_astra_sim(binary, case, prefix.name, npus, comm_groups=False,
                                             network=network.name)
        label = f"{npus} NPUs ring, {size / 2**20:g} MiB"
        print(f"{label:<22} {ours * 1e3:>12.4f} {end_s * 1e3:>15.4f} {(end_s - ours) / ours:>+8.2%} "
              f"{ours_wall:>13.2f} {astra_wall:>19.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="write the bundles here and keep them")
    args = parser.parse_args()
    binary = os.environ.get("ASTRA_SIM_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("check_astra_interop: set ASTRA_SIM_BIN to a stock ASTRA-sim analytical binary", file=sys.stderr)
        return 2
    hw = core.load_hardware("a100-sxm4-80gb")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"ASTRA-sim: {binary}\n")
        interop_table(binary, folder, hw)
        foreign_table(binary, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
