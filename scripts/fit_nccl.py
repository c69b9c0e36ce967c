"""NCCL's NVLink figures per GPU family from NVIDIA AIConfigurator's NCCL 2.29.2 tables (issue 21).

The tables time all-gather, reduce-scatter, all-reduce and all-to-all over 2, 4 and 8 GPUs of
one node or NVLink domain, fp16 and int8, 512 B to 512 MiB. Each row is timed by the closed
form `rapid validate --suite kernels` uses (core.model.collectives over the preset's NVLink
dimension), and the figures of that dimension are fitted per GPU family, on the rows of the
family's fitted tables together:

- `efficiency`: the share of the link bandwidth a ring or all-to-all moves data at, once filled;
- `ring_fill_chunks`: the per-rank chunks' worth of time a ring pass spends beyond its n-1
  (all-reduce: 2(n-1)) transfers, NCCL's pipeline fill, which is why 2 ranks reach a lower bus
  bandwidth than 8 on the same links;
- `all_to_all_fill_chunks`: the same for all-to-all, whose n-1 send/recv pairs start together;
- `byte_reduce_fill_chunks`: the further fill of a ring summing int8 (the tables' int8
  reduce-scatters and all-reduces; NCCL's byte-wise sums are slower than its 16-bit ones, and
  NVLS sums no 1-byte elements, so those all-reduces run the ring);
- `nvls_share` (families whose NVLS rate is not fitted elsewhere): the share of the link rate
  the NVLS all-reduce reaches (efficiency x switch_reduction); Hopper's is held at its presets'
  (0.8, which the collectives suite's nccl-tests rows judge, network_efficiency fitted on them
  by scripts/calibrate.py).

Ampere (`--families ampere`) holds its preset's `efficiency`, the bus bandwidth nccl-tests
measures on a DGX A100, and fits the three fills: on its one table the efficiency and the
ring and all-to-all fills trade off along a ridge (mean |log| 0.143 with those three free, 0.146
held, before the byte fill), and the held efficiency leaves every group within 10 %.

They minimise the mean |log(predicted / measured)| over the rows of 1 MiB and more. Prints per
GPU the median signed error of each group (kind x GPU count x dtype) over those rows: with the
preset as it is, fitted, with the figures fitted on the family's other GPU (leave one GPU
out), and with those fitted without the group's collective kind (leave one kind out:
all-to-all's fill is fitted on all-to-all alone, so leaving it out leaves that fill at 0); then
the same summaries for the rows under 1 MiB, which are not fitted on (their time is the
protocols' start-up and per-step latencies, which these figures leave as they are). GPUs
listed as checked only (B300, GB300) are predicted with their family's figures, never fitted on.

    .venv/bin/python scripts/fit_nccl.py [--families hopper,blackwell] [--kernels DIR]
"""
import argparse
import sys
from dataclasses import replace
from math import log
from pathlib import Path
from statistics import median

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.model.loader import load_hardware, with_dtype  # noqa: E402
from core.validation.kernels import (KERNELS_DIR, MS, MiB, NCCL_BYTES, PRESET_BY_GPU, _nccl, _read,  # noqa: E402
                                     kernels_alone)

COLUMNS = ("op_name", "num_gpus", "message_size", "nccl_dtype")
# family: (tables fitted on, tables only checked, NVLS rate fitted here, figures held at the preset's)
FAMILIES = {"hopper": (("h100_sxm", "h200_sxm"), (), False, ()),
            "blackwell": (("b200_sxm", "gb200"), ("b300_sxm", "gb300"), True, ()),
            "ampere": (("a100_sxm",), (), False, ("efficiency",))}
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "alltoall")
BANDWIDTH = ("efficiency", "ring_fill_chunks", "all_to_all_fill_chunks", "byte_reduce_fill_chunks", "nvls_share")
BOUNDS = {"efficiency": (0.3, 1.0), "ring_fill_chunks": (0.0, 4.0), "all_to_all_fill_chunks": (0.0, 4.0),
          "byte_reduce_fill_chunks": (0.0, 4.0), "nvls_share": (0.3, 1.0)}
START = {"efficiency": 0.8, "ring_fill_chunks": 0.5, "all_to_all_fill_chunks": 0.5, "byte_reduce_fill_chunks": 0.2,
         "nvls_share": 0.7}


def rows(gpu: str, kernels: Path) -> dict:
    """{"large": rows of 1 MiB and more, "small": rows under}, each (op, gpus, elements, dtype,
    measured_s)."""
    path = next(kernels.glob(f"{gpu}/comm/nccl/*/nccl_perf.parquet"))
    values, latency_ms = _read(path, COLUMNS, None)
    out = {"large": [], "small": []}
    for *row, ms in zip(*values, latency_ms):
        if row[3] in NCCL_BYTES:
            out["large" if row[2] * NCCL_BYTES[row[3]] >= MiB else "small"].append((*row, ms * MS))
    return out


def preset_hw(gpu: str):
    preset = PRESET_BY_GPU[gpu]
    return kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))


def with_figures(hw, figures: dict):
    """`hw` whose NVLink dimension carries `figures` (NVLS rate held where nvls_share is absent)."""
    dim = hw.network[0]
    nvls_share = figures.get("nvls_share") or dim.efficiency * dim.switch_reduction
    efficiency = figures["efficiency"]
    dim = replace(dim, efficiency=efficiency, switch_reduction=min(1.0, nvls_share / efficiency),
                  ring_fill_chunks=figures["ring_fill_chunks"],
                  all_to_all_fill_chunks=figures["all_to_all_fill_chunks"],
                  byte_reduce_fill_chunks=figures["byte_reduce_fill_chunks"])
    return replace(hw, network=(dim, *hw.network[1:]))


def errors(hw, data: list) -> list:
    """(group, predicted / measured - 1) per row."""
    out = []
    for op, gpus, elements, dtype, measured_s in data:
        kernel, dtype_name, _, predicted_s = _nccl(hw, op, gpus, elements, dtype)
        out.append(((kernel.removeprefix("nccl."), dtype_name), predicted_s / measured_s - 1.0))
    return out


def loss(hws: dict, data: dict, figures: dict) -> float:
    """Mean |log(predicted / measured)| over every GPU's rows."""
    return float(np.mean([abs(log(1.0 + e)) for gpu in data
                          for _, e in errors(with_figures(hws[gpu], figures), data[gpu])]))


def fit(hws: dict, data: dict, free: tuple, start: dict) -> dict:
    """The figures minimising the loss on `data` (rows per GPU), those not in `free` held at `start`."""
    def objective(x):
        return loss(hws, data, {**start, **dict(zip(free, x))})

    result = minimize(objective, [start[k] for k in free], method="Nelder-Mead", bounds=[BOUNDS[k] for k in free],
                      options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 800})
    return {**start, **{k: float(v) for k, v in zip(free, result.x)}}


def fit_family(hws: dict, data: dict, fitted_on: tuple, nvls: bool, leave_kind: str | None = None,
               held: tuple = ()) -> dict:
    """The family's figures on the large rows of `fitted_on`, less one collective kind if named,
    those `held` kept at the first GPU's preset."""
    preset = hws[fitted_on[0]].network[0]
    free = tuple(f for f in BANDWIDTH if (nvls or f != "nvls_share") and f not in held)
    start = {**START, "nvls_share": START["nvls_share"] if nvls else 0.0,
             **{f: getattr(preset, f) for f in held}}
    if leave_kind == "alltoall":
        free = tuple(f for f in free if f != "all_to_all_fill_chunks")
        start["all_to_all_fill_chunks"] = 0.0
    large = {gpu: [r for r in data[gpu]["large"] if r[0] != leave_kind] for gpu in fitted_on}
    return fit(hws, large, free, start)


def group_medians(errs: list) -> dict:
    groups = {}
    for group, e in errs:
        groups.setdefault(group, []).append(e)
    return {group: median(es) for group, es in groups.items()}


def summary(medians: dict) -> str:
    absolute = sorted(abs(m) for m in medians.values())
    met = sum(a <= 0.10 for a in absolute)
    return (f"{met:2d}/{len(absolute)} groups within 10 %, median of |group medians| "
            f"{100 * median(absolute):4.1f} %, worst {100 * absolute[-1]:4.1f} %")


def table(columns: dict) -> None:
    """Median signed error per group (rows) under each named model (columns)."""
    names = list(columns)
    print("  group                   " + "".join(f"{n:>18s}" for n in names))
    for group in sorted(next(iter(columns.values()))):
        kernel, dtype = group
        print(f"  {kernel + ' ' + dtype:24s}"
              + "".join(f"{100 * columns[n].get(group, float('nan')):+17.1f}%" for n in names))


def describe(figures: dict, nvls: bool) -> str:
    shown = [k for k in BANDWIDTH if nvls or k != "nvls_share"]
    return ", ".join(f"{k} {figures[k]:.3f}" for k in shown)


def report_gpu(gpu: str, hw, data: dict, columns_figures: dict) -> None:
    """The group tables of one GPU (large rows, then the small rows' summary) under each model."""
    for size in ("large", "small"):
        columns = {"preset": group_medians(errors(hw, data[size]))}
        for name, figures in columns_figures.items():
            if name == "kind left out":
                columns[name] = {}
                for kind, kind_figures in figures.items():
                    out = [r for r in data[size] if r[0] == kind]
                    columns[name].update(group_medians(errors(with_figures(hw, kind_figures), out)))
            else:
                columns[name] = group_medians(errors(with_figures(hw, figures), data[size]))
        if size == "large":
            table(columns)
        print(f"  {'>= 1 MiB' if size == 'large' else '<  1 MiB'}")
        for name, medians in columns.items():
            print(f"    {name:18s} {summary(medians)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="hopper,blackwell")
    parser.add_argument("--kernels", type=Path, default=KERNELS_DIR)
    args = parser.parse_args()
    for family in args.families.split(","):
        fitted_on, checked_on, nvls, held = FAMILIES[family]
        data = {gpu: rows(gpu, args.kernels) for gpu in fitted_on + checked_on}
        hws = {gpu: preset_hw(gpu) for gpu in data}
        figures = fit_family(hws, data, fitted_on, nvls, held=held)
        others = {gpu: fit_family(hws, data, tuple(g for g in fitted_on if g != gpu), nvls, held=held)
                  for gpu in fitted_on if len(fitted_on) > 1}
        by_kind = {kind: fit_family(hws, data, fitted_on, nvls, kind, held) for kind in KINDS}
        print(f"== {family}: fitted on {', '.join(fitted_on)} "
              f"({sum(len(data[g]['large']) for g in fitted_on)} rows >= 1 MiB, "
              f"{sum(len(data[g]['small']) for g in fitted_on)} under)")
        print(f"  fitted: {describe(figures, nvls)}")
        for gpu, other in others.items():
            print(f"  without {gpu}: {describe(other, nvls)}")
        for kind, kind_figures in by_kind.items():
            print(f"  without {kind}: {describe(kind_figures, nvls)}")
        for gpu in data:
            hw = hws[gpu]
            dim = with_figures(hw, figures).network[0]
            print(f"-- {gpu} ({PRESET_BY_GPU[gpu]}): switch_reduction {dim.switch_reduction:.3f}; preset: "
                  f"efficiency {hw.network[0].efficiency:.3f}, switch_reduction {hw.network[0].switch_reduction:.3f}"
                  + ("" if gpu in fitted_on else "; not fitted on"))
            models = {"in-sample" if gpu in fitted_on else "held out": figures}
            if gpu in others:
                models["this GPU left out"] = others[gpu]
            if gpu in fitted_on:
                models["kind left out"] = by_kind
            report_gpu(gpu, hw, data[gpu], models)


if __name__ == "__main__":
    main()
