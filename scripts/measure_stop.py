"""How long `rapid sweep` takes to stop on Ctrl-C (SIGINT to its process group, as a terminal
sends) or SIGTERM: seconds until its first stderr line and until it exits, with the local pool
and with an embedded Ray. Usage: python scripts/measure_stop.py [--runs N] [--ray] [--signal TERM]"""
import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sweep.store.parts import part_files, read_results  # noqa: E402

STUDY = {"name": "stop-timing", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 64,
         "workload": {"mode": "train", "global_batch": 128, "seq": 4096},
         "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2, 4], "dp": "auto", "zero": [0, 1, 2, 3],
                   "micro_batch": [1, 2, 4], "recompute": ["none", "selective", "full"],
                   "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1800 GB/s", "1555 GB/s"]},
         "backend": "astra-hierarchical"}


def one(folder: Path, ray: bool, signum: int) -> tuple:
    output = folder / "out"
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump({**STUDY, "output": str(output)}, sort_keys=False))
    command = [sys.executable, "-m", "sweep.cli", "sweep", str(study), "--workers", "2", "--quiet", "--fresh"]
    command += [] if ray else ["--local"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not part_files(output) and time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the sweep ended before it could be stopped: {process.stderr.read()}")
        time.sleep(0.05)
    time.sleep(1.0)  # batches in flight
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signum)
    first_line = None
    lines = []
    while True:
        ready, _, _ = select.select([process.stderr], [], [], 0.01)
        if ready:
            line = process.stderr.readline()
            if not line:
                break
            if first_line is None:
                first_line = time.monotonic() - sent
            lines.append(line.rstrip())
        elif process.poll() is not None and not ready:
            rest = process.stderr.read()
            lines += [r for r in rest.splitlines() if r]
            break
    process.wait()
    exited = time.monotonic() - sent
    rows = read_results(output).num_rows if part_files(output) else 0
    return first_line, exited, process.returncode, lines, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ray", action="store_true", help="embedded Ray instead of --local")
    parser.add_argument("--signal", default="INT", choices=("INT", "TERM"))
    args = parser.parse_args()
    signum = getattr(signal, f"SIG{args.signal}")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            first, exited, code, lines, rows = one(Path(folder), args.ray, signum)
            first_text = "none" if first is None else f"{first:.2f} s"
            print(f"{'ray' if args.ray else 'local'} SIG{args.signal} run {run + 1}: first line after {first_text}, "
                  f"exit after {exited:.2f} s (code {code}), {rows} rows kept; stderr: {lines}")


if __name__ == "__main__":
    main()
