"""Fit the serving engines' two host overheads (per iteration, per request) and the benchmark
client's ramp-up share on the measured serving rows (../shared/validation/serving), then print
the in-sample and left-one-engine-out TTFT / TPOT errors. Rerun it whenever kernel times move.

Per engine: the iteration overhead from a grid (it changes the simulated dynamics), the
request overhead (added to every TTFT) by a scan minimising the mean |TTFT error|. The ramp
share is one global figure. Left-one-engine-out: one overhead pair fitted on the other
engines' rows predicts the left-out engine's."""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.validation import serving  # noqa: E402

ITERATION_GRID_S = (0.0, 0.0005, 0.001, 0.002, 0.004)
REQUEST_GRID_S = tuple(i * 0.005 for i in range(41))
RAMP_GRID = (0.0, 0.1, 0.3, 1.0)


def _score(done, request_s):
    """Mean |TTFT error| + mean |TPOT error| with `request_s` added to every TTFT."""
    shifted = [(r, t + request_s, p) for r, t, p in done]
    ttft, tpot = serving.errors(shifted)
    return sum(map(abs, ttft)) / len(ttft) + sum(map(abs, tpot)) / len(tpot)


def _runs(rows, ramp):
    """{iteration overhead: [(row, ttft without request overhead, tpot)]}."""
    out = {}
    for it_s in ITERATION_GRID_S:
        engines = serving.with_overheads({e: it_s for e in serving.ENGINES}, {e: 0.0 for e in serving.ENGINES})
        out[it_s] = serving.cases(engines, rows, ramp)[0]
    return out


def _best(done_by_it):
    return min(((_score(done, req), it_s, req) for it_s, done in done_by_it.items() if done
                for req in REQUEST_GRID_S), key=lambda x: x[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=3, help="fit on every n-th row (speed)")
    args = parser.parse_args()
    rows = [r for r in serving.rows() if not serving.skip_reason(r)][::args.every]
    engines = sorted({r["backend"] for r in rows})
    best = None
    for ramp in RAMP_GRID:
        runs = _runs(rows, ramp)
        fits = {}
        for engine in engines:
            fits[engine] = _best({k: [c for c in v if c[0]["backend"] == engine] for k, v in runs.items()})
        total = sum(f[0] * sum(1 for r in rows if r["backend"] == e) for e, f in fits.items())
        print(f"ramp share {ramp}: " + ", ".join(f"{e} iteration {f[1] * 1e3:.1f} ms request {f[2] * 1e3:.0f} ms"
                                                   f" (score {f[0]:.1f})" for e, f in fits.items()))
        if best is None or total < best[0]:
            best = (total, ramp, fits, runs)
    _, ramp, fits, runs = best
    print(f"\nfitted: ramp share {ramp}")
    for engine, (_, it_s, req_s) in fits.items():
        print(f"  {engine}: iteration_overhead_s {it_s:.4f}  request_overhead_s {req_s:.3f}")
    print("\nleft-one-engine-out (one overhead pair fitted on the other engines):")
    for engine in engines:
        others = _best({k: [c for c in v if c[0]["backend"] != engine] for k, v in runs.items()})
        mine = [(r, t + others[2], p) for r, t, p in runs[others[1]] if r["backend"] == engine]
        ttft, tpot = serving.errors(mine)
        print(f"  {engine}: TTFT {serving.figures(ttft)}  TPOT {serving.figures(tpot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
