"""What our own runs of the kernel tables' GEMM grid show (core/validation/data/measured/*/gemm_grid,
taken by scripts/measure_gpu_kernels.py --gemm-grid on a lent H100 and H200).

Prints, per GPU and dtype:
- how closely our run reproduces the TensorRT-LLM table's rows (BF16: the same cuBLAS GEMM; FP8:
  the table's rows also quantize their input, ours do not), over the rows the GPU bound (at least
  GPU_BOUND_MS per GEMM; below that, stretches of the run were held by the host's launches);
- the tiles cuBLAS picks (weights x tokens, from its kernels' names) and how often it splits k;
- our model against the table with its own tile search and with cuBLAS's tile forced;
- the rate at which GEMMs of many output tiles and k <= 128 write their output, where the
  output is all they move.

    python3 scripts/gemm_grid_report.py
"""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from core.model import ops
from core.model.loader import load_hardware, with_dtype
from core.validation.kernels import INPUT_QUANT, KERNELS_DIR, PRESET_BY_GPU, flop_bucket, kernels_alone

MEASURED = Path(__file__).resolve().parents[1] / "core" / "validation" / "data" / "measured"
GPUS = ("h100_sxm", "h200_sxm")
DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
GPU_BOUND_MS = 0.04
# nvjet_sm90_<kind>_<weights>x<tokens>_<k depth>x<stages>_<cluster>_<raster>_bz_<options>
KERNEL_NAME = r"nvjet_sm90_\w+?_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_([hv])_"


def grid(gpu: str, dtype: str) -> pd.DataFrame:
    """Our times and kernels beside the table's rows and our model's, one row per shape."""
    folder = MEASURED / gpu / "gemm_grid"
    ours = pd.read_parquet(folder / f"gemm_grid_{dtype}.parquet")
    kernels = pd.read_parquet(folder / f"gemm_grid_kernels_{dtype}.parquet")
    table = pd.concat(pd.read_parquet(p) for p in sorted((KERNELS_DIR / gpu / "gemm" / "trtllm").glob("*/gemm_perf.parquet")))
    table = table[table.gemm_dtype == dtype][["m", "n", "k", "latency"]]
    frame = table.merge(kernels[["m", "n", "k", "kernels"]], on=["m", "n", "k"]).merge(
        ours[["m", "n", "k", "per_gemm_ms"]], on=["m", "n", "k"], how="left")
    tile = frame.kernels.str.extract(KERNEL_NAME)
    frame["tile_weights"], frame["tile_tokens"], frame["tile_k"] = (tile[i].astype(int) for i in range(3))
    frame["split_k"] = frame.kernels.str.contains("splitK")
    frame["bucket"] = [flop_bucket(2.0 * m * n * k) for m, n, k in zip(frame.m, frame.n, frame.k)]
    preset = PRESET_BY_GPU[gpu]
    hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
    # cuBLAS's warp-specialized kernels hold accumulators past half the register file (320 x 128
    # in FP32 is 160 KiB): the forced tile is timed without our feasibility limits.
    roomy = replace(hw, gpu=replace(hw.gpu, register_bytes_per_sm=4 * hw.gpu.register_bytes_per_sm,
                                    sram=replace(hw.gpu.sram, capacity_bytes=4 * hw.gpu.sram.capacity_bytes)))
    ours_dtype = DTYPES[dtype]
    quant = [INPUT_QUANT["trtllm", "fp8"](hw, m, k).time_s if dtype == "fp8" else 0.0 for m, k in zip(frame.m, frame.k)]
    frame["quant_ms"] = 1e3 * np.array(quant)
    frame["model_ms"] = 1e3 * (np.array([ops.gemm(hw, m, n, k, dtype=ours_dtype).time_s
                                         for m, n, k in zip(frame.m, frame.n, frame.k)]) + quant)
    frame["forced_ms"] = 1e3 * (np.array([ops.gemm(roomy, r.m, r.n, r.k, dtype=ours_dtype,
                                                   tiles=((r.tile_tokens, r.tile_weights, r.tile_k),)).time_s
                                          for r in frame.itertuples()]) + quant)
    return frame


def figures(error: pd.Series) -> str:
    return f"median {100 * error.median():+6.1f} %  p90 |err| {100 * error.abs().quantile(0.9):5.1f} %"


def report(gpu: str, dtype: str) -> None:
    frame = grid(gpu, dtype)
    print(f"\n== {gpu} {dtype}: {len(frame)} shapes")
    bound = frame[(frame.latency >= GPU_BOUND_MS) & frame.per_gemm_ms.notna()]
    for bucket, rows in bound.groupby("bucket"):
        line = f"ours / table, GPU-bound rows, {bucket:12s} n {len(rows):5d}  {figures(rows.per_gemm_ms / rows.latency - 1)}"
        if dtype == "fp8":
            line += f";  with our model's input cast {figures((rows.per_gemm_ms + rows.quant_ms) / rows.latency - 1)}"
        print(line)
    tiles = (frame.tile_weights.astype(str) + "x" + frame.tile_tokens.astype(str)).value_counts()
    print(f"cuBLAS tiles (weights x tokens): {len(tiles)} distinct; most picked "
          + ", ".join(f"{t} {c}" for t, c in tiles.head(8).items()) + f"; split k in {100 * frame.split_k.mean():.0f} % of shapes")
    for bucket, rows in frame.groupby("bucket"):
        whole = rows[~rows.split_k]
        print(f"model / table {bucket:12s} n {len(rows):5d}  our tiles {figures(rows.model_ms / rows.latency - 1)};"
              f"  unsplit rows n {len(whole):5d}: our tiles {figures(whole.model_ms / whole.latency - 1)},"
              f" cuBLAS's tile {figures(whole.forced_ms / whole.latency - 1)}")
    tiles_count = np.ceil(frame.m / frame.tile_tokens) * np.ceil(frame.n / frame.tile_weights)
    stores = frame[(frame.k <= 128) & ~frame.split_k & (tiles_count >= 4 * 132)]
    rate = stores.m * stores.n * 2 / (stores.latency * 1e-3) / 1e12
    print(f"output-bound rows (k <= 128, >= 4 waves of tiles, n {len(stores)}): output written at "
          f"{rate.quantile(0.1):.2f} / {rate.median():.2f} / {rate.quantile(0.9):.2f} TB/s (p10 / median / p90)")


def main() -> None:
    pd.set_option("display.width", 200)
    for gpu in GPUS:
        for dtype in DTYPES:
            report(gpu, dtype)


if __name__ == "__main__":
    main()
