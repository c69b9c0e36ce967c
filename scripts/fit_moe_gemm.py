"""Fit a GPU family's grouped MoE GEMM factors (core/serving/moe.py: moe_gemm_efficiency,
moe_half_ffn) on AIConfigurator's measured MoE tables
(../shared/validation/kernels/<gpu>/moe/vllm/*/moe_perf.parquet), then print the errors of the
plain batched GEMMs (the layer graph's, with the serving iteration's routing launches) and of the
fitted model: in-sample, over the rows of 1,024 tokens or more (prefill chunks, where the math
binds), and leave-one-shape-out (the factors fitted without each expert shape predict it). Copy
the factors into the family's GPU presets (calibration block).

Rows: balanced routing, the block-scaled dtypes serving engines run MoE checkpoints in (FP8 with
128 x 128 block scales, timed at the FP8 peak; NVFP4 where the GPU has it), which fit
moe_gemm_efficiency and moe_half_ffn, and BF16, which fits moe_bf16_* apart, every expert shape,
token count and moe_tp x moe_ep split, each the fastest kernel source measured. A row's
`num_tokens` are routed over all the experts, of which the timed GPU holds its 1 / ep share
(the collector's expert map), so it runs num_tokens x top_k / ep copies
(core.serving.moe.table_row_s).

Fitted on the rows without expert parallelism (moe_ep_size 1), where every copy runs on the timed
GPU and the reading is unambiguous, and which is how vLLM runs experts unless asked for expert
parallelism. The expert-parallel rows are printed held out: read as 1 / ep of the copies, their
per-GPU rate falls to 17-36 TFLOP/s at ep 32-256 (H200, block-scaled FP8, FlashInfer's CUTLASS
kernels), a reading of the collector's expert map we cannot settle, so they do not set the factors.

Example: scripts/fit_moe_gemm.py --gpus h100_sxm,h200_sxm --preset h200-sxm-141gb"""
import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.model.loader import load_hardware, with_dtype  # noqa: E402
from core.serving.moe import expert_gemms_s, table_row_s  # noqa: E402
from core.validation.kernels import GEMM_DTYPES  # noqa: E402

KERNELS = Path(__file__).resolve().parents[2] / "shared" / "validation" / "kernels"
# the preset's factor pair each group of the tables' dtypes fits (core.serving.moe.factors)
GROUPS = {("fp8_block", "nvfp4"): ("moe_gemm_efficiency", "moe_half_ffn"),
          ("bfloat16",): ("moe_bf16_gemm_efficiency", "moe_bf16_half_ffn")}
PREFILL_TOKENS = 1024


def table_rows(gpus: list) -> list:
    """[(gpu, the table's dtype, (hidden, inter, experts, topk), tokens, tp, ep, seconds)], fastest
    source each."""
    out = {}
    for gpu in gpus:
        for path in sorted((KERNELS / gpu / "moe" / "vllm").glob("*/moe_perf.parquet")):
            t = pq.read_table(path).to_pandas()
            t = t[(t.distribution == "balanced") & t.moe_dtype.isin([d for group in GROUPS for d in group])]
            for r in t.itertuples():
                key = (gpu, r.moe_dtype, (r.hidden_size, r.inter_size, r.num_experts, r.topk),
                       r.num_tokens, r.moe_tp_size, r.moe_ep_size)
                out[key] = min(out.get(key, math.inf), r.latency * 1e-3)
    return [k + (v,) for k, v in sorted(out.items())]


def _hardware(preset: str, table_dtype: str, factors=None):
    dtype, recipe = GEMM_DTYPES[table_dtype]
    hw = with_dtype(load_hardware(preset), dtype, "fit_moe_gemm", "dtype", recipe)
    if factors is not None:
        names = next(fields for dtypes, fields in GROUPS.items() if table_dtype in dtypes)
        hw = replace(hw, calibration=replace(hw.calibration, **dict(zip(names, factors))))
    return hw


def plain(rows, preset) -> np.ndarray:
    """The layer graph's batched GEMMs for `rows`, with the serving iteration's routing launches
    (core.serving.moe.table_row_s without the grouped kernels)."""
    return np.array([table_row_s(_hardware(preset, d), hidden, inter, experts, topk, tokens, tp, ep)
                     for _, d, (hidden, inter, experts, topk), tokens, tp, ep, _ in rows])


def predicted(rows, preset, factors, plain_s) -> np.ndarray:
    """core.serving.moe's times of `rows` with `factors`, given their plain GEMMs' times: the
    timed GPU's tokens x top_k / ep copies, as table_row_s runs them."""
    hws = {d: _hardware(preset, d, factors) for d in {r[1] for r in rows}}
    return np.array([expert_gemms_s(hws[d], p, tokens * topk / ep, hidden, inter / tp)
                     for (_, d, (hidden, inter, _, topk), tokens, tp, ep, _), p in zip(rows, plain_s)])


def fit(rows, preset, plain_s) -> tuple:
    """(moe_gemm_efficiency, moe_half_ffn) minimising the squared log error over `rows`."""
    measured = np.array([r[-1] for r in rows])

    def residuals(x):
        return np.log(predicted(rows, preset, (x[0], math.exp(x[1])), plain_s) / measured)

    x = least_squares(residuals, [0.5, math.log(256.0)], bounds=([0.01, 0.0], [1.0, 12.0])).x
    return x[0], math.exp(x[1])


def _errors(pred, rows) -> str:
    err = 100 * (pred / np.array([r[-1] for r in rows]) - 1)
    return (f"n {len(err):5d}  mean |err| {np.mean(np.abs(err)):6.1f} %  median {np.median(err):+6.1f} %"
            f"  within 20 %: {100 * np.mean(np.abs(err) <= 20):3.0f} %")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", required=True, help="comma-separated kernel-table folders of one GPU family")
    parser.add_argument("--preset", required=True, help="the family's GPU preset (peaks, bandwidth)")
    args = parser.parse_args()
    every = table_rows(args.gpus.split(","))
    for dtypes, names in GROUPS.items():
        report(args, [r for r in every if r[1] in dtypes], names)
    return 0


def report(args, every: list, names: tuple) -> None:
    """Fit one group of dtypes' factors on its rows without expert parallelism and print its errors."""
    rows = [r for r in every if r[5] == 1]
    base = plain(rows, args.preset)
    factors = fit(rows, args.preset, base)
    model = predicted(rows, args.preset, factors, base)
    print(f"{args.gpus}: {names[0]} {factors[0]:.3f}  {names[1]} {factors[1]:.0f}"
          f"  (fitted on the {len(rows)} rows without expert parallelism)")
    parallel = [r for r in every if r[5] > 1]
    if parallel:
        parallel_plain = plain(parallel, args.preset)
        print(f"  expert-parallel rows (held out) plain   {_errors(parallel_plain, parallel)}")
        print(f"  {'':31s} fitted  {_errors(predicted(parallel, args.preset, factors, parallel_plain), parallel)}")
    for label, keep in (("all rows", lambda r: True), (f">= {PREFILL_TOKENS} tokens", lambda r: r[3] >= PREFILL_TOKENS)):
        mask = np.array([keep(r) for r in rows])
        mine = [r for r in rows if keep(r)]
        print(f"  {label:16s} plain   {_errors(base[mask], mine)}")
        print(f"  {'':16s} fitted  {_errors(model[mask], mine)}")
    print(f"  leave-one-shape-out (hidden, inter, experts, top_k), rows of >= {PREFILL_TOKENS} tokens:"
          " plain, then fitted without the shape")
    for shape in sorted({r[2] for r in rows}):
        rest = np.array([r[2] != shape for r in rows])
        left_out = fit([r for r in rows if r[2] != shape], args.preset, base[rest])
        mask = ~rest & np.array([r[3] >= PREFILL_TOKENS for r in rows])
        mine = [r for r, m in zip(rows, mask) if m]
        print(f"    {str(shape):26s} plain   {_errors(base[mask], mine)}")
        print(f"    {'':26s} fitted  {_errors(predicted(mine, args.preset, left_out, base[mask]), mine)}"
              f"  ({left_out[0]:.3f}, {left_out[1]:.0f})")


if __name__ == "__main__":
    sys.exit(main())
