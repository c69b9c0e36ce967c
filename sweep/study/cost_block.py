"""The study's `cost:` block: what a GPU-hour and a kilowatt-hour cost, and the dollar columns
they give each timed row."""
from dataclasses import dataclass

from core.errors import SpecError
from core.model.specs import ServeWorkload, TrainWorkload
from .fields import refuse_unknown

COST_KEYS = ("gpu_hour_usd", "kwh_usd")


@dataclass(frozen=True)
class CostSpec:
    gpu_hour_usd: float
    kwh_usd: float


def parse_cost(data, source: str) -> CostSpec:
    """Both prices, each a non-negative number of US dollars."""
    if not isinstance(data, dict):
        raise SpecError(source, "cost", data, "expected a mapping {gpu_hour_usd: 2.5, kwh_usd: 0.08}")
    refuse_unknown(data, COST_KEYS, source, "cost.")
    prices = {}
    for key in COST_KEYS:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
            raise SpecError(source, f"cost.{key}", value if key in data else "<missing>",
                            "expected a price in US dollars (a number >= 0)")
        prices[key] = float(value)
    return CostSpec(**prices)


def usd(cost: CostSpec, gpus: int, seconds: float, joules: float) -> float:
    """US$ of `gpus` GPUs' hours over `seconds` and of `joules` of energy, at the block's prices."""
    return gpus * cost.gpu_hour_usd * seconds / 3600 + joules / 3.6e6 * cost.kwh_usd


def cost_fields(record: dict, cost: CostSpec | None, work, gpus: int, par) -> dict:
    """usd_per_step, usd_per_million_tokens (training tokens, or output tokens served) and,
    for a training run with tokens_total, run_usd; None where there is no cost block, no
    timing or no energy figure. A serving point has no step: its million output tokens take
    the deployment's GPU-hours at its output rate and the energy it spends on them."""
    fields = {"usd_per_step": None, "usd_per_million_tokens": None, "run_usd": None}
    if isinstance(work, ServeWorkload):
        rate, joules = record.get("output_tokens_per_s"), record.get("energy_per_output_token_j")
        if cost is not None and rate and joules is not None:  # the second a token takes, and its joules
            fields["usd_per_million_tokens"] = 1e6 * usd(cost, gpus, 1.0 / rate, joules)
        return fields
    step_s, energy = record.get("step_time_s"), record.get("energy_per_step_j")
    if cost is None or energy is None or step_s is None or step_s != step_s:
        return fields
    usd_step = usd(cost, gpus, step_s, energy)
    if isinstance(work, TrainWorkload):
        tokens = work.global_batch * work.seq
        if work.tokens_total:
            fields["run_usd"] = usd_step * work.tokens_total / tokens
    else:
        tokens = par.dp * work.batch * work.decode
    fields["usd_per_step"] = usd_step
    fields["usd_per_million_tokens"] = usd_step / tokens * 1e6
    return fields
