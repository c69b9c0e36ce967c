"""What the power-limit model does to the visible training suites when the whole-step factors
are dropped: every GPU preset loaded with calibration.sustained_clock, step_efficiency and
fp8_step_efficiency 1 and gpu.power_clock absolute, so each step's kernels run at the kernel
tables' rates at the clock the power model leaves them under the TDP, beside the presets as
they are. Prints each suite's mean and max |error| both ways and
the mean clock share the power model gave the suite's rows.

It swaps the loader's cached hardware reader for one that rewrites what it returns, for this
process only: the suites load their presets themselves."""
import dataclasses
import statistics
import sys

from core.model import loader
from core.validation.suites import SUITES, run_all, summary

TRAINING_SUITES = ("training", "a100_training", "h100_dense", "moe")


def _absolute(reader):
    def load(*args, **kwargs):
        hw = reader(*args, **kwargs)
        if hw.gpu.power is None:
            return hw
        gpu = dataclasses.replace(hw.gpu, power=dataclasses.replace(hw.gpu.power, clock="absolute"))
        return dataclasses.replace(hw, gpu=gpu, calibration=dataclasses.replace(
            hw.calibration, sustained_clock=1.0, step_efficiency=1.0, fp8_step_efficiency=1.0))
    return load


def _clock_shares(suite: str) -> list:
    """The power model's clock share of each row, recorded through evaluate's energy fields."""
    from core import evaluation

    shares, original = [], evaluation.energy_fields

    def recording(*args, **kwargs):
        fields = original(*args, **kwargs)
        shares.append(fields["gpu_clock_share"])
        return fields

    evaluation.energy_fields = recording
    try:
        SUITES[suite]()
    finally:
        evaluation.energy_fields = original
    return shares


def main(suites=TRAINING_SUITES) -> None:
    before = summary(run_all(suites)[0])
    loader._load_hardware_cached = _absolute(loader._load_hardware_cached)
    after = summary(run_all(suites)[0])
    print(f"{'suite':<15}{'cases':>6}  {'as fitted: mean / max |err|':>28}  {'power-model clock: mean / max |err|':>36}"
          f"  {'clock share':>12}")
    for suite in suites:
        b, a = before[suite], after[suite]
        shares = _clock_shares(suite)
        print(f"{suite:<15}{b['cases']:>6}  {b['mean_abs_error_pct']:>14.1f} % / {b['max_abs_error_pct']:5.1f} %"
              f"  {a['mean_abs_error_pct']:>22.1f} % / {a['max_abs_error_pct']:5.1f} %"
              f"  {statistics.mean(shares) if shares else float('nan'):>12.3f}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or TRAINING_SUITES)
