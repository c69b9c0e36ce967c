"""Fit each inference engine's attention kernels (calibration.engine_attention, see
core.model.specs.EngineAttention) per GPU on the measured kernel tables of
../shared/validation/kernels/<gpu>/attention/<engine>, and print the errors in-sample and held
out, then the preset block. It edits nothing.

Prefill: prefill_tensor_share, prefill_fp8_tensor_share, prefill_cache_share, prefill_tile,
prefill_floor and, on GPUs whose kernels overlap softmax with the matmuls (mma_sync_share < 1),
prefill_softmax_exposed, on the engine's BF16 context rows (every STRIDE-th; BF16 and FP8 caches,
no sliding window) its prefill kernel ran (not vLLM's one-token prompts, which its decode kernel
runs, nor rows of a kernel the model does not time: core.validation.kernels.attention_modelled).
Decode: the eleven DECODE factors on its BF16 generation rows, both cache
dtypes, from a few starts. Both minimise the mean |log(predicted / measured)| with each (cache
dtype, size bucket) group of the kernel suite weighing the same. decode_max_group and FACTS are
the engine's facts, not fitted: TensorRT-LLM's XQA takes at most 32 query heads per KV head
(beyond, its masked multi-head kernel reads the cache once per query head); vLLM's kernels pack
any group, and over an FP8 cache vLLM casts the queries in a kernel of its own; TensorRT-LLM's
Hopper XQA runs a group's MMAs over an FP8 cache in FP8 (the last two read from the preset).
Each fit also starts from the preset's own figures and keeps the better optimum.

Held out: each GPU's factors predict its siblings' tables (the same die: H100 <-> H200,
B200 <-> B300 <-> GB200 <-> GB300), printed per size bucket as `rapid validate --suite kernels`
groups them.

    .venv/bin/python scripts/fit_engine_attention.py [--gpus h100_sxm ...] [--engines trtllm vllm]
"""
import argparse
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from core.model.loader import load_hardware, with_dtype
from core.model.ops.attention import engine_decode_s, flash_attention, overlaps_softmax
from core.model.specs import EngineAttention
from core.validation.kernels import ATTENTION_DTYPES, CONTEXT_COLUMNS, GENERATION_COLUMNS, KERNELS_DIR, KV_BYTES, \
    PRESET_BY_GPU, _read, attention_modelled, flop_bucket, kernels_alone, kv_bucket, ran_prefill_kernel
from core.validation.systems import FAMILY_BY_GPU

STRIDE = 5
MAX_GROUP = {"trtllm": 32, "vllm": 0}
PREFILL = ("prefill_tensor_share", "prefill_fp8_tensor_share", "prefill_cache_share", "prefill_tile_s",
           "prefill_floor_s", "prefill_softmax_exposed")
DECODE = ("decode_floor_s", "decode_pair_s", "decode_bandwidth_share", "decode_fp8_bandwidth_share",
          "decode_split_tokens", "decode_max_splits", "decode_saturation", "decode_score_s", "decode_group_pair_s",
          "decode_fp8_group_floor_s", "decode_fp8_widen_s")
# fitted in these units (microseconds, nanoseconds), within these bounds
SCALE = {"prefill_tile_s": 1e-6, "prefill_floor_s": 1e-6, "decode_floor_s": 1e-6, "decode_pair_s": 1e-6,
         "decode_score_s": 1e-9, "decode_group_pair_s": 1e-6, "decode_fp8_group_floor_s": 1e-6,
         "decode_fp8_widen_s": 1e-9}
BOUNDS = {"prefill_tensor_share": (0.2, 1.0), "prefill_fp8_tensor_share": (0.1, 1.0), "prefill_softmax_exposed": (0.0, 1.0),
          "prefill_cache_share": (0.02, 1.0), "prefill_tile_s": (0.0, 50.0), "prefill_floor_s": (0.0, 50.0),
          "decode_floor_s": (0.0, 50.0), "decode_pair_s": (0.0, 50.0), "decode_bandwidth_share": (0.2, 1.0),
          "decode_fp8_bandwidth_share": (0.2, 1.0), "decode_split_tokens": (16.0, 4096.0),
          "decode_max_splits": (1.0, 1024.0), "decode_saturation": (0.1, 64.0), "decode_score_s": (0.0, 100.0),
          "decode_group_pair_s": (0.0, 50.0), "decode_fp8_group_floor_s": (0.0, 50.0),
          "decode_fp8_widen_s": (0.0, 10.0)}
DECODE_STARTS = ((3.0, 1.3, 0.85, 0.85, 256.0, 64.0, 1.0, 0.3, 1.3, 3.0, 0.05),
                 (3.0, 3.0, 0.9, 0.7, 32.0, 16.0, 2.0, 0.1, 3.0, 3.0, 0.0),
                 (1.0, 1.0, 1.0, 1.0, 128.0, 128.0, 0.5, 0.05, 5.0, 1.0, 0.1),
                 # near Hopper TensorRT-LLM's optimum, whose widen the starts above miss (they end at 0)
                 (5.3, 1.13, 0.95, 0.99, 500.0, 50.0, 0.6, 0.28, 4.0, 3.2, 0.048))
PREFILL_START = (0.5, 0.4, 0.5, 3.0, 3.0, 0.5)


def _table(gpu: str, engine: str, table: str, columns: tuple):
    paths = sorted(KERNELS_DIR.glob(f"{gpu}/attention/{engine}/*/{table}.parquet"))
    return _read(paths[0], columns, None) if paths else (tuple([] for _ in columns), [])


def prefill_rows(gpu: str, engine: str) -> list:
    """(batch x heads, tokens, head_dim, kv_groups, kv dtype, seconds) of a table's rows its
    prefill kernel ran."""
    values, latency_ms = _table(gpu, engine, "context_attention_perf", CONTEXT_COLUMNS)
    return [(b * h, isl, d, max(1, h // kvh), kv, ms * 1e-3)
            for (source, b, isl, h, kvh, d, window, attn, kv), ms in zip(zip(*values), latency_ms)
            if not window and attn in ATTENTION_DTYPES and kv in KV_BYTES and ran_prefill_kernel(source)]


def decode_rows(gpu: str, engine: str) -> dict:
    """Columns (numpy arrays) of a table's BF16 generation rows; context = cached tokens + 1."""
    values, latency_ms = _table(gpu, engine, "generation_attention_perf", GENERATION_COLUMNS)
    keep = [(b, h, kvh, d, step + 1, KV_BYTES[kv], ms * 1e-3)
            for (source, b, h, kvh, d, step, window, attn, kv), ms in zip(zip(*values), latency_ms)
            if not window and attn in ATTENTION_DTYPES and kv in KV_BYTES and attention_modelled(source)]
    columns = np.array(keep, dtype=float).T if keep else np.zeros((7, 0))
    return dict(zip(("batch", "heads", "kv_heads", "head_dim", "context", "kv_el", "seconds"), columns))


# the engine's facts, read from its preset, not fitted (see EngineAttention)
FACTS = ("prefill_fp8_query_cast", "decode_fp8_group_native")


def engine(factors: dict, group: int, facts: dict | None = None) -> EngineAttention:
    return EngineAttention(decode_max_group=group, **(facts or {}), **factors)


def with_engine(hw, name: str, kernels: EngineAttention):
    return replace(hw, calibration=hw.calibration.with_engine("engine_attention", name, kernels))


def prefill_s(hw, name, rows) -> np.ndarray:
    return np.array([flash_attention(hw, bh, s, s, d, g, True, kernel=name, kv_bytes_per_element=KV_BYTES[kv]).time_s
                     for bh, s, d, g, kv, _ in rows])


def decode_s(hw, kernels, rows) -> np.ndarray:
    return engine_decode_s(kernels, hw, rows["batch"], rows["heads"], rows["kv_heads"], rows["context"],
                           rows["head_dim"], rows["kv_el"])


def _factors(names, x) -> dict:
    return {n: float(np.clip(v, *BOUNDS[n])) * SCALE.get(n, 1.0) for n, v in zip(names, x)}


def group_weights(labels) -> np.ndarray:
    """Weights giving each group (cache dtype, size bucket) the same say in the loss, as the
    kernel suite judges each group's median."""
    keys = list(labels)
    counts = {k: keys.count(k) for k in set(keys)}
    return np.array([1.0 / counts[k] for k in keys]) / len(counts)


def preset_start(hw, name: str, names: tuple) -> tuple:
    """The preset's own figures for `names`, in the fit's units, as one more start (() when the
    preset has no kernels of the engine): refitting from them keeps an optimum the fixed start
    can miss (vLLM's H100 prefill from PREFILL_START lands at a share of 1.0)."""
    current = hw.calibration.engine_kernels(name)
    return (tuple(getattr(current, n) / SCALE.get(n, 1.0) for n in names),) if current is not None else ()


def facts(hw, name: str) -> dict:
    """The engine's facts as its preset states them: whether it casts its queries to FP8 in a
    kernel of its own, whether its grouped decode kernel reads an FP8 cache as it is."""
    current = hw.calibration.engine_kernels(name)
    return {fact: current is not None and getattr(current, fact) for fact in FACTS}


def fit_prefill(hw, name, rows, decode_part: dict, group: int) -> dict:
    sample = rows[::STRIDE]
    measured = np.array([r[-1] for r in sample])
    weights = group_weights((kv, flop_bucket(2.0 * bh * s * s * d)) for bh, s, d, _, kv, _ in sample)
    stated = facts(hw, name)
    # where the kernels run softmax and matmuls in turn (no warpgroup MMA) the exposed share is moot
    names = PREFILL if overlaps_softmax(hw.gpu) else PREFILL[:-1]

    def loss(x):
        model = with_engine(hw, name, engine({**_factors(names, x), **decode_part}, group, stated))
        return float(np.sum(weights * np.abs(np.log(prefill_s(model, name, sample) / measured))))
    starts = (PREFILL_START[:len(names)], *preset_start(hw, name, names))
    best = min((minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": 3000})
                for start in starts), key=lambda r: r.fun)
    return _factors(names, best.x)


def fit_decode(hw, name, rows, prefill_part: dict, group: int) -> dict:
    sample = {k: v[::2] for k, v in rows.items()}
    cache = 2.0 * sample["batch"] * sample["kv_heads"] * sample["context"] * sample["head_dim"] * sample["kv_el"]
    weights = group_weights(zip(sample["kv_el"], (kv_bucket(b) for b in cache)))
    stated = facts(hw, name)

    def loss(x):
        kernels = engine({**prefill_part, **_factors(DECODE, x)}, group, stated)
        return float(np.sum(weights * np.abs(np.log(decode_s(hw, kernels, sample) / sample["seconds"]))))
    best = min((minimize(loss, start, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-3, "fatol": 1e-6})
                for start in (*DECODE_STARTS, *preset_start(hw, name, DECODE))), key=lambda r: r.fun)
    best = minimize(loss, best.x, method="Powell")
    return _factors(DECODE, best.x)


def buckets(predicted, measured, labels, kv_labels) -> str:
    """Median signed error / median |error| per (kv dtype, bucket), in the suite's bucket order."""
    error = np.asarray(predicted) / np.asarray(measured) - 1
    out = []
    for kv in sorted(set(kv_labels), reverse=True):
        for bucket in ("<1 GFLOP", "1-100 GFLOP", ">=100 GFLOP", "<16 MiB KV", "16 MiB-1 GiB KV", ">=1 GiB KV"):
            mask = np.array([lab == bucket and k == kv for lab, k in zip(labels, kv_labels)])
            if mask.any():
                out.append(f"{'' if kv == 2 else 'fp8 '}{bucket} {100 * np.median(error[mask]):+.0f} / "
                           f"{100 * np.median(np.abs(error[mask])):.1f}")
    return ", ".join(out)


def prefill_report(hw, name, rows) -> str:
    labels = [flop_bucket(2.0 * bh * s * s * d) for bh, s, d, _, _, _ in rows]
    return buckets(prefill_s(hw, name, rows), [r[-1] for r in rows], labels, [KV_BYTES[r[4]] for r in rows])


def decode_report(hw, kernels, rows) -> str:
    kv = 2.0 * rows["batch"] * rows["kv_heads"] * rows["context"] * rows["head_dim"] * rows["kv_el"]
    return buckets(decode_s(hw, kernels, rows), rows["seconds"], [kv_bucket(b) for b in kv], list(rows["kv_el"]))


def preset_block(name: str, kernels: EngineAttention) -> str:
    k = kernels
    return (f"    {name}: {{prefill_tensor_share: {k.prefill_tensor_share:.3f}, "
            f"prefill_fp8_tensor_share: {k.prefill_fp8_tensor_share:.3f},\n"
            f"      prefill_cache_share: {k.prefill_cache_share:.3f}, prefill_tile: {k.prefill_tile_s * 1e6:.2f} us, "
            f"prefill_floor: {k.prefill_floor_s * 1e6:.2f} us,"
            + (f" prefill_softmax_exposed: {k.prefill_softmax_exposed:.3f}," if k.prefill_softmax_exposed else "")
            + "\n"
            f"      decode_floor: {k.decode_floor_s * 1e6:.2f} us, decode_pair: {k.decode_pair_s * 1e6:.3f} us, "
            f"decode_bandwidth_share: {k.decode_bandwidth_share:.3f}, "
            f"decode_fp8_bandwidth_share: {k.decode_fp8_bandwidth_share:.3f},\n"
            f"      decode_split_tokens: {round(k.decode_split_tokens)}, decode_max_splits: {round(k.decode_max_splits)}, "
            f"decode_saturation: {k.decode_saturation:.3f}, decode_score: {k.decode_score_s * 1e9:.3f} ns, "
            f"decode_max_group: {k.decode_max_group},\n"
            f"      decode_group_pair: {k.decode_group_pair_s * 1e6:.3f} us, "
            f"decode_fp8_group_floor: {k.decode_fp8_group_floor_s * 1e6:.2f} us, "
            f"decode_fp8_widen: {k.decode_fp8_widen_s * 1e9:.4f} ns"
            + "".join(f", {fact}: true" for fact in FACTS if getattr(k, fact)) + "}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", nargs="*", default=list(PRESET_BY_GPU))
    parser.add_argument("--engines", nargs="*", default=list(MAX_GROUP))
    args = parser.parse_args()
    hardware = {gpu: kernels_alone(with_dtype(load_hardware(PRESET_BY_GPU[gpu]), "bf16", PRESET_BY_GPU[gpu], "dtype"))
                for gpu in args.gpus}
    fitted = {}
    for name in args.engines:
        group = MAX_GROUP[name]
        for gpu, hw in hardware.items():
            pre, dec = prefill_rows(gpu, name), decode_rows(gpu, name)
            if not pre or not dec["seconds"].size:
                continue
            decode_part = fit_decode(hw, name, dec, dict(zip(PREFILL, (0.5, 0.5, 0.5, 0.0, 0.0, 0.0))), group)
            prefill_part = fit_prefill(hw, name, pre, decode_part, group)
            fitted[(name, gpu)] = engine({**prefill_part, **decode_part}, group, facts(hw, name))
            print(f"== {gpu} {name}\n{preset_block(name, fitted[(name, gpu)])}")
        for gpu, hw in hardware.items():
            pre, dec = prefill_rows(gpu, name), decode_rows(gpu, name)
            for source in [g for g in hardware if (name, g) in fitted and FAMILY_BY_GPU[g] == FAMILY_BY_GPU[gpu]]:
                kernels = fitted[(name, source)]
                tag = "fit " if source == gpu else "held"
                model = with_engine(hw, name, kernels)
                print(f"  {gpu:9s} {name:6s} by {source:9s} ({tag}) prefill: {prefill_report(model, name, pre)}")
                print(f"  {gpu:9s} {name:6s} by {source:9s} ({tag}) decode:  {decode_report(model, kernels, dec)}")


if __name__ == "__main__":
    main()
