"""Fit vLLM 0.5's host time per decode iteration (core/serving/engines.LEGACY_ENGINES: a fixed
part, a part per running sequence, a part per tensor-parallel rank beyond the first) per GPU
family on ML.ENERGY v2's visible rows, and print the split of the energy suite's error (time
against power) before and after, in-sample and leave-one-model-out.

Each row's batch time is the model's GPU time plus decode steps x host time, linear in the
three parameters, so the fit is a least squares on relative error of the time per output token
against the run's measured throughput. Run it after kernel times move and copy the printed
figures into LEGACY_ENGINES. The measured avg TPOT, not fitted on, checks the host time per
iteration on its own. `--rows` prints each row's measured and modelled TPOT, throughput, power
and J/token."""
import statistics
import sys
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
            "terms": (steps, steps * record["batch"], steps * (tp - 1)), "batch": record["batch"], "tp": tp,
            "gpu_tpot_s": record["tpot_s"], "measured_tpot_s": _number(row["other_metrics"], "avg_tpot_s"),
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


def _tpot_error(sample: dict, fitted: tuple) -> float:
    """% error of the modelled TPOT (GPU decode step plus host time) against the run's avg TPOT."""
    engine = replace(engine_for(sample["row"]), **dict(zip(PARAMETERS, fitted)))
    return 100 * ((sample["gpu_tpot_s"] + engine.host_s(sample["batch"], sample["tp"])) / sample["measured_tpot_s"] - 1)


def _by(label: str, samples: list, key, fitted: tuple) -> str:
    """Mean signed time and TPOT errors of the samples grouped by `key`."""
    groups = defaultdict(list)
    for s in samples:
        groups[key(s)].append((_errors(s, fitted)[0], _tpot_error(s, fitted)))
    return f"  by {label}: " + "; ".join(
        f"{name} time {statistics.mean(e[0] for e in found):+.1f} % TPOT {statistics.mean(e[1] for e in found):+.1f} % ({len(found)})"
        for name, found in sorted(groups.items()))


def _row_table(samples: list, fitted: tuple) -> None:
    print("  gpu model tp max_bs batch(ours) running(measured) | TPOT ms meas/model | tok/s meas/model | "
          "W per GPU meas/model | J/token meas/model")
    for s in samples:
        row = s["row"]
        engine = replace(engine_for(row), **dict(zip(PARAMETERS, fitted)))
        record = predict(row, engine)
        tokens = record["batch"] * round(_number(row["output_len"], "mean"))
        tpot_s = s["gpu_tpot_s"] + engine.host_s(s["batch"], s["tp"])
        print(f"  {row['gpu'][:4]} {row['model'].split('/')[-1][:24]:<24} {s['tp']} "
              f"{row['batch_or_concurrency'].split()[0]:<12} {s['batch']:>5} "
              f"{_number(row['other_metrics'], 'avg_batch_size_running'):>7.0f} | "
              f"{1e3 * s['measured_tpot_s']:6.1f} {1e3 * tpot_s:6.1f} | "
              f"{_number(row['other_metrics'], 'token_tput_tok_s'):6.0f} {tokens / record['served_s']:6.0f} | "
              f"{s['measured_w']:5.0f} {record['served_j'][0] / record['served_j'][1]:5.0f} | "
              f"{measured_j_per_token(row):.4f} {record['served_j'][0]:.4f}")


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
        print(_line("TPOT, in-sample (not fitted on)", [(_tpot_error(s, fitted), 0.0, 0.0) for s in samples])
              .split("power")[0].replace("time", "TPOT", 1))
        print(_by("tp", samples, lambda s: s["tp"], fitted))
        print(_by("batch", samples, lambda s: "<=64" if s["batch"] <= 64 else "65-256" if s["batch"] <= 256
                  else ">256 (no CUDA graph)", fitted))
        print(_by("task", samples, lambda s: s["row"]["other_metrics"].split(";")[0].split()[0], fitted))
        if "--rows" in sys.argv:
            _row_table(samples, fitted)
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
