"""Cost of `--emit-traces` and of `rapid replay` on our own bundle, against the in-process
astra-flattened run they come from; prints figures, asserts nothing. Each run is a fresh
subprocess, timed around `core.evaluate` (imports excluded), its peak RSS from ru_maxrss; the
replay is timed as the whole `rapid replay` command, Python start-up included.

    .venv/bin/python scripts/bench_traces.py [--quick] [--keep DIR]
"""
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (label, model, hardware, Parallelism keywords, global batch, sequence, GPUs); sp as `rapid run` sets it
CASES = (
    ("qwen2.5-3b tp2 pp2 dp4, 16 A100", "qwen2.5-3b", "a100-sxm4-80gb", {"tp": 2, "pp": 2, "dp": 4, "sp": True},
     64, 1024, 16),
    ("llama3.1-70b tp8 pp4 dp2, 64 A100", "llama3.1-70b", "a100-sxm4-80gb", {"tp": 8, "pp": 4, "dp": 2, "sp": True},
     64, 4096, 64),
)


def child(case: int, emit_dir: str) -> None:
    """One evaluation (with `--emit-traces emit_dir` unless it is empty): prints JSON figures."""
    import core
    import core.chakra.bundle  # noqa: F401  (imports out of the timing)
    import core.replay.steps  # noqa: F401

    _, model, hardware, par, batch, seq, gpus = CASES[case]
    model, hw = core.load_model(model), core.load_hardware(hardware)
    start = time.perf_counter()
    record = core.evaluate(model, hw, core.Parallelism(**par), core.TrainWorkload(global_batch=batch, seq=seq), gpus,
                           backend="astra-flattened", time_infeasible=True, emit_traces=emit_dir or None)
    wall_s = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall_s, "rss_mib": rss_mib, "step_s": record["step_time_s"], "model": model.name}))


def _child(case: int, emit_dir: str = "") -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(case), emit_dir], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _replay(bundle: Path, prefix: str) -> tuple:
    """(report of `rapid replay --json`, wall seconds of the command)."""
    command = [sys.executable, "-m", "sweep.cli", "replay", str(bundle / prefix), "--network",
               str(bundle / "network.yml"), "--comm-groups", str(bundle / "comm_group.json"), "--json"]
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout), time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small case only")
    parser.add_argument("--keep", metavar="DIR", help="write the bundles here and keep them")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "EMIT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1])
        return 0
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweep.cli", "replay", "--help"], capture_output=True, cwd=ROOT, check=True)
    print(f"Python start-up of `rapid replay` (--help): {time.perf_counter() - start:.2f} s")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        for case, (label, *_) in enumerate(CASES[:1] if args.quick else CASES):
            bundle = folder / f"case{case}"
            run = _child(case)
            export = _child(case, str(bundle))
            report, replay_s = _replay(bundle, export["model"])
            files = list(bundle.glob(f"{export['model']}.*.et"))
            size_mib = sum(p.stat().st_size for p in files) / 2**20
            print(f"{label}: step {run['step_s'] * 1e3:.1f} ms (export run {export['step_s'] * 1e3:.1f} ms, "
                  f"replay of the bundle {report['end_time_s'] * 1e3:.1f} ms)")
            print(f"  in-process flattened run  {run['wall_s']:7.2f} s   peak RSS {run['rss_mib']:7.0f} MiB")
            print(f"  run with --emit-traces    {export['wall_s']:7.2f} s   peak RSS {export['rss_mib']:7.0f} MiB   "
                  f"{export['wall_s'] / run['wall_s']:.2f}x the run")
            print(f"  bundle                    {len(files)} .et files, {size_mib:.1f} MiB, {report['nodes']} nodes")
            print(f"  rapid replay (command)    {replay_s:7.2f} s   {replay_s / run['wall_s']:.2f}x the run", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
