"""Wall time of `rapid replay` against stock ASTRA-sim's analytical binaries on large all-reduces
(64-1024 NPUs, 1-16 GiB, one ring and a ring x switch) and on one of our training bundles; prints
figures, asserts nothing. Our wall time is the whole command, Python start-up included; the
start-up alone is printed first. ASTRA_SIM_BIN names one or more binaries (':'-separated).

    ASTRA_SIM_BIN=.../AstraSim_Analytical_Congestion_Unaware:.../AstraSim_Analytical_Congestion_Aware \\
        .venv/bin/python scripts/bench_replay.py [--quick] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import core  # noqa: E402
import yaml  # noqa: E402
from chakra_bundles import write_generator_set  # noqa: E402
from check_astra_interop import _label, run_astra_sim  # noqa: E402

GIB = 2**30
SYSTEM = {"scheduling-policy": "FIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1,
          "preferred-dataset-splits": 1, "collective-optimization": "localBWAware"}  # as our bundles
TRAINING = ("qwen2.5-3b", core.Parallelism(tp=2, pp=2, dp=4), core.TrainWorkload(global_batch=64, seq=1024), 16)


def collective_cases(quick: bool) -> list:
    """(label, npus, bytes per rank, ASTRA-sim network mapping)."""
    cases = []
    for npus in (64, 256) if quick else (64, 256, 1024):
        for size in (GIB,) if quick else (GIB, 16 * GIB):
            cases.append((f"Ring({npus})", npus, size, {"topology": ["Ring"], "npus_count": [npus],
                                                          "bandwidth": [100.0], "latency": [500.0]}))
            cases.append((f"Ring(8)xSwitch({npus // 8})", npus, size,
                          {"topology": ["Ring", "Switch"], "npus_count": [8, npus // 8],
                           "bandwidth": [100.0, 25.0], "latency": [500.0, 1000.0]}))
    return cases


def ours(prefix, network, comm_groups=None) -> tuple:
    """(end time s, wall s) of one `rapid replay` command."""
    command = [sys.executable, "-m", "sweep.cli", "replay", str(prefix), "--network", str(network), "--json"]
    if comm_groups:
        command += ["--comm-groups", str(comm_groups)]
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        print(f"    rapid replay exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
        return float("nan"), wall
    return json.loads(out.stdout)["end_time_s"], wall


def row(label, ours_end, ours_wall, binaries, run) -> str:
    cells = [f"{label:<34} {ours_end * 1e3:>11.3f} {ours_wall:>8.2f}"]
    for binary in binaries:
        end_s, _, wall = run(binary)
        ratio = f"{wall / ours_wall:>6.1f}x" if end_s == end_s else f"{'refused':>7}"
        cells.append(f" {end_s * 1e3:>11.3f} {wall:>8.2f} {ratio}")
    return "".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 and 256 NPUs, 1 GiB only")
    parser.add_argument("--keep", metavar="DIR", help="write the trace sets here and keep them")
    args = parser.parse_args()
    binaries = [b for b in os.environ.get("ASTRA_SIM_BIN", "").split(os.pathsep) if b]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweep.cli", "replay", "--help"], capture_output=True, cwd=ROOT, check=True)
    print(f"Python start-up of `rapid replay` (--help): {time.perf_counter() - start:.2f} s")
    head = "".join(f" {_label(b).split('_')[-1] + ' ms':>11} {'wall s':>8} {'ratio':>7}" for b in binaries)
    print(f"{'case':<34} {'ours ms':>11} {'wall s':>8}{head}   (ratio: their wall / ours)")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "remote_memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
        for label, npus, size, network in collective_cases(args.quick):
            case = folder / f"ar_{label}_{size >> 30}GiB".replace("(", "").replace(")", "")
            case.mkdir(parents=True, exist_ok=True)
            prefix = write_generator_set(case, npus, size)
            dims = len(network["topology"])
            (case / "network.yml").write_text(yaml.safe_dump(network))
            (case / "system.json").write_text(json.dumps(dict(SYSTEM, **{
                f"{c}-implementation": ["ring"] * dims for c in ("all-reduce", "all-gather", "reduce-scatter")},
                **{"all-to-all-implementation": ["direct"] * dims})))
            (case / "remote_memory.json").write_text((folder / "remote_memory.json").read_text())
            end, wall = ours(prefix, case / "network.yml")
            print(row(f"all-reduce {size >> 30} GiB {label}", end, wall, binaries,
                      lambda b: run_astra_sim(b, case, prefix.name, npus, comm_groups=False)), flush=True)
        name, par, work, gpus = TRAINING
        bundle = folder / "training"
        model = core.load_model(name)
        record = core.evaluate(model, core.load_hardware("a100-sxm4-80gb"), par, work, gpus, backend="astra-flattened",
                               time_infeasible=True, emit_traces=bundle)
        npus = len(list(bundle.glob(f"{model.name}.*.et")))
        end, wall = ours(bundle / model.name, bundle / "network.yml", bundle / "comm_group.json")
        label = f"train tp2 pp2 dp4, {record['step_time_s'] * 1e3:.0f} ms step"
        print(row(label, end, wall, binaries, lambda b: run_astra_sim(b, bundle, model.name, npus)))
        sizes = sum(p.stat().st_size for p in bundle.glob("*.et"))
        print(f"  ({npus} .et files, {sizes / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
