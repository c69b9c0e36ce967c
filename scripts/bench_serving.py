"""Served configurations per second of the engine simulator (core.serving), one core: Llama
3.1 70B FP8 on H200, per engine, every tensor-parallel size x concurrency x (isl, osl), 1,000 requests each.
The first pass fills the iteration-time memos (cold), the second reuses them (warm)."""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.model.loader import load_hardware, load_model, with_dtype  # noqa: E402
from core.serving.engines import ENGINES, engine_spec  # noqa: E402
from core.serving.service import Pool, serve  # noqa: E402
from core.serving.simulate import Load  # noqa: E402

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TP = (1, 2, 4, 8)


def configs(requests: int, spread: float):
    for tp in TP:
        for users in CONCURRENCY:
            for isl, osl in ((1024, 1024), (8192, 1024), (1024, 8192)):
                yield tp, Load(isl, osl, concurrency=users, requests=requests, length_spread=spread, ramp_share=1.0)


def run_pass(model, hw, engine: str, requests: int, spread: float) -> tuple:
    start, count, iterations = time.perf_counter(), 0, 0.0
    for tp, load in configs(requests, spread):
        record = serve(model, hw, engine_spec(engine), load, Pool(tp=tp), "fp8")
        iterations += record.get("iterations", 0.0) or 0.0
        count += 1
    return count, time.perf_counter() - start, iterations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=0.0, help="isl/osl drawn within +- this share")
    args = parser.parse_args()
    model = load_model("llama3.1-70b")
    hw = with_dtype(load_hardware("h200-sxm-141gb"), "fp8", "bench", "dtype")
    for engine in ENGINES:
        for label in ("cold", "warm"):
            count, seconds, iterations = run_pass(model, hw, engine, args.requests, args.spread)
            print(f"{engine} {label}: {count} configurations x {args.requests} requests in {seconds:.2f} s = "
                  f"{count / seconds:,.1f} configurations/s on one core ({iterations / count:,.0f} engine iterations each)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
