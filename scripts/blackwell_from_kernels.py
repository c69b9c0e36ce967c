"""Hopper's and Blackwell's presets' figures from NVIDIA AIConfigurator's measured kernel tables
(issue 21). Prints, for each part (H100, H200 and the Blackwell parts) in the same tables:

- the datasheet peaks its system.yaml states (what the presets carry);
- the GEMM shares the model is fitted to (compute_efficiency, fp8_efficiency) come from
  scripts/fit_gemm.py on every GEMM row; this script prints the large GEMMs' (m, n, k >= 4096)
  median rate as a datasheet check;
- weight-stream efficiency (the presets' stream_efficiency): the tile model's time at neutral
  factors over the measured time, median over BF16 GEMMs of 1 to 8 rows over a >= 256 MiB
  weight (one HBM-bound sweep of the weight, as a decode step's), for the same vLLM 0.24.0
  kernels on every GPU (capped at 1);
- the GEMM floor (the presets' gpu.launch_overhead on Blackwell): the median over the BF16 GEMMs
  of at most SMALLEST_GEMM (core.validation.kernels) of the measured time less the tile model's
  time at zero launch overhead (what they spend before and after their few MMAs);
The NVLink dimension's figures (efficiency, pipeline fill, NVLS share) are fitted on the
NCCL tables by scripts/fit_nccl.py.

Also the NVFP4 GEMM rates, for the dtype work that follows (no fp4 field yet).

    .venv/bin/python scripts/blackwell_from_kernels.py [--kernels DIR]
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path
from statistics import median

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.model import ops  # noqa: E402
from core.model.loader import load_hardware  # noqa: E402
from core.validation.kernels import SMALLEST_GEMM, cutlass_arch  # noqa: E402

KERNELS = Path("/work/shared/validation/kernels")
# kernel-table folder -> preset
PARTS = {"h100_sxm": "h100-sxm5-80gb", "h200_sxm": "h200-sxm-141gb", "b200_sxm": "b200-sxm-180gb",
         "b300_sxm": "b300-sxm-288gb", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
BIG = 4096
STREAM_ROWS = 8
STREAM_BYTES = 256 * 2**20
NEUTRAL = {"calibration.compute_efficiency": 1.0, "calibration.fp8_efficiency": 1.0,
           "calibration.step_efficiency": 1.0, "calibration.stream_efficiency": 1.0, "calibration.memory_efficiency": 1.0,
           "calibration.kernel_overhead": "0 us"}


def system(kernels: Path, part: str) -> dict:
    return yaml.safe_load((kernels / part / "system.yaml").read_text())


def table(kernels: Path, part: str, op: str, name: str) -> pd.DataFrame:
    paths = sorted((kernels / part / op).glob(f"*/*/{name}.parquet"))
    if op == "gemm":  # the same framework on every part: vLLM's (the TRT-LLM tables differ by part)
        paths = [p for p in paths if p.parts[-3] == "vllm"]
    return pd.read_parquet(paths[-1])


def gemm_efficiency(hw, rows: pd.DataFrame, dtype: str) -> float:
    """Median over rows of the model's time at neutral factors over the measured time."""
    return median(ops.gemm(hw, int(r.m), int(r.n), int(r.k), dtype=dtype).time_s / (r.latency * 1e-3)
                  for r in rows.itertuples())


def gemm_floor_s(hw, rows: pd.DataFrame) -> float:
    """Median over rows of the measured time less the model's at zero launch overhead."""
    bare = replace(hw, gpu=replace(hw.gpu, launch_overhead_s=0.0))
    return median(r.latency * 1e-3 - ops.gemm(bare, int(r.m), int(r.n), int(r.k), dtype="bf16").time_s
                  for r in rows.itertuples())


def derive(kernels: Path = KERNELS) -> dict:
    """{part: figures} for every part."""
    figures = {}
    for part, preset in PARTS.items():
        spec = system(kernels, part)
        hw = load_hardware(preset, NEUTRAL)
        g = table(kernels, part, "gemm", "gemm_perf")
        big = g[(g.m >= BIG) & (g.n >= BIG) & (g.k >= BIG)]
        stream = g[(g.gemm_dtype == "bfloat16") & (g.m <= STREAM_ROWS) & (g.n * g.k * 2 >= STREAM_BYTES)]
        most_m, most_n, most_k = SMALLEST_GEMM
        tiny = g[(g.gemm_dtype == "bfloat16") & (g.m <= most_m) & (g.n <= most_n) & (g.k <= most_k)]
        flops = 2.0 * big.m * big.n * big.k / (big.latency * 1e-3)
        f = {
            "bf16_peak": spec["gpu"]["bfloat16_tc_flops"], "fp8_peak": spec["gpu"]["fp8_tc_flops"],
            "fp4_peak": spec["gpu"].get("fp4_tc_flops"), "hbm_bw": spec["gpu"]["mem_bw"],
            "nvlink_bw": spec["node"]["intra_node_bw"],
            "scaleout_bw": spec["node"].get("inter_rack_bw", spec["node"]["inter_node_bw"]),
            "bf16_median_tflops": float(flops[big.gemm_dtype == "bfloat16"].median()) / 1e12,
            "fp8_median_tflops": float(flops[big.gemm_dtype == "fp8"].median()) / 1e12,
            "nvfp4_median_tflops": float(flops[big.gemm_dtype == "nvfp4"].median()) / 1e12
            if (big.gemm_dtype == "nvfp4").any() else None,
            "stream_efficiency": min(1.0, gemm_efficiency(hw, stream, "bf16")),
            "gemm_floor_s": gemm_floor_s(hw, tiny),
            "arch": cutlass_arch(hw),
        }
        figures[part] = f
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=Path, default=KERNELS)
    args = ap.parse_args()
    figures = derive(args.kernels)
    T = 1e12
    print("datasheet (system.yaml): peak TFLOP/s dense, HBM TB/s, NVLink / scale-out GB/s per GPU and direction")
    for part, f in figures.items():
        fp4 = f"{f['fp4_peak'] / T:.0f}" if f["fp4_peak"] else "-"
        print(f"  {part:9s} bf16 {f['bf16_peak'] / T:6.0f}  fp8 {f['fp8_peak'] / T:6.0f}  fp4 {fp4:>6s}  "
              f"hbm {f['hbm_bw'] / T:5.2f}  nvlink {f['nvlink_bw'] / 1e9:4.0f}  scale-out {f['scaleout_bw'] / 1e9:4.0f}")
    print(f"\nlarge GEMMs (m, n, k >= {BIG}), vLLM 0.24.0: median TFLOP/s and share of the datasheet peak")
    for part, f in figures.items():
        fp4 = (f"  nvfp4 {f['nvfp4_median_tflops']:6.0f} ({f['nvfp4_median_tflops'] * T / f['fp4_peak']:.3f})"
               if f["nvfp4_median_tflops"] else "")
        print(f"  {part:9s} bf16 {f['bf16_median_tflops']:6.0f} ({f['bf16_median_tflops'] * T / f['bf16_peak']:.3f})"
              f"  fp8 {f['fp8_median_tflops']:6.0f} ({f['fp8_median_tflops'] * T / f['fp8_peak']:.3f}){fp4}")
    print("\nweight streams at neutral factors / measured (median): the presets' stream_efficiency")
    for part, f in figures.items():
        print(f"  {part:9s} stream_efficiency {f['stream_efficiency']:.3f}")
    print(f"\nGEMM floor: BF16 GEMMs of (m, n, k) at most {SMALLEST_GEMM}, measured less the model"
          " at zero launch overhead (median): the Blackwell presets' gpu.launch_overhead")
    for part, f in figures.items():
        print(f"  {part:9s} {f['gemm_floor_s'] * 1e6:.2f} us")
    blackwell = [f["gemm_floor_s"] for f in figures.values() if f["arch"] == "sm100"]
    print(f"  Blackwell, median over its parts: {median(blackwell) * 1e6:.2f} us")

if __name__ == "__main__":
    main()
