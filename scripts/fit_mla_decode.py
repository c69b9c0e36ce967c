"""Fit TensorRT-LLM's MLA decode kernel per GPU (calibration.engine_attention.trtllm.mla_decode,
see core.model.specs.MlaDecode) on the measured generation tables of
../shared/validation/kernels/<gpu>/mla/trtllm, and print the errors in-sample and held out,
then the preset line. It edits nothing.

The op (core.model.ops.mla.mla_decode with an engine): a floor, a cost per (sequence, 64-head
tile) spread over the SMs, and the larger of the latent cache's sweep at a share of HBM
bandwidth and the absorbed matmuls at a share of the BF16 peak (over an FP8 cache, a sweep
share and a share of the FP8 peak of its own). The six figures minimise the mean |log(predicted / measured)| over every STRIDE-th
BF16 row, each (cache dtype, size bucket) group of the kernel suite weighing the same, from a
few starts, shares bounded to (0, 1]. Held out: each GPU's figures predict its siblings' tables
(H100 <-> H200, B200 <-> B300 <-> GB200 <-> GB300).

    .venv/bin/python scripts/fit_mla_decode.py [--gpus h100_sxm ...]
"""
import argparse
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from core.model.loader import load_hardware, with_dtype
from core.model.ops.mla import mla_decode
from core.model.specs import MlaDecode
from core.validation.kernels import (KERNELS_DIR, KV_BYTES, MLA_KV_LORA_RANK, MLA_ROPE_DIM, PRESET_BY_GPU, _read,
                                     kernels_alone, kv_bucket)
from core.validation.systems import FAMILY_BY_GPU

ENGINE = "trtllm"
STRIDE = 2
COLUMNS = ("batch_size", "num_heads", "step", "mla_dtype", "kv_cache_dtype")
# (floor us, per-sequence-tile us, bandwidth share, BF16 share, FP8 share, FP8 bandwidth share)
# starts and bounds
STARTS = ((6.0, 0.1, 0.9, 0.5, 0.5, 0.9), (9.0, 0.3, 0.8, 0.3, 0.3, 0.8), (3.0, 0.05, 1.0, 0.7, 0.6, 1.0))
BOUNDS = ((0.0, 50.0), (0.0, 50.0), (0.05, 1.0), (0.05, 1.0), (0.05, 1.0), (0.05, 1.0))


def rows(gpu: str) -> list:
    """(batch, heads, context, cache bytes per element, seconds) of a GPU's BF16 MLA decode rows."""
    paths = sorted(KERNELS_DIR.glob(f"{gpu}/mla/{ENGINE}/*/generation_mla_perf.parquet"))
    if not paths:
        return []
    values, latency_ms = _read(paths[0], COLUMNS, None)
    return [(b, h, step + 1, KV_BYTES[kv], ms * 1e-3) for (b, h, step, dtype, kv), ms in zip(zip(*values), latency_ms)
            if dtype == "bfloat16" and kv in KV_BYTES]


def kernel(x) -> MlaDecode:
    x = [float(np.clip(v, lo, hi)) for v, (lo, hi) in zip(x, BOUNDS)]
    return MlaDecode(floor_s=x[0] * 1e-6, sequence_s=x[1] * 1e-6, bandwidth_share=x[2], tensor_share=x[3],
                     fp8_tensor_share=x[4], fp8_bandwidth_share=x[5])


def with_kernel(hw, mla: MlaDecode):
    kernels = replace(hw.calibration.engine_kernels(ENGINE), mla_decode=mla)
    return replace(hw, calibration=hw.calibration.with_engine("engine_attention", ENGINE, kernels))


def predicted(hw, sample) -> np.ndarray:
    return np.array([mla_decode(hw, b, h, c, MLA_KV_LORA_RANK, MLA_ROPE_DIM, el, ENGINE).time_s
                     for b, h, c, el, _ in sample])


def label(row) -> tuple:
    b, _, c, el, _ = row
    return el, kv_bucket(b * c * (MLA_KV_LORA_RANK + MLA_ROPE_DIM) * el)


def fit(hw, table) -> MlaDecode:
    sample = table[::STRIDE]
    measured = np.array([r[-1] for r in sample])
    labels = [label(r) for r in sample]
    counts = {k: labels.count(k) for k in set(labels)}
    weights = np.array([1.0 / counts[k] for k in labels]) / len(counts)

    def loss(x):
        return float(np.sum(weights * np.abs(np.log(predicted(with_kernel(hw, kernel(x)), sample) / measured))))
    best = min((minimize(loss, start, method="Nelder-Mead", options={"maxiter": 3000, "xatol": 1e-4, "fatol": 1e-7})
                for start in STARTS), key=lambda r: r.fun)
    return kernel(best.x)


def report(hw, table) -> str:
    error = predicted(hw, table) / np.array([r[-1] for r in table]) - 1
    labels = [label(r) for r in table]
    out = []
    for key in sorted(set(labels), key=lambda k: (-k[0], k[1])):
        mask = np.array([lab == key for lab in labels])
        out.append(f"{'' if key[0] == 2 else 'fp8 '}{key[1]} {100 * np.median(error[mask]):+.0f}")
    return ", ".join(out)


def preset_line(mla: MlaDecode) -> str:
    return (f"mla_decode: {{floor: {mla.floor_s * 1e6:.2f} us, sequence: {mla.sequence_s * 1e6:.3f} us, "
            f"bandwidth_share: {mla.bandwidth_share:.3f}, tensor_share: {mla.tensor_share:.3f}, "
            f"fp8_tensor_share: {mla.fp8_tensor_share:.3f}, fp8_bandwidth_share: {mla.fp8_bandwidth_share:.3f}}}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", nargs="*", default=list(PRESET_BY_GPU))
    args = parser.parse_args()
    hardware = {gpu: kernels_alone(with_dtype(load_hardware(PRESET_BY_GPU[gpu]), "bf16", PRESET_BY_GPU[gpu], "dtype"))
                for gpu in args.gpus}
    tables = {gpu: rows(gpu) for gpu in args.gpus}
    fitted = {gpu: fit(hw, tables[gpu]) for gpu, hw in hardware.items() if tables[gpu]}
    for gpu, mla in fitted.items():
        print(f"== {gpu}: {preset_line(mla)}")
        print(f"  {gpu:9s} as preset: {report(hardware[gpu], tables[gpu])}")
        for source in [g for g in fitted if FAMILY_BY_GPU[g] == FAMILY_BY_GPU[gpu]]:
            tag = "fit " if source == gpu else "held"
            print(f"  {gpu:9s} by {source:9s} ({tag}): {report(with_kernel(hardware[gpu], fitted[source]), tables[gpu])}")


if __name__ == "__main__":
    main()
