"""Fit the fused attention model (core/model/ops/attention.py, flash_attention) per GPU family,
forward and backward, and print the errors in-sample and held out. It edits nothing.

The candidate model costs the backward's memory-bound passes and, on GPUs with warpgroup MMA
(mma_sync_share < 1), overlaps the softmax with the matmuls (attention_softmax_overlap).
Forward: attention_efficiency (the tensor cores' share, relative to compute_efficiency),
attention_tile_s (each 128-row query tile's own cost) and attention_floor_s on the prefill rows of the vLLM table of
../shared/validation/kernels/<gpu> (BF16, BF16 cache, no sliding window; every STRIDE-th row),
minimising the mean |log(predicted / measured)|. Held out: the TensorRT-LLM table and, on H100
and H200, our own cuDNN forward (core/validation/data/measured/<gpu>/attention.csv).

Backward: attention_backward_share (its tensor-core rate relative to the forward's) and
attention_backward_tile_s, with the forward as fitted, on our H100 cuDNN backward rows. Each
source (attention_tiles_large.csv, attention.csv) is fitted alone and predicts the other
(leave one source out); the fit on both is the one to take. attention_tiles.csv's rows under
0.5 ms hold autograd's host launch time and are left out. FlashAttention-2 rows (flash2) are
held out throughout: they test the mma_sync_share that sets their rate.

    .venv/bin/python scripts/fit_attention.py [--gpus h100_sxm h200_sxm ...]
"""
import argparse
import csv
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from core.model.loader import load_hardware, with_dtype
from core.model.ops.attention import flash_attention, overlaps_softmax
from core.validation.kernels import CONTEXT_COLUMNS, KERNELS_DIR, PRESET_BY_GPU, _read, kernels_alone, \
    ran_prefill_kernel
from core.validation.measured import ATTENTION_KERNELS, MEASURED_DIR

STRIDE = 7
HOST_BOUND_S = 0.5e-3  # attention_tiles.csv: a backward shorter than this holds the host's launch


def prefill_rows(gpu: str, framework: str) -> list:
    """(batch x heads, tokens, head_dim, kv_groups, seconds) of a table's BF16 prefill rows its
    prefill kernel ran (not vLLM's one-token prompts, which its decode kernel runs)."""
    out = []
    for path in sorted(KERNELS_DIR.glob(f"{gpu}/attention/{framework}/*/context_attention_perf.parquet")):
        values, latency_ms = _read(path, CONTEXT_COLUMNS, None)
        for (source, batch, isl, heads, kv_heads, dim, window, attn, kv), ms in zip(zip(*values), latency_ms):
            if not window and attn == "bfloat16" and kv == "bfloat16" and ran_prefill_kernel(source):
                out.append((batch * heads, isl, dim, max(1, heads // kv_heads), ms * 1e-3))
    return out[::STRIDE] if framework == "vllm" else out


def measured_rows(gpu: str, name: str, column: str, backend: str = "CUDNN_ATTENTION") -> list:
    path = MEASURED_DIR / gpu / name
    if not path.exists():
        return []
    out = []
    with path.open() as f:
        for row in csv.DictReader(f):
            seconds = float(row[column]) * 1e-3
            if row["backend"] == backend and not (name == "attention_tiles.csv" and seconds < HOST_BOUND_S):
                out.append((int(row["batch"]) * int(row["heads"]), int(row["seq"]), int(row["head_dim"]), 1, seconds))
    return out


def log_errors(hw, rows, backward=False, kernel="flash") -> np.ndarray:
    return np.array([np.log(flash_attention(hw, bh, s, s, d, g, True, backward, kernel).time_s / t)
                     for bh, s, d, g, t in rows])


def summary(hw, rows, backward=False, kernel="flash") -> str:
    if not rows:
        return "no rows"
    err = np.expm1(log_errors(hw, rows, backward, kernel)) * 100
    return (f"n {len(rows):5d}  median {np.median(err):+6.1f} %  mean |err| {np.mean(np.abs(err)):5.1f} %  "
            f"p90 {np.percentile(np.abs(err), 90):5.1f} %")


def with_cal(hw, **factors):
    return replace(hw, calibration=replace(hw.calibration, **factors))


def fit(hw, rows, names, start, bounds, backward=False):
    """The factors (in `names`, tile costs in microseconds) minimising mean |log error|."""
    def loss(x):
        x = np.clip(x, [b[0] for b in bounds], [b[1] for b in bounds])
        factors = {n: v * (1e-6 if n.endswith("_s") else 1) for n, v in zip(names, x)}
        return float(np.mean(np.abs(log_errors(with_cal(hw, **factors), rows, backward))))
    x = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-5}).x
    x = np.clip(x, [b[0] for b in bounds], [b[1] for b in bounds])
    return {n: v * (1e-6 if n.endswith("_s") else 1) for n, v in zip(names, x)}


def show(factors) -> str:
    return ", ".join(f"{n} {v * 1e6:.2f} us" if n.endswith("_s") else f"{n} {v:.3f}" for n, v in factors.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", nargs="*", default=list(PRESET_BY_GPU))
    args = parser.parse_args()
    fwd_names = ("attention_efficiency", "attention_tile_s", "attention_floor_s")
    fwd_bounds = ((0.2, 1.0), (0.0, 50.0), (0.0, 50.0))
    bwd_names, bwd_bounds = ("attention_backward_share", "attention_backward_tile_s"), ((0.2, 4.0), (0.0, 200.0))
    for gpu in args.gpus:
        preset = PRESET_BY_GPU[gpu]
        hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
        # the candidate: softmax overlap where the GPU has warpgroup MMA, the backward's passes
        hw = with_cal(hw, attention_softmax_overlap=overlaps_softmax(hw.gpu), attention_backward_passes=True)
        vllm = prefill_rows(gpu, "vllm")
        if not vllm:
            continue
        print(f"== {gpu} ({preset}); preset today: {show({n: getattr(hw.calibration, n) for n in fwd_names + bwd_names})}")
        forward = fit(hw, vllm, fwd_names, (hw.calibration.attention_efficiency, 5.0, 5.0), fwd_bounds)
        fitted = with_cal(hw, **forward)
        print(f"  forward fit: {show(forward)}")
        for label, model in (("preset", hw), ("fitted", fitted)):
            print(f"    {label}: vLLM prefill (fit)      {summary(model, vllm)}")
            print(f"    {label}: TRT-LLM prefill (held)  {summary(model, prefill_rows(gpu, 'trtllm'))}")
            print(f"    {label}: our cuDNN fwd (held)    {summary(model, measured_rows(gpu, 'attention.csv', 'fwd_ms'))}")
            print(f"    {label}: our cuDNN fwd, tiles    "
                  f"{summary(model, measured_rows(gpu, 'attention_tiles_large.csv', 'fwd_ms'))}")
            print(f"    {label}: our FA2 fwd (held)      "
                  f"{summary(model, measured_rows(gpu, 'attention.csv', 'fwd_ms', 'FLASH_ATTENTION'), kernel='flash2')}")
        sources = {name: measured_rows(gpu, name, "bwd_ms")
                   for name in ("attention_tiles_large.csv", "attention.csv", "attention_tiles.csv")}
        sources = {k: v for k, v in sources.items() if v}
        if "attention_tiles_large.csv" not in sources:
            continue
        both = sources["attention_tiles_large.csv"] + sources["attention.csv"]
        start = (1.2, 5.0)
        for name in ("attention_tiles_large.csv", "attention.csv"):
            alone = fit(fitted, sources[name], bwd_names, start, bwd_bounds, backward=True)
            model = with_cal(fitted, **alone)
            print(f"  backward fit on {name} alone: {show(alone)}")
            for other, rows in sources.items():
                tag = "fit" if other == name else "held"
                print(f"    {other:26s} ({tag}) {summary(model, rows, backward=True)}")
        backward = fit(fitted, both, bwd_names, start, bwd_bounds, backward=True)
        model = with_cal(fitted, **backward)
        print(f"  backward fit on both: {show(backward)}")
        for name, rows in sources.items():
            print(f"    {name:26s} {summary(model, rows, backward=True)}")
        flash2 = measured_rows(gpu, "attention_tiles_large.csv", "bwd_ms", "FLASH_ATTENTION") + \
            measured_rows(gpu, "attention.csv", "bwd_ms", "FLASH_ATTENTION")
        print(f"    FA2 backward (held)        {summary(model, flash2, backward=True, kernel='flash2')}")
        print(f"    preset today, cuDNN bwd    {summary(hw, both, backward=True)}")


if __name__ == "__main__":
    main()
