"""Fit each GPU preset's inference engines' own all-reduce (calibration.engine_allreduce:
TensorRT-LLM's and vLLM's one-shot/two-shot kernels) on the measured tables of
../shared/validation/kernels (comm/<engine>/<version>/custom_allreduce_perf), and print the
preset block with the errors `rapid validate --suite kernels` reports, in-sample and held out.
It edits nothing.

Each engine's three figures (floor, per_peer, bandwidth; core.model.specs.EngineAllReduce)
minimise the mean |log(predicted / measured)| over every row of its table, each row timed as
the engine runs it: the faster of its own kernel and NCCL's ring as the preset models it
(core.model.collectives.engine_all_reduce_s). vLLM's rows are those replayed from CUDA graphs
(`backend` vllm_graph), as its decode runs them, on up to 8 GPUs (its custom kernel's limit;
beyond it vLLM calls NCCL); its eager rows are left out. TensorRT-LLM's kernel takes groups
of 8 and every larger one its table measures (max_gpus, printed where beyond 8). The tables time the custom kernel
at every size, where an engine would hand large messages to NCCL by a size limit of its own
rather than by which is faster: the >= 1 MiB rows test that choice as much as the kernel. Held out: each
GPU's figures predict its siblings' tables (the same die: H100 <-> H200, B200 <-> B300 <->
GB200 <-> GB300).

    .venv/bin/python scripts/fit_engine_allreduce.py [--gpus h100_sxm ...]
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.model import ops  # noqa: E402
from core.model.collectives import engine_all_reduce_s  # noqa: E402
from core.model.layout import group_spans  # noqa: E402
from core.model.loader import load_hardware  # noqa: E402
from core.model.specs import EngineAllReduce, Parallelism  # noqa: E402
from core.validation.kernels import KERNELS_DIR, PRESET_BY_GPU, custom_allreduce_rows, error_summary, \
    message_bucket  # noqa: E402
from core.validation.systems import FAMILY_BY_GPU  # noqa: E402

US, GBPS = 1e-6, 1e9


VLLM_MAX_GPUS = 8  # vLLM's custom all-reduce runs on 2, 4, 6 or 8 GPUs


def with_engine(hw, engine: str, spec: EngineAllReduce):
    return replace(hw, calibration=hw.calibration.with_engine("engine_allreduce", engine, spec))


def predicted_s(hw, engine: str, gpus: int, bytes_: float) -> float:
    dims = hw.dims_for(gpus)
    return sum(engine_all_reduce_s(hw, dims, engine, bytes_, group_spans(Parallelism(tp=gpus), dims)["tp"]).values())


def fit(hw, engine: str, rows: list) -> EngineAllReduce:
    """The figures minimising the mean |log error| over the rows (gpus, bytes, measured seconds),
    the kernel taking groups of 8 and every larger one the rows hold."""
    max_gpus = max(8, *(g for g, _, _ in rows))

    def spec(x):
        return EngineAllReduce(np.exp(x[0]) * US, np.exp(x[1]) * US, np.exp(x[2]) * GBPS, max_gpus)

    def loss(x):
        trial = with_engine(hw, engine, spec(x))
        return float(np.mean([abs(np.log(predicted_s(trial, engine, g, b) / s)) for g, b, s in rows]))

    best = min((minimize(loss, np.log(start), method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-7})
                for start in ((3.0, 0.1, 250.0), (5.0, 0.05, 400.0))), key=lambda r: r.fun)
    return spec(best.x)


def report(label: str, hw, engine: str, rows: list) -> None:
    groups = {}
    for g, b, s in rows:
        groups.setdefault((g, message_bucket(b)), ([], []))
        groups[g, message_bucket(b)][0].append(predicted_s(hw, engine, g, b))
        groups[g, message_bucket(b)][1].append(s)
    for (g, bucket), (pred, meas) in sorted(groups.items()):
        e = error_summary(pred, meas)
        print(f"    {label:22s} {g} GPUs {bucket:8s} n {e['n']:3d}  median {e['median_error_pct']:+6.1f} %  "
              f"mean |err| {e['mean_abs_error_pct']:5.1f} %  p90 {e['p90_abs_error_pct']:5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", nargs="*", default=[g for g in PRESET_BY_GPU if (KERNELS_DIR / g).is_dir()])
    args = ap.parse_args()
    fitted, tables = {}, {}
    for gpu in args.gpus:
        hw = ops.at_kernel_rates(load_hardware(PRESET_BY_GPU[gpu]))
        for engine, rows in custom_allreduce_rows(KERNELS_DIR / gpu, hw).items():
            if engine == "vllm":
                rows = [row for row in rows if row[0] <= VLLM_MAX_GPUS]
            spec = fit(hw, engine, rows)
            trial = with_engine(hw, engine, spec)
            if all(predicted_s(trial, engine, g, b) >= predicted_s(hw, "", g, b) for g, b, _ in rows):
                print(f"{gpu} ({PRESET_BY_GPU[gpu]}) {engine}: the fitted kernel never beats NCCL's ring as"
                      " modelled: no engine_allreduce block (the figures are not pinned)")
                report("NCCL's ring alone", hw, "", rows)
                continue
            fitted[gpu, engine], tables[gpu, engine] = spec, rows
            limit = f", max_gpus: {spec.max_gpus}" if spec.max_gpus != 8 else ""
            print(f"{gpu} ({PRESET_BY_GPU[gpu]}) {engine}: {{floor: {spec.floor_s / US:.2f} us, per_peer: "
                  f"{spec.per_peer_s / US:.3f} us, bandwidth: {spec.bandwidth_bps / GBPS:.0f} GB/s{limit}}}")
            report("in-sample", with_engine(hw, engine, spec), engine, rows)
            report("NCCL's ring alone", hw, "", rows)
    for (gpu, engine), rows in tables.items():
        hw = ops.at_kernel_rates(load_hardware(PRESET_BY_GPU[gpu]))
        for (sibling, other), spec in fitted.items():
            if other == engine and sibling != gpu and FAMILY_BY_GPU[sibling] == FAMILY_BY_GPU[gpu]:
                print(f"{gpu} {engine} with {sibling}'s figures (held out):")
                report(sibling, with_engine(hw, engine, spec), engine, rows)


if __name__ == "__main__":
    main()
