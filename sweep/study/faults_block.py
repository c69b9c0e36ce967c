"""The `faults:` block of a study file: which links fail, how many, how badly, and which GPUs
straggle, validated against the study's network and GPU count."""
import math
from dataclasses import dataclass

import numpy as np

from core import SpecError
from .fields import refuse_unknown

FACTOR_FLOOR = 1e-3  # sampled factors are clipped to [FACTOR_FLOOR, 1]; 0 comes only from `hard`
FAULT_KEYS = ("samples", "seed", "links", "count", "factor", "hard", "stragglers")
STRAGGLER_KEYS = ("count", "factor")


@dataclass(frozen=True)
class Distribution:
    """normal (mean, std), uniform (low, high) or choice (values...), clipped to [FACTOR_FLOOR, 1]."""
    kind: str
    params: tuple

    def draw(self, rng: np.random.Generator, size: int) -> list:
        if not size:
            return []
        if self.kind == "normal":
            values = rng.normal(self.params[0], self.params[1], size)
        elif self.kind == "uniform":
            values = rng.uniform(self.params[0], self.params[1], size)
        else:
            values = np.asarray(self.params)[rng.integers(0, len(self.params), size)]
        return [min(1.0, max(FACTOR_FLOOR, v)) for v in values.tolist()]


@dataclass(frozen=True)
class Count:
    """A fixed number, or Poisson-distributed with this mean."""
    fixed: int | None = None
    poisson_mean: float | None = None

    def draw(self, rng: np.random.Generator) -> int:
        return self.fixed if self.fixed is not None else int(rng.poisson(self.poisson_mean))


@dataclass(frozen=True)
class FaultSpec:
    samples: int
    seed: int
    links: object  # "all" | "used" | tuple of dimension names | tuple of (a, b) pairs
    count: Count
    factor: Distribution
    hard: float
    straggler_count: Count
    straggler_factor: Distribution


def parse_faults(data, source: str, backend: str, mode: str, dim_names: tuple, links: set, gpus: int) -> FaultSpec:
    """The study's `faults:` block, validated against the network's dimension names, its
    links ((a, b) node pairs, a < b) and GPU count; raises SpecError naming the faults.* field."""
    if not isinstance(data, dict):
        raise SpecError(source, "faults", data, f"expected a mapping with {', '.join(FAULT_KEYS)}")
    refuse_unknown(data, FAULT_KEYS, source, "faults.")
    if backend not in ("astra-hierarchical", "astra-flattened"):
        raise SpecError(source, "backend", backend, "a faults study needs astra-hierarchical or astra-flattened "
                        "(the analytical backend has no links to fault)")
    if mode != "train":
        raise SpecError(source, "workload.mode", mode, "a faults study replays training steps (mode: train)")
    samples = _integer(data.get("samples"), source, "faults.samples", 1, "<missing>" if "samples" not in data else None)
    seed = _integer(data.get("seed", 0), source, "faults.seed", 0)
    hard = data.get("hard", 0.0)
    if isinstance(hard, bool) or not isinstance(hard, (int, float)) or not 0 <= hard <= 1:
        raise SpecError(source, "faults.hard", hard, "expected a probability in [0, 1]")
    stragglers = data.get("stragglers", {"count": 0})
    if not isinstance(stragglers, dict):
        raise SpecError(source, "faults.stragglers", stragglers, "expected {count: N, factor: distribution}")
    refuse_unknown(stragglers, STRAGGLER_KEYS, source, "faults.stragglers.")
    return FaultSpec(samples, seed, _links(data.get("links", "all"), source, dim_names, links),
                     _count(data.get("count", 1), source, "faults.count", len(links), "links in the network"),
                     _distribution(data.get("factor", {"normal": {"mean": 0.5, "std": 0.1}}), source, "faults.factor"),
                     float(hard), _count(stragglers.get("count", 0), source, "faults.stragglers.count", gpus, "GPUs"),
                     _distribution(stragglers.get("factor", {"uniform": [0.7, 0.95]}), source,
                                   "faults.stragglers.factor"))


def _integer(value, source, field, low, shown=None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(source, field, shown or value, f"expected an integer >= {low}")
    return value


def _links(value, source, dim_names, links):
    allowed = "all, used, a list of dimension names, or a list of [a, b] node pairs"
    if value in ("all", "used"):
        return value
    if not isinstance(value, list) or not value:
        raise SpecError(source, "faults.links", value, f"expected {allowed}")
    if all(isinstance(v, str) for v in value):
        for name in value:
            if name not in dim_names:
                raise SpecError(source, "faults.links", name, f"no such network dimension (have: {', '.join(dim_names)})")
        return tuple(value)
    pairs = []
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2 or any(isinstance(n, bool) or not isinstance(n, int) for n in pair):
            raise SpecError(source, "faults.links", pair, f"expected {allowed}")
        if (min(pair), max(pair)) not in links:
            raise SpecError(source, "faults.links", pair, "no link joins these nodes (NPUs, then switches)")
        pairs.append((min(pair), max(pair)))
    return tuple(pairs)


def _count(value, source, field, most: int, of: str) -> Count:
    """A fixed count (at most `most`, the number of `of` there are to choose) or a Poisson mean."""
    if isinstance(value, dict) and list(value) == ["poisson"]:
        mean = value["poisson"]
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not 0 <= mean <= 1e3:
            raise SpecError(source, f"{field}.poisson", mean, "expected a mean in [0, 1000]")
        return Count(poisson_mean=float(mean))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(source, field, value, "expected an integer >= 0 or {poisson: mean}")
    if value > most:
        raise SpecError(source, field, value, f"expected at most {most} (the {of}) or {{poisson: mean}}")
    return Count(fixed=value)


def _distribution(value, source, field) -> Distribution:
    allowed = "{normal: {mean: m, std: s}}, {uniform: [low, high]} or a list of factors in (0, 1]"
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    if isinstance(value, list) and value and all(number(v) and 0 < v <= 1 for v in value):
        return Distribution("choice", tuple(float(v) for v in value))
    if isinstance(value, dict) and list(value) == ["normal"] and isinstance(value["normal"], dict):
        params = value["normal"]
        if set(params) != {"mean", "std"} or not all(number(v) for v in params.values()) or params["std"] < 0:
            raise SpecError(source, f"{field}.normal", params, "expected {mean: m, std: s} with s >= 0")
        return Distribution("normal", (float(params["mean"]), float(params["std"])))
    if isinstance(value, dict) and list(value) == ["uniform"]:
        bounds = value["uniform"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(number(b) for b in bounds)
                and 0 <= bounds[0] <= bounds[1] <= 1):
            raise SpecError(source, f"{field}.uniform", bounds, "expected [low, high] with 0 <= low <= high <= 1")
        return Distribution("uniform", (float(bounds[0]), float(bounds[1])))
    raise SpecError(source, field, value, f"expected {allowed}")
