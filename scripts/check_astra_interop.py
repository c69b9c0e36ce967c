"""Runs the interop layouts' bundles on stock ASTRA-sim binaries and prints their end times next
to ours. Not part of `make test` (the binary is not on PyPI); build ASTRA-sim's analytical backend
and point ASTRA_SIM_BIN at AstraSim_Analytical_Congestion_Unaware, _Aware, or both (':'-separated).

    ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware .venv/bin/python scripts/check_astra_interop.py [--keep DIR]

A second table shrinks the training bundles' gradient buckets to 1 KiB (what remains agrees when
the gap comes from how the buckets overlap the rest). A third replays an all-reduce written in the
shape of ASTRA-sim's microbenchmark generator on both, and times both on large ones (our time
includes Python start-up)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import core  # noqa: E402
from astra_backend import Network, load_network_file  # noqa: E402
from chakra_bundles import ring_network, write_bundles, write_generator_set  # noqa: E402
from core.chakra.bundle import astra_sim_command  # noqa: E402
from core.chakra.trace import read_protos, varint  # noqa: E402
from core.chakra.replay import build_trace, load_comm_groups, trace_files  # noqa: E402
from core.chakra.schema import NODE_TYPES  # noqa: E402

BUCKET_BYTES = 64 << 20  # collectives above this in the interop layouts are the gradient buckets

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


def _label(binary):
    return Path(binary).name.replace("AstraSim_Analytical_", "")


def interop_table(binaries, folder, hw):
    """Each layout's bundle on each binary; returns {name: (bundle, prefix)} of the training ones."""
    head = "".join(f" {_label(b) + ' (ms)':>24} {'diff':>8}" for b in binaries)
    print(f"{'layout':<16} {'npus':>4} {'ours (ms)':>12}{head}")
    training = {}
    for name, (bundle, prefix, record) in write_bundles(folder, hw).items():
        npus = _npus(bundle, prefix)
        ours = record["step_time_s"]
        cells = []
        for binary in binaries:
            end_s, _, _ = run_astra_sim(binary, bundle, prefix, npus)
            cells.append(f" {end_s * 1e3:>24.3f} {(end_s - ours) / ours:>+8.2%}")
        print(f"{name:<16} {npus:>4} {ours * 1e3:>12.3f}{''.join(cells)}")
        if name.startswith("train"):
            training[name] = (bundle, prefix)
    return training


def shrink_buckets(bundle, prefix, copy):
    """A copy of a bundle whose collectives over BUCKET_BYTES carry 1 KiB: what is left when the
    gradient buckets no longer overlap anything."""
    shutil.copytree(bundle, copy, dirs_exist_ok=True)
    for path in copy.glob(f"{prefix}.*.et"):
        metadata, nodes = read_protos(path)
        for node in nodes:
            for attr in node.attr:
                if node.type == NODE_TYPES["COMM_COLL_NODE"] and attr.name == "comm_size" and attr.int64_val > BUCKET_BYTES:
                    attr.int64_val = 1024
        path.write_bytes(b"".join(varint(len(data)) + data for data in
                                  (m.SerializeToString() for m in [metadata, *nodes])))


def bucket_table(binaries, folder, training):
    """Training bundles with the gradient buckets shrunk: ours (a replay of the copy) vs ASTRA-sim."""
    print(f"\n{'buckets at 1 KiB':<16} {'ours (ms)':>12}" + "".join(f" {_label(b) + ' (ms)':>24} {'diff':>8}"
                                                            for b in binaries))
    for name, (bundle, prefix) in training.items():
        copy = folder / f"{name}-no-buckets"
        shrink_buckets(bundle, prefix, copy)
        chakra = build_trace(trace_files(copy / prefix), load_comm_groups(copy / "comm_group.json"))
        ours = Network(load_network_file(str(copy / "network.yml"), chakra.ranks), [], []).replay(chakra.trace).time_s
        cells = []
        for binary in binaries:
            end_s, _, _ = run_astra_sim(binary, copy, prefix, chakra.ranks)
            cells.append(f" {end_s * 1e3:>24.3f} {(end_s - ours) / ours:>+8.2%}")
        print(f"{name:<16} {ours * 1e3:>12.3f}{''.join(cells)}")


def foreign_table(binaries, folder):
    system = folder / "ring_system.json"
    system.write_text('{"scheduling-policy": "FIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1, '
                      '"preferred-dataset-splits": 1, "collective-optimization": "baseline", '
                      '"all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"], '
                      '"reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"]}')
    (folder / "remote_memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    head = "".join(f" {_label(b) + ' (ms)':>24} {'diff':>8} {'wall (s)':>8}" for b in binaries)
    print(f"\n{'all-reduce':<22} {'ours (ms)':>12} {'wall (s)':>8}{head}")
    for npus, size in ((8, 1 << 20), (64, 1 << 30), (256, 1 << 30)):
        case = folder / f"ar_{npus}_{size}"
        case.mkdir(exist_ok=True)
        prefix = write_generator_set(case, npus, size)
        network = ring_network(case, npus)
        (case / "remote_memory.json").write_text((folder / "remote_memory.json").read_text())
        (case / "system.json").write_text(system.read_text())
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "sweep.cli", "replay", str(prefix), "--network", str(network),
                              "--json"], capture_output=True, text=True, cwd=ROOT)
        ours_wall = time.perf_counter() - start
        ours = float(re.search(r'"end_time_s": ([0-9.e-]+)', out.stdout).group(1))
        cells = []
        for binary in binaries:
            end_s, _, astra_wall = run_astra_sim(binary, case, prefix.name, npus, comm_groups=False,
                                                 network=network.name)
            cells.append(f" {end_s * 1e3:>24.4f} {(end_s - ours) / ours:>+8.2%} {astra_wall:>8.2f}")
        label = f"{npus} NPUs ring, {size / 2**20:g} MiB"
        print(f"{label:<22} {ours * 1e3:>12.4f} {ours_wall:>8.2f}{''.join(cells)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="write the bundles here and keep them")
    args = parser.parse_args()
    binaries = [b for b in os.environ.get("ASTRA_SIM_BIN", "").split(os.pathsep) if b]
    if not binaries or not all(os.access(b, os.X_OK) for b in binaries):
        print("check_astra_interop: set ASTRA_SIM_BIN to one or more (':'-separated) stock ASTRA-sim analytical "
              "binaries", file=sys.stderr)
        return 2
    hw = core.load_hardware("a100-sxm4-80gb")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        print("ASTRA-sim: " + ", ".join(binaries) + "\n")
        training = interop_table(binaries, folder, hw)
        bucket_table(binaries, folder, training)
        foreign_table(binaries, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
