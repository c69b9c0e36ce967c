"""The search space: named knobs, each a tuple of values or a numeric range, resolved into a
Parallelism plus model and hardware overrides. The grid walks every combination of the
lists; a sampler (`sweep.search.loop`) picks one value per knob, from a list or within a range,
and calls `resolve` the same way."""
import functools
import itertools
import math
from dataclasses import dataclass

from core import Parallelism, SpecError
from core.model.layout import served_etp
from core.model.specs import (COMPUTE_DTYPES, GRAD_DTYPES, MASTER_WEIGHTS, OPTIMIZER_DTYPES, RECIPE_CHOICES, RECOMPUTE,
                              SCHEDULES, SERVE_KNOBS, ZERO_STAGES, gathers_parameters)
from core.units import BASE_UNITS, QUANTITY_KINDS, quantity

AUTO = "auto"
# knob -> (default, description of allowed values); dp and sp may be derived ("auto")
PARALLEL_KNOBS = {
    "dp": (AUTO, "a list of positive integers, or auto = gpus / (tp*pp*cp)"),
    "tp": (1, "a list of positive integers"),
    "pp": (1, "a list of positive integers"),
    "cp": (1, "a list of positive integers"),
    "ep": (1, "a list of positive integers"),
    "sp": (AUTO, "a list of true/false, or auto = on when tp > 1 in training"),
    "zero": (1, "a list of ZeRO stages 0, 1, 2, 3 (1: the distributed optimizer)"),
    "micro_batch": (1, "a list of positive integers"),
    "recompute": ("none", f"a list of {', '.join(RECOMPUTE)}"),
    "schedule": ("1f1b", f"a list of {', '.join(SCHEDULES)}"),
    "virtual_stages": (1, "a list of positive integers"),
    "placement": ("tp,cp,dp,pp", "a list of axis orders, innermost first, such as tp,cp,dp,pp"),
    "etp": (0, "a list of integers >= 0 (0 = tp)"),
    "first_stage_layers": (0, "a list of integers >= 0 (0 = Megatron's split)"),
    "last_stage_layers": (0, "a list of integers >= 0 (0 = Megatron's split)"),
    "overlap_grad_reduce": (True, "a list of true/false"),
    "overlap_param_gather": (AUTO, "a list of true/false, or auto = on when zero is 1 or more"),
    "overlap_tp_comm": (False, "a list of true/false"),
    "overlap_p2p_comm": (False, "a list of true/false"),
    "grad_dtype": ("fp32", f"a list of {', '.join(GRAD_DTYPES)}"),
    "master_weights": ("fp32", f"a list of {', '.join(MASTER_WEIGHTS)}"),
    "optimizer_dtype": ("fp32", f"a list of {', '.join(OPTIMIZER_DTYPES)}"),
    "fp8_params": (False, "a list of true/false"),
    "grad_accumulation_fusion": (True, "a list of true/false"),
    "fused_cross_entropy": (False, "a list of true/false"),
    "reshard_after_forward": (True, "a list of true/false (false: ZeRO-3 keeps parameters gathered all step)"),
    "expandable_segments": (True, "a list of true/false (false: PyTorch's fixed-size allocator segments)"),
}
BOOL_KNOBS = ("sp", "overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "overlap_p2p_comm",
              "fp8_params", "grad_accumulation_fusion", "fused_cross_entropy", "reshard_after_forward",
              "expandable_segments")
COUNT_KNOBS = ("etp", "first_stage_layers", "last_stage_layers")  # 0 means "derived"
CHOICE_KNOBS = {"grad_dtype": GRAD_DTYPES, "master_weights": MASTER_WEIGHTS, "optimizer_dtype": OPTIMIZER_DTYPES}
SPEC_KNOB_PREFIXES = ("model.", "hardware.")
# Short knobs that stand for a spec path: `dtype: [bf16, fp8]` is `hardware.dtype`.
SPEC_KNOB_ALIASES = {"dtype": "hardware.dtype", "fp8_recipe": "hardware.fp8_recipe"}
CHOICE_SPEC_KNOBS = {"dtype": COMPUTE_DTYPES, "fp8_recipe": RECIPE_CHOICES}
PLACEMENT_AXES = ("tp", "cp", "dp", "pp")
VARIANT_KNOB = "variant"
# parallelism knobs that may be integer ranges, with their smallest legal value
RANGE_PARALLEL_KNOBS = {"dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 0, "micro_batch": 1, "virtual_stages": 1}
RANGE_KEYS = ("low", "high", "log", "step")
# quantities a range may be written in; each parses to its base unit (bytes, bytes/s, s, FLOP/s, Hz)


@dataclass(frozen=True)
class Range:
    """A numeric range a sampler draws from: integers, or floats in the base unit of the
    quantity its bounds were written in (`1 TB/s` -> bytes/s)."""
    low: float
    high: float
    integer: bool
    log: bool = False
    step: float | None = None
    unit: str = ""  # the base unit a drawn value is written with as a spec override ("B/s"); "" for plain numbers

    @property
    def ends(self) -> tuple:
        return (self.low, self.high)

    def size(self) -> float:
        """Distinct values: finite for integers and stepped floats, infinite otherwise."""
        if self.integer:
            return (self.high - self.low) // (self.step or 1) + 1
        return round((self.high - self.low) / self.step) + 1 if self.step else math.inf


@dataclass(frozen=True)
class Knob:
    name: str  # `tp`, or a dotted spec path such as `hardware.gpu.hbm.bandwidth`
    values: tuple  # the listed values; empty for a range
    range: Range | None = None

    @property
    def column(self) -> str:
        """Column name in the results table (dots become underscores, so SQL needs no quoting)."""
        return self.name.replace(".", "_")

    @property
    def probe_values(self) -> tuple:
        """Values that stand for the knob when validating specs and typing its column: the
        list, or the range's two ends."""
        return self.range.ends if self.range else self.values

    def spec_value(self, value):
        """`value` as a spec override: a range drawn in a quantity's base unit says its unit
        (`2.5e12 B/s`), so the spec loader can refuse plain numbers a user wrote without one."""
        return f"{value!r} {self.range.unit}" if self.range and self.range.unit else value


@dataclass(frozen=True)
class Resolved:
    """One point of the space: its knob values and what they mean, or why it is illegal."""
    values: tuple  # resolved value per knob, in `Space.knobs` order (dp and sp filled in)
    parallelism: Parallelism | None
    model_knobs: tuple  # ((path under the model spec, value), ...)
    hardware_knobs: tuple
    reason: str  # empty when the knob values are consistent with the GPU count
    workload_knobs: tuple = ()  # ((workload field, value), ...): a serving study's swept load


@dataclass(frozen=True)
class Variant:
    """A named set of model/hardware overrides (a study's `variants:` entry), crossed with the knobs."""
    name: str
    model_overrides: tuple  # ((path under the model spec, value), ...)
    hardware_overrides: tuple


@dataclass(frozen=True)
class Space:
    knobs: tuple  # of Knob: every parallelism knob (defaults filled in), then spec knobs, as declared
    gpus: int
    mode: str
    variants: tuple = ()  # of Variant; when given, the last knob is `variant` with their names

    @property
    def names(self) -> tuple:
        return tuple(k.name for k in self.knobs)

    @property
    def columns(self) -> tuple:
        return tuple(k.column for k in self.knobs)

    def choices(self) -> dict:
        """Knob name -> listed values (empty for a range)."""
        return {k.name: k.values for k in self.knobs}

    @property
    def ranges(self) -> tuple:
        return tuple(k for k in self.knobs if k.range)

    def size(self) -> float:
        """Combinations in the space (infinite with a continuous range)."""
        return math.prod(k.range.size() if k.range else len(k.values) for k in self.knobs)

    def grid(self):
        """Every combination, as {knob name: value}, in a fixed order."""
        names = self.names
        for combo in itertools.product(*(k.values for k in self.knobs)):
            yield dict(zip(names, combo))

    def model_variants(self) -> list:
        return _variants(self.knobs, "model.")

    def hardware_variants(self) -> list:
        return _variants(self.knobs, "hardware.")

    @functools.cached_property
    def workload_axes(self) -> tuple:
        """Positions of the knobs that set a serving workload's fields (SERVE_KNOBS)."""
        return tuple(i for i, k in enumerate(self.knobs) if k.name in SERVE_KNOBS)

    @functools.cached_property
    def _by_name(self) -> dict:
        return {k.name: k for k in self.knobs}

    @functools.cached_property
    def _model_paths(self) -> list:
        return _spec_paths(self.names, "model.")

    @functools.cached_property
    def _hardware_paths(self) -> list:
        return _spec_paths(self.names, "hardware.")

    def resolve(self, choice: dict) -> Resolved:
        """Derive dp and sp, and build the Parallelism the chosen values describe."""
        par = {name: choice[name] for name in PARALLEL_KNOBS}
        inner = par["tp"] * par["pp"] * par["cp"]
        reason = ""
        if par["dp"] == AUTO:
            if self.gpus % inner:
                reason = f"gpus ({self.gpus}) not divisible by tp*pp*cp ({par['tp']}*{par['pp']}*{par['cp']} = {inner})"
            par["dp"] = max(1, self.gpus // inner)
        if par["sp"] == AUTO:
            par["sp"] = self.mode == "train" and par["tp"] > 1
        if par["overlap_param_gather"] == AUTO:
            par["overlap_param_gather"] = gathers_parameters(par["zero"])
        if self.mode == "serve":
            par["etp"] = served_etp(par["tp"], par["ep"], par["etp"])
        values = tuple(par.get(name, choice[name]) for name in self.names)
        par["placement"] = tuple(par["placement"].split(","))
        model = tuple((path, self._by_name[n].spec_value(choice[n])) for n, path in self._model_paths)
        hardware = tuple((path, self._by_name[n].spec_value(choice[n])) for n, path in self._hardware_paths)
        for variant in self.variants:
            if variant.name == choice[VARIANT_KNOB]:
                model, hardware = model + variant.model_overrides, hardware + variant.hardware_overrides
        workload = tuple((self.knobs[i].name, choice[self.knobs[i].name]) for i in self.workload_axes)
        return Resolved(values, Parallelism(**par), model, hardware, reason, workload)


def _spec_paths(names, prefix: str) -> list:
    """(knob name, path under the spec) of the knobs that set a `prefix` spec field."""
    full = ((name, SPEC_KNOB_ALIASES.get(name, name)) for name in names)
    return [(name, path.split(".", 1)[1]) for name, path in full if path.startswith(prefix)]


def _variants(knobs: tuple, prefix: str) -> list:
    paths = dict(_spec_paths([k.name for k in knobs], prefix))
    chosen = [k for k in knobs if k.name in paths]
    return [tuple((paths[k.name], k.spec_value(v)) for k, v in zip(chosen, combo))
            for combo in itertools.product(*(k.probe_values for k in chosen))]


def parse_space(data, source: str, mode: str, gpus: int, variants: tuple = ()) -> Space:
    """Validate the study's `space` mapping; knobs not given take their single default.
    Variants add a `variant` knob whose overrides must not touch a path the space sweeps."""
    if not isinstance(data, dict) or not data:
        raise SpecError(source, "space", data, "expected a mapping of knob -> list of values")
    given = {}
    for name, raw in data.items():
        name = str(name)
        field = f"space.{name}"
        is_spec = name.startswith(SPEC_KNOB_PREFIXES) and name not in SPEC_KNOB_PREFIXES
        serving = mode == "serve" and name in SERVE_KNOBS
        if name not in PARALLEL_KNOBS and not is_spec and name not in SPEC_KNOB_ALIASES and not serving:
            allowed = ", ".join((*PARALLEL_KNOBS, *(SERVE_KNOBS if mode == "serve" else ())))
            raise SpecError(source, field, raw,
                            f"unknown knob (allowed: {allowed}, dtype, fp8_recipe, or model.<path> / hardware.<path>)")
        if serving:
            given[name] = Knob(name, tuple(_as_list(raw, source, field)))
        elif isinstance(raw, dict):
            given[name] = Knob(name, (), _range(name, raw, source, field))
        elif name in PARALLEL_KNOBS:
            given[name] = Knob(name, _parallel_values(name, raw, source, field))
        elif name in CHOICE_SPEC_KNOBS:
            values = tuple(_as_list(raw, source, field))
            for value in values:
                if value not in CHOICE_SPEC_KNOBS[name]:
                    raise SpecError(source, field, value, f"expected a list of {', '.join(CHOICE_SPEC_KNOBS[name])}")
            given[name] = Knob(name, values)
        else:
            given[name] = Knob(name, _spec_values(raw, source, field))
    paths = {}
    for name in given:
        path = SPEC_KNOB_ALIASES.get(name, name)
        if path in paths:
            raise SpecError(source, f"space.{name}", data[name],
                            f"space.{paths[path]} sets {path} already; set it in one place")
        paths[path] = name
    knobs = [given.get(name, Knob(name, (default,))) for name, (default, _) in PARALLEL_KNOBS.items()]
    knobs += [knob for name, knob in given.items() if name not in PARALLEL_KNOBS]
    for variant in variants:
        for kind, overrides in (("model", variant.model_overrides), ("hardware", variant.hardware_overrides)):
            for path, value in overrides:
                if f"{kind}.{path}" in paths:
                    raise SpecError(source, f"variants.{variant.name}.{kind}.{path}", value,
                                    f"space.{paths[f'{kind}.{path}']} sweeps this path already; set it in one place")
    if variants:
        knobs.append(Knob(VARIANT_KNOB, tuple(v.name for v in variants)))
    columns = [k.column for k in knobs]
    for knob in knobs:
        if columns.count(knob.column) > 1:
            raise SpecError(source, f"space.{knob.name}", list(knob.probe_values), f"column name {knob.column} is taken by another knob")
    return Space(tuple(knobs), gpus, mode, tuple(variants))


def _as_list(raw, source: str, field: str) -> list:
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise SpecError(source, field, raw, "empty list: give at least one value")
    if any(v is None or isinstance(v, (list, dict)) for v in values):
        raise SpecError(source, field, raw, "expected a list of plain values")
    seen = set()
    for value in values:
        if (type(value), value) in seen:
            raise SpecError(source, field, raw, f"value {value!r} is listed twice")
        seen.add((type(value), value))
    return values


def _placement_orders(raw):
    """`placement: [tp,cp,dp,pp]` is one order written as a YAML list (as the README shows),
    not four values; a list of such lists is several orders."""
    if isinstance(raw, list) and raw and all(isinstance(v, str) and v in PLACEMENT_AXES for v in raw):
        return [",".join(raw)]
    if isinstance(raw, list):
        return [",".join(v) if isinstance(v, list) and all(isinstance(a, str) for a in v) else v for v in raw]
    return raw


def _parallel_values(name: str, raw, source: str, field: str) -> tuple:
    allowed = PARALLEL_KNOBS[name][1]
    if name == "placement":
        raw = _placement_orders(raw)
    if raw == AUTO:
        if PARALLEL_KNOBS[name][0] != AUTO:
            raise SpecError(source, field, raw, f"{name} cannot be derived; expected {allowed}")
        return (AUTO,)
    values = _as_list(raw, source, field)
    for value in values:
        if name in BOOL_KNOBS:
            ok = isinstance(value, bool)
        elif name in COUNT_KNOBS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif name in CHOICE_KNOBS:
            ok = value in CHOICE_KNOBS[name]
        elif name == "placement":
            ok = isinstance(value, str) and sorted(value.split(",")) == sorted(PLACEMENT_AXES)
        elif name in ("recompute", "schedule"):
            ok = value in (RECOMPUTE if name == "recompute" else SCHEDULES)
        elif name == "zero":
            ok = not isinstance(value, bool) and value in ZERO_STAGES
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if not ok:
            raise SpecError(source, field, value, f"expected {allowed}")
    return tuple(values)


def _spec_values(raw, source: str, field: str) -> tuple:
    values = _as_list(raw, source, field)
    kinds = {type(v) for v in values}
    if len(kinds) > 1 and kinds != {int, float}:
        raise SpecError(source, field, raw, "expected values of one kind (all numbers or all strings with units)")
    written = {}
    for value in values:  # one quantity in two units (3350 GB/s, 3.35 TB/s) is one value
        parsed = quantity(value)
        key = (parsed[0], float(f"{parsed[1]:.12g}")) if parsed else value
        if key in written:
            raise SpecError(source, field, raw, f"{value!r} is {written[key]!r} again, in other units" if parsed
                            else f"value {value!r} is listed twice")
        written[key] = value
    return tuple(values)


def _range(name: str, raw: dict, source: str, field: str) -> Range:
    """`{low, high, log, step}`: integers for parallelism knobs, numbers or quantities with
    units for spec knobs (drawn in the quantity's base unit)."""
    for key in raw:
        if key not in RANGE_KEYS:
            raise SpecError(source, f"{field}.{key}", raw[key], f"unknown range field (allowed: {', '.join(RANGE_KEYS)})")
    for key in ("low", "high"):
        if key not in raw or raw[key] is None:
            raise SpecError(source, f"{field}.{key}", "<missing>", "a range needs low and high")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise SpecError(source, f"{field}.log", log, "expected true or false")
    if name in PARALLEL_KNOBS:
        if name not in RANGE_PARALLEL_KNOBS:
            raise SpecError(source, field, raw, f"{name} takes a list, not a range (ranges: {', '.join(RANGE_PARALLEL_KNOBS)})")
        bounds = [raw[k] for k in ("low", "high")] + ([raw["step"]] if "step" in raw else [])
        if any(isinstance(v, bool) or not isinstance(v, int) for v in bounds):
            raise SpecError(source, field, raw, f"expected integer low, high (and step) for {name}")
        low, high, step, integer, unit = raw["low"], raw["high"], raw.get("step"), True, ""
        if low < RANGE_PARALLEL_KNOBS[name]:
            raise SpecError(source, f"{field}.low", low, f"expected at least {RANGE_PARALLEL_KNOBS[name]}")
        if name == "zero" and high > max(ZERO_STAGES):
            raise SpecError(source, f"{field}.high", high, f"expected at most {max(ZERO_STAGES)} (ZeRO stages "
                            f"{', '.join(map(str, ZERO_STAGES))})")
    else:
        parse = _quantity_parser(raw["low"], raw["high"], source, field)
        low, high = parse(raw["low"]), parse(raw["high"])
        step = parse(raw["step"], source, f"{field}.step") if "step" in raw else None
        integer = all(isinstance(raw[k], int) and not isinstance(raw[k], bool) for k in raw if k != "log")
        written = quantity(raw["low"]) or quantity(raw["high"])
        unit = BASE_UNITS[written[0]] if written else ""
    if not low < high:
        raise SpecError(source, field, raw, "expected low < high")
    if log and (low <= 0 or step is not None):
        raise SpecError(source, field, raw, "a log range needs low > 0 and no step")
    if step is not None:
        steps = (high - low) / step if step > 0 else 0.5
        if step <= 0 or abs(steps - round(steps)) > 1e-9 * max(1.0, steps):
            raise SpecError(source, f"{field}.step", raw["step"], "expected a positive step that divides high - low")
    return Range(low, high, integer, log, step, unit)


def _quantity_parser(low, high, source: str, field: str):
    """The first quantity both bounds parse as (plain numbers parse as any)."""
    for _, parse in QUANTITY_KINDS:
        try:
            parse(low), parse(high)
        except SpecError:
            continue
        return parse
    raise SpecError(source, field, {"low": low, "high": high},
                    "expected numbers, or quantities of one kind such as 1 TB/s, 40 MB, 5 us, 1.4 GHz")
