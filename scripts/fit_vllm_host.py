"""Fit vLLM 0.5's host time per decode iteration (core/serving/engines.LEGACY_ENGINES: a fixed
part, a part per running sequence, a part per tensor-parallel rank beyond the first) per GPU
family on ML.ENERGY v2's visible rows, and print the split of the energy suite's error (time
against power) before and after, in-sample and leave-one-model-out.

Each row's batch time is the model's GPU time plus decode steps x host time, linear in the
three parameters, so the fit is a least squares on relative error of the time per output token
against the run's measured throughput. Run it after kernel times move and copy the printed
figures into LEGACY_ENGINES."""
import statistics
from collections import defaultdict
from dataclasses import replace

import numpy as np

from core.model.inference import decode_steps
from core.validation.energy import FAMILY, _number, engine_for, measured_j_per_token, predict, rows

PARAMETERS = ("iteration_overhead_s", "sequence_overhead_s", "rank_overhead_s")


def _sample(row: dict) -> dict:
    """What the fit needs of one row, its host time left out."""
    bare = replace(engine_for(row), **{name: 0.0 for name in PARAMETERS})
    record = predict(row, bare)
    decode = round(_number(row["output_len"], "mean"))
    tp = int(row["tp"])
    measured_s = record["batch"] * decode / _number(row["other_metrics"], "token_tput_tok_s")
    steps = decode_steps(decode)
    return {"row": row, "model": row["model"], "gpu_s": record["step_time_s"], "measured_s": measured_s,
            "terms": (steps, steps * record["batch"], steps * (tp - 1)), "gpu_w": record["power_avg_w"],
            "measured_w": _number(row["other_metrics"], "derived_avg_power_W_per_gpu")}


def _fit(samples: list) -> tuple:
    """Host parameters minimising sum((predicted / measured time - 1)^2), none below zero."""
    a = np.array([[term / s["measured_s"] for term in s["terms"]] for s in samples])
    b = np.array([1.0 - s["gpu_s"] / s["measured_s"] for s in samples])
    free = list(range(len(PARAMETERS)))
    while True:
        solved = np.zeros(len(PARAMETERS))
        solved[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if (solved >= 0).all():
            return tuple(solved)
        free.remove(int(np.argmin(solved)))


def _errors(sample: dict, fitted: tuple) -> tuple:
    """(time %, power %, J/token %) errors of one row with host parameters `fitted`."""
    engine = replace(engine_for(sample["row"]), **dict(zip(PARAMETERS, fitted)))
    record = predict(sample["row"], engine)
    served_s, per_token_j = record["served_s"], record["served_j"][0]
    power_w = per_token_j / record["served_j"][1]
    return (100 * (served_s / sample["measured_s"] - 1), 100 * (power_w / sample["measured_w"] - 1),
            100 * (per_token_j / measured_j_per_token(sample["row"]) - 1))


def _line(label: str, errors: list) -> str:
    time_e, power_e, joule_e = ([abs(e[i]) for e in errors] for i in range(3))
    signed = [statistics.mean(e[i] for e in errors) for i in range(3)]
    return (f"  {label:<34} time {statistics.mean(time_e):5.1f} % (signed {signed[0]:+6.1f}, max {max(time_e):5.1f})"
            f"  power {statistics.mean(power_e):5.1f} % (signed {signed[1]:+6.1f})"
            f"  J/token {statistics.mean(joule_e):5.1f} % (signed {signed[2]:+6.1f}, max {max(joule_e):5.1f})")


def main() -> None:
    by_family = defaultdict(list)
    for row in rows():
        by_family[FAMILY[row["gpu"]]].append(_sample(row))
    everything = {"none": [], "in-sample": [], "leave-one-model-out": []}
    for family, samples in sorted(by_family.items()):
        fitted = _fit(samples)
        print(f"{family}: {len(samples)} rows; " + ", ".join(f"{n} {v:.6f}" for n, v in zip(PARAMETERS, fitted)))
        runs = {"none": [_errors(s, (0.0, 0.0, 0.0)) for s in samples],
                "in-sample": [_errors(s, fitted) for s in samples], "leave-one-model-out": []}
        fits = []
        for model in sorted({s["model"] for s in samples}):
            held = _fit([s for s in samples if s["model"] != model])
            fits.append(held)
            runs["leave-one-model-out"] += [_errors(s, held) for s in samples if s["model"] == model]
        for label, errors in runs.items():
            print(_line(label, errors))
            everything[label] += errors
        spans = ", ".join(f"{n} {min(f[i] for f in fits):.6f}-{max(f[i] for f in fits):.6f}"
                          for i, n in enumerate(PARAMETERS))
        print(f"  leave-one-model-out fits: {spans}")
    print("both families:")
    for label, errors in everything.items():
        print(_line(label, errors))
    for family, samples in sorted(by_family.items()):
        other = _fit([s for f, group in by_family.items() if f != family for s in group])
        print(_line(f"{family} with the other family's fit", [_errors(s, other) for s in samples]))


if __name__ == "__main__":
    main()
