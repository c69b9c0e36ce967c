"""Fit TensorRT-LLM's MLA context kernel per GPU (calibration.engine_attention.trtllm.mla_prefill,
see core.model.specs.MlaPrefill) on the measured context tables of
../shared/validation/kernels/<gpu>/mla/trtllm, and print the errors in-sample and held out, then
the preset line. It edits nothing.

The op (core.model.ops.mla.mla_prefill) keeps the engine's GQA prefill kernel's floor and loads;
the MLA kernel's own are its shares of the peaks (BF16 over a BF16 cache, FP8 over an FP8 cache:
the engine's FP8 kernels) and its cost per 128-row query tile, which sets its short prompts of
many heads. The three are fitted together on every row, minimising the mean
|log(predicted / measured)| with each (cache dtype, size bucket) group of the kernel suite
weighing the same, from the preset's own figures. Held out: each GPU's kernel predicts its
siblings' tables (H100 <-> H200, B200 <-> B300 <-> GB200 <-> GB300).

    .venv/bin/python scripts/fit_mla_prefill.py [--gpus h100_sxm ...]
"""
import argparse
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from core.model.loader import load_hardware, with_dtype
from core.model.specs import MlaPrefill
from core.validation.kernels import KERNELS_DIR, PRESET_BY_GPU, Skip, _mla_context, _read, kernels_alone
from core.validation.systems import FAMILY_BY_GPU
from fit_engine_attention import group_weights

ENGINE = "trtllm"
COLUMNS = ("batch_size", "isl", "num_heads", "mla_dtype", "kv_cache_dtype")
CACHES = ("bfloat16", "fp8")  # the share each fits: tensor_share, fp8_tensor_share


def rows(gpu: str) -> list:
    """(batch, isl, heads, cache dtype, seconds) of a GPU's BF16 MLA context rows."""
    paths = sorted(KERNELS_DIR.glob(f"{gpu}/mla/{ENGINE}/*/context_mla_perf.parquet"))
    if not paths:
        return []
    values, latency_ms = _read(paths[0], COLUMNS, None)
    return [(b, isl, h, kv, ms * 1e-3) for (b, isl, h, dtype, kv), ms in zip(zip(*values), latency_ms)
            if dtype == "bfloat16" and kv in CACHES]


def with_shares(hw, mla: MlaPrefill):
    kernels = replace(hw.calibration.engine_kernels(ENGINE), mla_prefill=mla)
    return replace(hw, calibration=hw.calibration.with_engine("engine_attention", ENGINE, kernels))


def timed(hw, table) -> list:
    """(cache dtype, the kernel suite's bucket, predicted / measured - 1) per row it times."""
    out = []
    for b, isl, h, kv, seconds in table:
        result = _mla_context(hw, b, isl, h, "bfloat16", kv, ENGINE)
        if not isinstance(result, Skip):
            out.append((kv, result[2], result[3] / seconds - 1))
    return out


def fit_kernel(hw, table, start: MlaPrefill) -> MlaPrefill:
    """The MLA kernel's shares and tile cost, fitted from `start` (an FP8 cache's share only on a
    GPU with an FP8 peak; else its FP8-cache rows run the BF16 kernels and the share is moot)."""
    has_fp8 = "fp8" in dict(hw.gpu.peak_flops)
    ours = [r for r in table if has_fp8 or r[3] == "bfloat16"]
    weights = group_weights((kv, bucket) for kv, bucket, _ in timed(with_shares(hw, start), ours))

    def kernel(x) -> MlaPrefill:
        share, fp8_share, tile_us = np.clip(x, (0.05, 0.05, 0.0), (1.0, 1.0, 50.0))
        return MlaPrefill(float(share), float(fp8_share) if has_fp8 else start.fp8_tensor_share, float(tile_us) * 1e-6)

    def loss(x):
        errors = np.array([e for _, _, e in timed(with_shares(hw, kernel(x)), ours)])
        return float(np.sum(weights * np.abs(np.log1p(errors))))
    x0 = (start.tensor_share, start.fp8_tensor_share, start.tile_s * 1e6)
    best = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 2000})
    return kernel(best.x)


def report(hw, table) -> str:
    errors = timed(hw, table)
    groups = sorted({(kv, bucket) for kv, bucket, _ in errors}, key=lambda g: (g[0] != "bfloat16", g[1]))
    return ", ".join(f"{'' if kv == 'bfloat16' else 'fp8 '}{bucket} "
                     f"{100 * np.median([e for k, b, e in errors if (k, b) == (kv, bucket)]):+.0f}" for kv, bucket in groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", nargs="*", default=[g for g in PRESET_BY_GPU if rows(g)])
    args = ap.parse_args()
    fitted = {}
    for gpu in args.gpus:
        preset = PRESET_BY_GPU[gpu]
        hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
        kernels = hw.calibration.engine_kernels(ENGINE)
        if kernels is None:
            print(f"{gpu}: the preset has no {ENGINE} attention kernels")
            continue
        table = rows(gpu)
        gqa = MlaPrefill(kernels.prefill_tensor_share, kernels.prefill_fp8_tensor_share, kernels.prefill_tile_s)
        print(f"{gpu} with the GQA kernel ({gqa.tensor_share:.3f}, {gqa.fp8_tensor_share:.3f}, "
              f"{gqa.tile_s * 1e6:.2f} us): {report(with_shares(hw, gqa), table)}")
        mla = fit_kernel(hw, table, kernels.mla_prefill or gqa)
        fitted[gpu] = (hw, table, mla)
        print(f"{gpu} fitted: {report(with_shares(hw, mla), table)}")
        print(f"  mla_prefill: {{tensor_share: {mla.tensor_share:.3f}, fp8_tensor_share: {mla.fp8_tensor_share:.3f}, "
              f"tile: {mla.tile_s * 1e6:.2f} us}}")
    for gpu, (hw, table, _) in fitted.items():
        for sibling, (_, _, mla) in fitted.items():
            if sibling != gpu and FAMILY_BY_GPU[sibling] == FAMILY_BY_GPU[gpu]:
                print(f"{gpu} with {sibling}'s kernel (held out): {report(with_shares(hw, mla), table)}")


if __name__ == "__main__":
    main()
