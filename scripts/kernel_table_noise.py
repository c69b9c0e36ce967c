"""How far each GEMM kernel table contradicts itself, before any model is held against it
(../shared/validation/kernels, the tables `rapid validate --suite kernels` reads).

A GEMM of the same m x n and a deeper k does at least as much work, so within one table and one
(m, n) its time should not fall as k grows. Per GPU, engine, dtype and the suite's size
buckets this prints the share of rows that break that by INVERSION or more: beside the next
shallower or deeper GEMM of their (m, n), the shallower of the two took INVERSION times as
long or longer. Such a row is a glitch of the run or a library switching kernels at that depth;
either way no model whose time grows with k follows it, so a bucket where many rows are
inverted holds a floor under the p90 |error| any such model reaches there.

    .venv/bin/python scripts/kernel_table_noise.py [--gpus b200_sxm gb200 ...]
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.validation.kernels import BUCKETS, KERNELS_DIR, _read, flop_bucket  # noqa: E402
from core.validation.systems import PRESET_BY_GPU  # noqa: E402

INVERSION = 1.2  # a shallower GEMM taking 1.2 times as long as a deeper one of the same m x n


def inverted(times_by_k: dict) -> set:
    """The depths k of one (m, n) series ({k: seconds}) whose time is out of order with a
    neighbouring depth by INVERSION or more: of the two, the shallower took at least INVERSION
    times as long as the deeper."""
    depths = sorted(times_by_k)
    out = set()
    for shallow, deep in zip(depths, depths[1:]):
        if times_by_k[shallow] >= INVERSION * times_by_k[deep]:
            out.update((shallow, deep))
    return out


def inverted_shares(rows: list) -> dict:
    """{(dtype, bucket): (rows, inverted rows)} over (m, n, k, dtype, seconds) rows of one table."""
    series = defaultdict(dict)
    for m, n, k, dtype, seconds in rows:
        series[dtype, m, n][k] = seconds
    counts = defaultdict(lambda: [0, 0])
    for (dtype, m, n), times_by_k in series.items():
        bad = inverted(times_by_k)
        for k in times_by_k:
            count = counts[dtype, flop_bucket(2.0 * m * n * k)]
            count[0] += 1
            count[1] += k in bad
    return {key: tuple(value) for key, value in counts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", nargs="*", default=[g for g in PRESET_BY_GPU if (KERNELS_DIR / g).is_dir()])
    args = ap.parse_args()
    print(f"{'gpu':10s} {'table':18s} {'dtype':10s} {'bucket':12s} {'rows':>7s} {'inverted':>9s}")
    for gpu in args.gpus:
        for path in sorted(KERNELS_DIR.glob(f"{gpu}/gemm/*/*/gemm_perf.parquet")):
            (m, n, k, dtypes), latency_ms = _read(path, ("m", "n", "k", "gemm_dtype"), None)
            shares = inverted_shares([(*row, ms * 1e-3) for *row, ms in zip(m, n, k, dtypes, latency_ms)])
            table = f"{path.parent.parent.name} {path.parent.name}"
            for (dtype, bucket), (total, bad) in sorted(shares.items(),
                                                        key=lambda item: (item[0][0], BUCKETS.index(item[0][1]))):
                print(f"{gpu:10s} {table:18s} {dtype:10s} {bucket:12s} {total:7d} {100 * bad / total:8.1f}%")


if __name__ == "__main__":
    main()
