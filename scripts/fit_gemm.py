"""Fit each GPU preset's GEMM kernel shares (calibration.compute_efficiency for BF16,
fp8_efficiency for per-tensor FP8 and nvfp4_efficiency for NVFP4, relative to it) on the measured GEMM tables of
../shared/validation/kernels (issue 21), and print them with the errors `rapid validate --suite
kernels` reports, in-sample and held out. It edits nothing.

Each share minimises the mean |log(predicted / measured)| over the GPU's GEMMs of at least FIT_FLOPS
(100 GFLOP), where the tensor cores' share sets the time (smaller ones, set by floors, tiles and
bandwidth, test the rest of the model), each row timed as the kernel suite times it (ops.gemm, FP8
rows with the engine's input quantization); the kernels' floor is the preset's launch_overhead. BF16
pools every engine's table. FP8 is fitted on TensorRT-LLM's table, whose per-tensor FP8 GEMM is
cuBLAS's, the one Transformer Engine's FP8 training calls; vLLM's table, CUTLASS's scaled GEMM, is
timed at that share over cuBLAS's lead (core.validation.kernels.CUBLAS_OVER_CUTLASS_FP8), so its fit
is a cuBLAS share too, and a GPU without TensorRT-LLM's table (Blackwell's TensorRT-LLM GEMM folders
only point at a collection not shipped) takes it. The lead is the mean ratio of the two raw shares
where a GPU's tables hold both (printed, to set the constant). NVFP4 is fitted on Blackwell's only
NVFP4 table, vLLM's (FlashInfer's CuTe DSL kernel), its input quantized in one pass; no other
library's NVFP4 GEMM is measured, so the share is that kernel's. Block-scaled FP8's share is
cuBLAS's, measured on our own H100 (the preset's); TensorRT-LLM's fp8_block table is timed at it
times TRTLLM_FP8_BLOCK_OVER_CUBLAS, whose refit is printed, beside the time its k-blocks take in
turn on Hopper (block_scale_step_s) and the time its input's cast takes through the SMs
(TRTLLM_BLOCK_QUANT_SM_S, read off its rows of few outputs and many rows). Held out: each GPU's
shares predict its siblings' tables (the same die: H100 <-> H200, B200 <-> B300 <-> GB200 <->
GB300), and the errors printed are those rows'. The output stores' share
(calibration.store_efficiency) is read, not fitted, off the GPU's BF16 rows of k <= STORE_K whose
output is at least STORE_OUTPUT_BYTES: the median rate at which they write it, over the HBM peak
(our own runs of the H100 and H200 grids show cuBLAS's kernels for those rows tiling the output in
four waves and more); vLLM's FP8 and NVFP4 kernels' rates over it are read off their tables' rows
alike (core.validation.kernels's LIBRARY_STORE, per CUTLASS architecture). Their later start than
cuBLAS's BF16 kernel (core.validation.kernels's LIBRARY_PROLOGUE_S) is read off their smallest rows
(at most SMALLEST_GEMM): what those take beyond the model's time without it.

    .venv/bin/python scripts/fit_gemm.py [--gpus h100_sxm ...]
"""
import argparse
from dataclasses import replace
from math import ceil

import numpy as np
from scipy.optimize import minimize_scalar

from core.model import ops
from core.model.loader import load_hardware, with_dtype
from core.model.ops.pointwise import (NVFP4_ELEMENT_SM_S, NVFP4_ROW_SM_S, ROW_BLOCK_SM_S, ROW_PASS_ELEMENTS,
                                      ROW_PASS_SM_S)
from core.validation.kernels import CUBLAS_OVER_CUTLASS_FP8, INPUT_QUANT, KERNELS_DIR, LIBRARY_PROLOGUE_S, \
    LIBRARY_STORE, PRESET_BY_GPU, SMALLEST_GEMM, TRTLLM_BLOCK_QUANT_SM_S, TRTLLM_FP8_BLOCK_OVER_CUBLAS, Skip, \
    _gemm, _read, cutlass_arch, error_summary, flop_bucket, kernels_alone, library_gemm_s
from core.validation.systems import FAMILY_BY_GPU

STRIDE = 2
FIT_FLOPS = 100e9
FP8_ENGINE = "trtllm"  # TensorRT-LLM's FP8 rows run cuBLAS's scaled GEMM, as Transformer Engine does
FP8_ENGINES = (FP8_ENGINE, "vllm")
# The tables' GEMM dtypes and the share each fits
SHARE = {"bfloat16": "compute_efficiency", "fp8": "fp8_efficiency", "fp8_block": "fp8_block_efficiency",
         "nvfp4": "nvfp4_efficiency"}


def rows(gpu: str, dtype: str, stride: int, engine: str = "") -> list:
    """(engine, m, n, k, measured seconds) of the GPU's GEMM rows in the tables' `dtype`, of one
    engine's table or ("") every engine's."""
    out = []
    for path in sorted(KERNELS_DIR.glob(f"{gpu}/gemm/{engine or '*'}/*/gemm_perf.parquet")):
        (m, n, k, dtypes), latency_ms = _read(path, ("m", "n", "k", "gemm_dtype"), None)
        out += [(path.parent.parent.name, *shape, ms * 1e-3) for *shape, d, ms in zip(m, n, k, dtypes, latency_ms)
                if d == dtype][::stride]
    return out


def predicted(hw, table: list, dtype: str) -> np.ndarray:
    out = [_gemm(hw, m, n, k, dtype, engine) for engine, m, n, k, _ in table]
    return np.array([np.nan if isinstance(o, Skip) else o[3] for o in out])


def with_share(hw, dtype: str, value: float):
    return replace(hw, calibration=replace(hw.calibration, **{SHARE[dtype]: value}))


def fit(hw, table: list, dtype: str) -> float:
    table = [r for r in table if 2.0 * r[1] * r[2] * r[3] >= FIT_FLOPS]
    measured = np.array([r[-1] for r in table])

    def loss(value):
        p = predicted(with_share(hw, dtype, value), table, dtype)
        keep = ~np.isnan(p)
        return float(np.mean(np.abs(np.log(p[keep] / measured[keep]))))

    return float(minimize_scalar(loss, bounds=(0.2, 1.0), method="bounded", options={"xatol": 2e-3}).x)


def report(label: str, hw, table: list, dtype: str) -> None:
    if not table:
        return
    p = predicted(hw, table, dtype)
    measured = np.array([r[-1] for r in table])
    flops = np.array([2.0 * m * n * k for _, m, n, k, _ in table])
    for bucket in ("<1 GFLOP", "1-100 GFLOP", ">=100 GFLOP"):
        keep = ~np.isnan(p) & np.array([flop_bucket(f) == bucket for f in flops])
        if keep.any():
            e = error_summary(p[keep], measured[keep])
            print(f"    {label:22s} {dtype:4s} {bucket:12s} n {e['n']:6d}  median {e['median_error_pct']:+6.1f} %  "
                  f"mean |err| {e['mean_abs_error_pct']:5.1f} %  p90 {e['p90_abs_error_pct']:5.1f} %")


STORE_K = 128  # GEMMs this shallow spend their time writing their output
STORE_OUTPUT_BYTES = 64e6


def store_rate_bps(hw, gpu: str, dtype: str = "bfloat16", engine: str = "") -> float | None:
    """The median rate at which the GPU's short-k GEMMs in `dtype` write their BF16 output (every
    engine's table, or one's), the engine's input quantization taken out. None without rows."""
    rates = [m * n * 2 / (s - (INPUT_QUANT[e, dtype](hw, m, k).time_s if dtype != "bfloat16" else 0.0))
             for e, m, n, k, s in rows(gpu, dtype, 1, engine) if k <= STORE_K and m * n * 2 >= STORE_OUTPUT_BYTES]
    return float(np.median(rates)) if rates else None


def fp8_shares(hw, gpu: str) -> dict:
    """The FP8 share fitted on each engine's table the GPU has."""
    return {engine: fit(hw, table, "fp8") for engine in FP8_ENGINES if (table := rows(gpu, "fp8", STRIDE, engine))}


def block_scale_step_s(gpu: str) -> float | None:
    """TensorRT-LLM's block-scaled FP8 GEMMs of few output tiles (m <= 64, n <= 1536: one wave)
    grow linearly in k: the median over those (m, n) of the time each further 128-deep k-block
    adds from k = 16,384 to 65,536 (gpu.block_scale_step). None without the table."""
    table = {(m, n, k): s for _, m, n, k, s in rows(gpu, "fp8_block", 1, FP8_ENGINE) if m <= 64 and n <= 1536}
    slopes = [(table[m, n, 65536] - table[m, n, 16384]) / ((65536 - 16384) / 128)
              for m, n, k in table if k == 16384 and (m, n, 65536) in table]
    return float(np.median(slopes)) if slopes else None


def row_pass_sm_s(hw, gpu: str) -> tuple | None:
    """One SM's time per row and per pass of 2,048 elements of vLLM's static FP8 cast
    (ops.row_cast), read off its table's rows of few outputs and many rows (n <= 128, m >=
    1,024), where the cast dominates: what each leaves after the GEMM and the launch, per row and
    SM (over the rows the busiest SM is dealt), its median at each pass count, then a line
    through those medians. None without the table."""
    table = [(m, k, s - library_gemm_s(hw, m, n, k, "fp8", "vllm") - ops.launch_s(hw))
             for _, m, n, k, s in rows(gpu, "fp8", 1, "vllm") if n <= 128 and m >= 1024]
    if not table:
        return None
    by_passes = {}
    for m, k, left in table:
        by_passes.setdefault(ceil(k / ROW_PASS_ELEMENTS), []).append(left / ceil(m / hw.gpu.sm_count))
    passes = sorted(by_passes)
    per_pass, per_row = np.polyfit(passes, [np.median(by_passes[p]) for p in passes], 1)
    return float(per_row), float(per_pass)


def library_prologue_s(hw, gpu: str, dtype: str) -> float | None:
    """What vLLM's `dtype` GEMM rows of at most SMALLEST_GEMM take beyond the model's time for
    them without LIBRARY_PROLOGUE_S (median): the library kernel's later start than cuBLAS's BF16
    one. None without the table."""
    set_s = LIBRARY_PROLOGUE_S.get(("vllm", dtype, cutlass_arch(hw)), 0.0)
    most_m, most_n, most_k = SMALLEST_GEMM
    left = [s - _gemm(hw, m, n, k, dtype, "vllm")[3] + set_s for _, m, n, k, s in rows(gpu, dtype, 1, "vllm")
            if m <= most_m and n <= most_n and k <= most_k]
    return float(np.median(left)) if left else None


BLOCK_QUANT_N, BLOCK_QUANT_ROWS = 256, 4096


def trtllm_block_quant_sm_s(hw, gpu: str) -> float | None:
    """One SM's time per element of TensorRT-LLM's 1 x 128 FP8 input quantization, read off its
    block-scaled table's rows of at most BLOCK_QUANT_N outputs and at least BLOCK_QUANT_ROWS rows,
    where the cast outlasts the GEMM: what each leaves after the GEMM and the cast's launch in a
    graph, per element and SM (median). None without the table."""
    launch_s = hw.gpu.graph_launch_overhead_s
    per_element = [(s - library_gemm_s(hw, m, n, k, "fp8_block", FP8_ENGINE) - launch_s) * hw.gpu.sm_count / (m * k)
                   for _, m, n, k, s in rows(gpu, "fp8_block", 1, FP8_ENGINE)
                   if n <= BLOCK_QUANT_N and m >= BLOCK_QUANT_ROWS]
    return float(np.median(per_element)) if per_element else None


NVFP4_CAST_ROWS = 4096  # from here on the table's NVFP4 rows grow with m at any k


def nvfp4_cast_sm_s(hw, gpu: str) -> tuple | None:
    """One SM's time per row and per element of vLLM's NVFP4 input quantization (ops.row_cast),
    read off its table's rows of few outputs (n <= 64) and at least NVFP4_CAST_ROWS rows, where
    the quantization dominates: what each leaves after the GEMM and the launch, per row at k of
    64 to 256, then per element at k >= 1,024 once the rows' time is taken out (medians). None
    without the table."""
    table = [(m, k, s - library_gemm_s(hw, m, n, k, "nvfp4", "vllm") - ops.launch_s(hw))
             for _, m, n, k, s in rows(gpu, "nvfp4", 1, "vllm") if n <= 64 and m >= NVFP4_CAST_ROWS]
    if not table:
        return None
    sms = hw.gpu.sm_count
    per_row = float(np.median([left / ceil(m / sms) for m, k, left in table if 64 <= k <= 256]))
    per_element = float(np.median([(left / ceil(m / sms) - per_row) / k for m, k, left in table if k >= 1024]))
    return per_row, per_element


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", nargs="*", default=[g for g in PRESET_BY_GPU if (KERNELS_DIR / g).is_dir()])
    args = ap.parse_args()
    fitted, by_engine, stores, prologues = {}, {}, {}, {}
    for gpu in args.gpus:
        preset = PRESET_BY_GPU[gpu]
        hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
        if (bf16_store_bps := store_rate_bps(hw, gpu)) is not None:
            store = bf16_store_bps / hw.gpu.hbm.bandwidth_bps
            print(f"{gpu}: short-k GEMMs write their output at {store:.3f} of HBM"
                  f" (calibration.store_efficiency: {hw.calibration.store_efficiency:.3f})")
            hw = replace(hw, calibration=replace(hw.calibration, store_efficiency=min(1.0, store)))
        hw = with_share(hw, "bfloat16", fit(hw, rows(gpu, "bfloat16", STRIDE), "bfloat16"))
        if "fp8" in dict(hw.gpu.peak_flops):
            by_engine[gpu] = fp8_shares(hw, gpu)
        if (cast := row_pass_sm_s(hw, gpu)) is not None:
            print(f"{gpu}: vLLM's FP8 cast takes {cast[0] * 1e6:.3f} us of one SM per row and {cast[1] * 1e6:.3f} us"
                  f" per pass of {ROW_PASS_ELEMENTS} elements (ROW_BLOCK_SM_S: {ROW_BLOCK_SM_S * 1e6:.3f},"
                  f" ROW_PASS_SM_S: {ROW_PASS_SM_S * 1e6:.3f} us)")
        if (cast := nvfp4_cast_sm_s(hw, gpu)) is not None:
            print(f"{gpu}: vLLM's NVFP4 cast takes {cast[0] * 1e9:.1f} ns of one SM per row and {cast[1] * 1e9:.4f} ns"
                  f" per element (NVFP4_ROW_SM_S: {NVFP4_ROW_SM_S * 1e9:.1f}, NVFP4_ELEMENT_SM_S:"
                  f" {NVFP4_ELEMENT_SM_S * 1e9:.4f} ns)")
        for dtype in ("fp8", "nvfp4"):  # vLLM's kernels' starts and epilogues over cuBLAS's BF16 one
            if dtype in dict(hw.gpu.peak_flops) and (late_s := library_prologue_s(hw, gpu, dtype)) is not None:
                prologues.setdefault((dtype, cutlass_arch(hw)), []).append(late_s)  # LIBRARY_PROLOGUE_S
                print(f"{gpu}: vLLM's {dtype} GEMMs start {late_s * 1e6:+.2f} us after cuBLAS's BF16 ones")
            if bf16_store_bps and dtype in dict(hw.gpu.peak_flops) and (rate := store_rate_bps(hw, gpu, dtype, "vllm")):
                stores.setdefault((dtype, cutlass_arch(hw)), []).append(rate / bf16_store_bps)
                print(f"{gpu}: vLLM's {dtype} GEMMs write their output at {rate / bf16_store_bps:.3f} of the BF16"
                      " GEMMs' rate")
        if "nvfp4" in dict(hw.gpu.peak_flops) and (table := rows(gpu, "nvfp4", STRIDE)):
            hw = with_share(hw, "nvfp4", fit(hw, table, "nvfp4"))
        fitted[gpu] = hw
    # cuBLAS's scaled GEMM over vLLM's CUTLASS one, where a GPU's tables hold both: the ratio of
    # the two raw shares (vLLM's fit is in cuBLAS terms, its raw share that over the constant)
    ratios = [s[FP8_ENGINE] / s["vllm"] * CUBLAS_OVER_CUTLASS_FP8 for s in by_engine.values()
              if FP8_ENGINE in s and "vllm" in s]
    cublas_over_cutlass = float(np.mean(ratios)) if ratios else CUBLAS_OVER_CUTLASS_FP8
    for gpu, hw in fitted.items():
        shares = by_engine.get(gpu, {})
        if shares:
            share = shares.get(FP8_ENGINE, shares.get("vllm", 0.0))
            hw = fitted[gpu] = with_share(hw, "fp8", min(1.0, share))
            if step_s := block_scale_step_s(gpu):
                print(f"{gpu}: a block-scaled FP8 k-block of 128 takes {step_s * 1e9:.0f} ns in turn"
                      f" (gpu.block_scale_step: {hw.gpu.block_scale_step_s * 1e9:.0f} ns)")
            if (quant_s := trtllm_block_quant_sm_s(hw, gpu)) is not None:
                print(f"{gpu}: TensorRT-LLM's 1 x 128 FP8 cast takes {quant_s * 1e9:.3f} ns of one SM per element"
                      f" (TRTLLM_BLOCK_QUANT_SM_S: {TRTLLM_BLOCK_QUANT_SM_S * 1e9:.3f} ns)")
            if table := rows(gpu, "fp8_block", STRIDE, FP8_ENGINE):  # TensorRT-LLM's block-scaled kernel
                measured = hw.calibration.fp8_block_efficiency  # the preset's, cuBLAS's measured share
                hw = fitted[gpu] = with_share(hw, "fp8_block", min(1.0, fit(hw, table, "fp8_block")))
                print(f"{gpu}: TensorRT-LLM's block-scaled FP8 over cuBLAS's measured share "
                      f"{TRTLLM_FP8_BLOCK_OVER_CUBLAS * hw.calibration.fp8_block_efficiency / measured:.3f}"
                      f" (core.validation.kernels.TRTLLM_FP8_BLOCK_OVER_CUBLAS: {TRTLLM_FP8_BLOCK_OVER_CUBLAS})")
        c = hw.calibration
        print(f"{gpu} ({PRESET_BY_GPU[gpu]}): " + "  ".join(f"{share} {getattr(c, share):.3f}" for share in SHARE.values())
              + f"  (FP8 share per engine table: {', '.join(f'{e} {v:.3f}' for e, v in shares.items()) or 'none'})")
        for dtype in SHARE:
            report("in-sample", hw, rows(gpu, dtype, 1), dtype)
    for (dtype, arch), ratios in stores.items():
        print(f"vLLM's {dtype} output over cuBLAS's BF16 on {arch} (mean over GPUs): {np.mean(ratios):.3f}"
              f" (core.validation.kernels.LIBRARY_STORE: {LIBRARY_STORE['vllm', dtype, arch]})")
    for (dtype, arch), starts in prologues.items():
        set_s = LIBRARY_PROLOGUE_S.get(("vllm", dtype, arch), 0.0)
        print(f"vLLM's {dtype} GEMMs' later start on {arch} (mean over GPUs): {np.mean(starts) * 1e6:+.2f} us"
              f" (core.validation.kernels.LIBRARY_PROLOGUE_S: {set_s * 1e6:.2f} us)")
    print(f"cuBLAS FP8 over vLLM's CUTLASS FP8 (GPUs with both tables): {cublas_over_cutlass:.3f}"
          f" (core.validation.kernels.CUBLAS_OVER_CUTLASS_FP8: {CUBLAS_OVER_CUTLASS_FP8})")
    for gpu, own in fitted.items():
        for sibling, hw in fitted.items():
            if sibling != gpu and FAMILY_BY_GPU[sibling] == FAMILY_BY_GPU[gpu]:
                c = hw.calibration
                held = replace(own, calibration=replace(own.calibration, store_efficiency=c.store_efficiency, **{
                    share: getattr(c, share) for share in SHARE.values()}))
                print(f"{gpu} with {sibling}'s shares (held out):")
                for dtype in SHARE:
                    report(sibling, held, rows(gpu, dtype, 1), dtype)


if __name__ == "__main__":
    main()
