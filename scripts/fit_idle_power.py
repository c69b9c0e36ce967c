"""Fit each GPU family's idle power (gpu.idle_power: the board's draw at P0 between kernels) on
ML.ENERGY v2's visible rows, with the power model spread over each run's measured pace (the
energy_at_pace suite), and print the in-sample and leave-one-model-out errors.

Energy is linear in the idle power, so the fit is a closed-form least squares on relative
error: predicted = rest + idle * seconds, minimising sum((predicted / measured - 1)^2)."""
import statistics
from collections import defaultdict

from core.validation.energy import HARDWARE, measured_j_per_token, predict, rows


def _fit(samples: list) -> float:
    """Idle watts minimising the squared relative error over (measured, rest, seconds, idle used)."""
    num = sum((m - (total - idle * sec)) * sec / m ** 2 for m, total, sec, idle in samples)
    den = sum(sec * sec / m ** 2 for m, total, sec, idle in samples)
    return num / den


def _error(sample, idle: float) -> float:
    measured, total, seconds, used = sample
    return 100 * ((total - used * seconds + idle * seconds) / measured - 1)


def main() -> None:
    by_gpu = defaultdict(list)
    for row in rows():
        record = predict(row)
        if record["batch"] == 0:
            continue
        total, seconds = record["at_measured_pace_j"]
        from core.model.loader import load_hardware
        preset, overrides = HARDWARE[row["gpu"]]
        used = load_hardware(preset, overrides).gpu.power.idle_w
        by_gpu[row["gpu"]].append((row["model"], (measured_j_per_token(row), total, seconds, used)))
    for gpu, samples in by_gpu.items():
        idle = _fit([s for _, s in samples])
        inside = [abs(_error(s, idle)) for _, s in samples]
        models = sorted({m for m, _ in samples})
        left_out, fits = [], []
        for model in models:
            fit = _fit([s for m, s in samples if m != model])
            fits.append(fit)
            left_out += [abs(_error(s, fit)) for m, s in samples if m == model]
        now = [abs(_error(s, s[3])) for _, s in samples]
        print(f"{gpu}: {len(samples)} rows, {len(models)} models; preset idle {samples[0][1][3]:.0f} W "
              f"(mean |err| {statistics.mean(now):.1f} %)")
        print(f"  fitted idle {idle:.1f} W: in-sample mean |err| {statistics.mean(inside):.1f} % "
              f"(max {max(inside):.1f} %); leave-one-model-out mean |err| {statistics.mean(left_out):.1f} % "
              f"(max {max(left_out):.1f} %), fits {min(fits):.1f}-{max(fits):.1f} W")


if __name__ == "__main__":
    main()
