"""Study files: one YAML naming a model, a cluster, a workload and the knobs to sweep.

`load_study` validates the whole file up front (every model and hardware variant is
loaded once) so that a bad study fails with one line naming the file, the field, the
value and what is allowed, before anything is written."""
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from core import BACKENDS, InferWorkload, SpecError, TrainWorkload, load_hardware, load_model
from core.evaluation import ENERGY
from core.model.specs import (COMPUTE_DTYPES, KV_DTYPES, MAX_WORKLOAD_SIZE, SERVE_KNOBS, SERVE_POOLS,
                              WORKLOAD_SIZE_ALLOWED, ServeWorkload)
from core.serving.point import POOL_KNOBS, check_serve_workload, pool_of
from core.serving.service import check_pool
from core.textfile import parse_mapping, read_text

from sweep.metrics import COST
from .cost_block import CostSpec, parse_cost
from .digests import spec_digest
from .space import SPEC_KNOB_ALIASES, Space, Variant, parse_space
from .fields import refuse_unknown

if TYPE_CHECKING:
    from .search_block import SearchSpec

STUDY_KEYS = ("name", "description", "model", "hardware", "overrides", "gpus", "workload", "space",
              "backend", "output", "seed", "variants", "baseline", "search", "faults", "cost")
REQUIRED_KEYS = ("name", "model", "hardware", "gpus", "workload", "space")
WORKLOAD_KEYS = {"train": ("global_batch", "seq"), "infer": ("batch", "prompt", "decode"), "serve": ("isl", "osl")}
# infer's kv_dtype: the KV cache's dtype (default: the activations'); serve's: core.model.specs.ServeWorkload
OPTIONAL_WORKLOAD_KEYS = {"train": ("tokens_total",), "infer": ("kv_dtype",),
                          "serve": tuple(k for k in SERVE_KNOBS if k not in ("isl", "osl"))}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SPEC_PREFIXES = ("model.", "hardware.")


@dataclass(frozen=True)
class Study:
    """A validated study: what to model, on what, and the space of knobs to explore."""
    name: str
    path: str
    text: str
    model: str
    hardware: str
    model_overrides: tuple  # ((dotted path, value), ...) applied to every point
    hardware_overrides: tuple
    gpus: int
    workload: TrainWorkload | InferWorkload | ServeWorkload
    space: Space
    backend: str
    output: Path
    seed: int
    baseline: str = ""  # the variant speedups are measured against ("" without variants)
    search: "SearchSpec | None" = None  # sample the space with Optuna instead of walking the grid
    faults: object = None  # sweep.study.faults_block.FaultSpec when the study samples link faults and stragglers
    cost: CostSpec | None = None  # prices for the dollar columns (sweep/study/cost_block.py)

    @property
    def mode(self) -> str:
        return self.workload.mode

    def workload_for(self, knobs: tuple = ()):
        """The workload with a serving point's swept fields (Resolved.workload_knobs), an
        aggregated point's pool fields at their defaults (ServeWorkload.settled)."""
        work = replace(self.workload, **dict(knobs)) if knobs else self.workload
        return work.settled() if work.mode == "serve" else work

    def model_spec(self, knobs: tuple = ()):
        """The model with the study's overrides plus a point's `model.*` knobs."""
        return load_model(_spec_ref(self.model, self.path), dict(self.model_overrides + knobs))

    def hardware_spec(self, knobs: tuple = ()):
        """The hardware with the study's overrides plus a point's `hardware.*` knobs."""
        return load_hardware(_spec_ref(self.hardware, self.path), dict(self.hardware_overrides + knobs))


def load_study(path, output: str | None = None) -> Study:
    """Parse and validate a study file; raises SpecError naming file, field, value, allowed.
    `output` (the command line's --output) replaces the study's output folder, and with it
    the default place of a search's Optuna storage."""
    source = str(path)
    text = read_text(path, kind="study file")
    data = parse_mapping(text, source, Path(path).name)
    refuse_unknown(data, STUDY_KEYS, source)
    for key in REQUIRED_KEYS:
        if data.get(key) is None:
            raise SpecError(source, key, "<missing>", "this field is required")
    name = data["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(source, "name", name, "expected letters, digits, '.', '_' or '-' (a folder name)")
    if not isinstance(data.get("description", ""), str):
        raise SpecError(source, "description", data["description"], "expected text (shown at the top of the report)")
    gpus = data["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError(source, "gpus", gpus, "expected a positive integer")
    backend = data.get("backend", "analytical")
    if backend not in BACKENDS:
        raise SpecError(source, "backend", backend, f"expected one of {', '.join(BACKENDS)}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(source, "seed", seed, "expected a non-negative integer")
    output = data.get("output", f"results/{name}") if output is None else output
    if not isinstance(output, str) or not output.strip():
        raise SpecError(source, "output", output, "expected a folder path")
    if Path(output).exists() and not Path(output).is_dir():
        raise SpecError(source, "output", output, "exists and is not a folder")
    for key in ("model", "hardware"):
        if not isinstance(data[key], str):
            raise SpecError(source, key, data[key], "expected a preset name or a file path")
    model_overrides, hardware_overrides = _split_overrides(data.get("overrides") or {}, source)
    workload = _workload(data["workload"], source)
    variants, baseline = _variants(data, source)
    space = parse_space(data["space"], source, workload.mode, gpus, variants)
    search = None
    if data.get("search") is not None:
        from .search_block import parse_search  # here, not on top: it needs sweep.worker, which needs this module
        search = parse_search(data["search"], source, Path(output), seed, has_faults=data.get("faults") is not None,
                              mode=workload.mode)
    elif space.ranges:
        knob = space.ranges[0]
        raise SpecError(source, f"space.{knob.name}", data["space"][knob.name],
                        "a range needs a search: block (a grid enumerates lists only)")
    study = Study(name=name, path=source, text=text, model=data["model"], hardware=data["hardware"],
                  model_overrides=model_overrides, hardware_overrides=hardware_overrides, gpus=gpus,
                  workload=workload, space=space, backend=backend, output=Path(output), seed=seed,
                  baseline=baseline, search=search,
                  cost=parse_cost(data["cost"], source) if data.get("cost") is not None else None)
    _check_specs(study)
    if study.mode == "serve":
        _check_serving(study, data["workload"])
    _check_energy_asked(study, data)
    if data.get("faults") is not None:
        study = replace(study, faults=_faults(data["faults"], study))
    return study


def _faults(data, study: Study):
    """The faults block, checked against the study's backend, mode and network."""
    from .faults_block import parse_faults

    hw = study.hardware_spec()
    links = set()
    if study.backend.startswith("astra"):
        from core.replay.faults import undirected
        from core.replay.network import astra_network
        links = set(undirected(astra_network(hw, study.gpus).links()))
    names = tuple(dim.name for dim in hw.dims_for(study.gpus))
    return parse_faults(data, study.path, study.backend, study.mode, names, links, study.gpus)


def _spec_ref(ref: str, study_path: str) -> str:
    """A file reference relative to the study file when it exists there, else as written."""
    beside = Path(study_path).parent / ref
    return str(beside) if ("/" in ref or ref.endswith((".yaml", ".yml", ".json"))) and beside.is_file() else ref


def _split_overrides(overrides, source: str, field: str = "overrides") -> tuple[tuple, tuple]:
    if not isinstance(overrides, dict):
        raise SpecError(source, field, overrides, "expected a mapping of dotted paths to values")
    model, hardware = [], []
    for path, value in overrides.items():
        path = str(path)
        if not path.startswith(SPEC_PREFIXES) or path in SPEC_PREFIXES:
            raise SpecError(source, f"{field}.{path}", value,
                            "expected a dotted path starting with model. or hardware. (e.g. hardware.gpu.hbm.bandwidth)")
        target = model if path.startswith("model.") else hardware
        target.append((path.split(".", 1)[1], value))
    return tuple(sorted(model)), tuple(sorted(hardware))


def _variants(data: dict, source: str) -> tuple[tuple, str]:
    """The `variants:` block (name -> dotted overrides) and the `baseline` it is compared with."""
    block = data.get("variants")
    if block is None:
        if "baseline" in data:
            raise SpecError(source, "baseline", data["baseline"], "needs a variants: block to name one of")
        return (), ""
    if not isinstance(block, dict) or not block:
        raise SpecError(source, "variants", block, "expected a mapping of variant name -> {model.<path>|hardware.<path>: value}")
    variants, seen = [], {}
    for name, overrides in block.items():
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise SpecError(source, f"variants.{name}", overrides, "expected a name of letters, digits, '.', '_' or '-'")
        model, hardware = _split_overrides({} if overrides is None else overrides, source, f"variants.{name}")
        key = json.dumps([model, hardware], sort_keys=True, default=str)  # a value may be a list (a network)
        if key in seen:
            raise SpecError(source, f"variants.{name}", overrides, f"the same overrides as variant {seen[key]}")
        seen[key] = name
        variants.append(Variant(name, model, hardware))
    baseline = data.get("baseline", variants[0].name)
    if baseline not in block:
        raise SpecError(source, "baseline", baseline, f"expected one of the variants: {', '.join(block)}")
    return tuple(variants), baseline


def _workload(data, source: str):
    if not isinstance(data, dict):
        raise SpecError(source, "workload", data, "expected a mapping with mode and its sizes")
    mode = data.get("mode")
    if mode not in WORKLOAD_KEYS:
        raise SpecError(source, "workload.mode", mode if mode is not None else "<missing>",
                        f"expected one of {', '.join(WORKLOAD_KEYS)}")
    allowed = ("mode",) + WORKLOAD_KEYS[mode] + OPTIONAL_WORKLOAD_KEYS[mode]
    for key in data:
        if key not in allowed:
            raise SpecError(source, f"workload.{key}", data[key], f"unknown field for mode {mode} (allowed: {', '.join(allowed)})")
    sizes = {}
    for key in WORKLOAD_KEYS[mode]:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKLOAD_SIZE:
            raise SpecError(source, f"workload.{key}", value if key in data else "<missing>", WORKLOAD_SIZE_ALLOWED)
        sizes[key] = value
    if mode == "train":
        return TrainWorkload(**sizes, tokens_total=_tokens_total(data, source))
    if mode == "serve":
        extra = {key: data[key] for key in OPTIONAL_WORKLOAD_KEYS["serve"] if key in data}
        for key, value in extra.items():
            _check_serve_type(key, value, source, f"workload.{key}")
        return ServeWorkload(**sizes, **extra)
    kv_dtype = data.get("kv_dtype", "")
    if kv_dtype != "" and kv_dtype not in KV_DTYPES:
        raise SpecError(source, "workload.kv_dtype", kv_dtype, f"expected one of {', '.join(KV_DTYPES)}")
    return InferWorkload(**sizes, kv_dtype=kv_dtype)


def _tokens_total(data: dict, source: str) -> float:
    """A whole run's training tokens (15e12 for Llama 3), 0 when not given."""
    value = data.get("tokens_total", 0)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e18:
        raise SpecError(source, "workload.tokens_total", value, "expected a number of tokens such as 15e12")
    return float(value)


def _check_serve_type(name: str, value, source: str, field: str) -> None:
    """A serving field's value of the kind it takes: a name, a number of requests per second, or
    a count."""
    if name in ("engine", "kv_dtype"):
        ok, kind = isinstance(value, str), "a name"
    elif name == "disagg":
        ok, kind = isinstance(value, bool), "true or false"
    elif name in ("request_rate", "length_spread"):
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    else:
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    if not ok:
        raise SpecError(source, field, value, f"expected {kind}")


def _check_serving(study: Study, written: dict) -> None:
    """A serving study: the analytical backend, and every swept load value one the engine
    simulator takes beside the first value of every other knob (which also holds exactly one
    of concurrency and request_rate set)."""
    if study.backend != "analytical":
        raise SpecError(study.path, "backend", study.backend,
                        "a serving study runs the engine simulator: expected analytical")
    etp = study.space.choices()["etp"]
    if etp != (0,):
        raise SpecError(study.path, "space.etp", list(etp), "a serving engine splits each expert over the tp / ep GPUs "
                        "ep leaves (TensorRT-LLM's moe_tp_size), derived: sweep tp and ep instead")
    swept = {study.space.knobs[i].name: study.space.knobs[i].values for i in study.space.workload_axes}
    first = {name: values[0] for name, values in swept.items()}
    for name, values in swept.items():
        for value in values:
            _check_serve_type(name, value, study.path, f"space.{name}")
            try:
                check_serve_workload(replace(study.workload, **{**first, name: value}), study.path, "")
            except SpecError as err:
                where = f"space.{err.field}" if err.field in swept else f"workload.{err.field}"
                raise SpecError(study.path, where, err.value, err.allowed) from None
    if not swept:
        check_serve_workload(study.workload, study.path)
    _check_pools(study, swept, written)


def _check_pools(study: Study, swept: dict, written: dict) -> None:
    """Disaggregated pools as `rapid run --mode serve --disagg` takes them: a pool knob (in the
    workload `written` or the space) needs a point with disagg true, and a disaggregated point
    both its pools."""
    def where(name):
        return f"space.{name}" if name in swept else f"workload.{name}"

    given = [name for name in POOL_KNOBS if name in swept or name in written]
    disagg = swept.get("disagg", (study.workload.disagg,))
    if given and True not in disagg:
        raise SpecError(study.path, where(given[0]), swept.get(given[0], getattr(study.workload, given[0])),
                        "a prefill or decode pool needs disagg: true (in the workload or the space)")
    if True not in disagg:
        return
    for pool in SERVE_POOLS:
        if not any(name.startswith(pool) for name in given):
            other = next(iter(given), "disagg")
            raise SpecError(study.path, where(other), swept.get(other, getattr(study.workload, other)),
                            f"disagg needs both a prefill pool and a decode pool: give {pool}_workers, {pool}_tp, ...")
        if not any(name.startswith(pool) for name in swept):  # a pool the workload alone lays out
            try:
                check_pool(pool_of(study.workload, pool), study.path, f"{pool}_")
            except SpecError as err:
                raise SpecError(study.path, f"workload.{err.field}", err.value, err.allowed) from None


def _check_energy_asked(study: Study, data: dict) -> None:
    """A cost block, or a search on energy or dollars, needs a hardware file with power figures."""
    asked = [("cost", data.get("cost"))] if study.cost is not None else []
    if study.search is not None:
        asked += [("search.objectives", column) for column, _ in study.search.objectives if column in ENERGY + COST]
        asked += [("search.constraints", column) for column, *_ in study.search.constraints if column in ENERGY + COST]
    if asked and study.hardware_spec().gpu.power is None:
        field, value = asked[0]
        raise SpecError(study.path, field, value, f"needs power figures the hardware file {study.hardware} does not give "
                        "(gpu.tdp, idle_power, ...: docs/hardware.md)")


def _check_specs(study: Study) -> None:
    """Load the model and every hardware/model variant the space asks for, naming the study field on error."""
    try:
        study.model_spec()
    except SpecError as err:
        raise _rehome(err, study, "model", study.model) from None
    try:
        study.hardware_spec()
    except SpecError as err:
        raise _rehome(err, study, "hardware", study.hardware) from None
    for kind, variants in (("model", study.space.model_variants()), ("hardware", study.space.hardware_variants())):
        for knobs in variants:
            try:
                study.model_spec(knobs) if kind == "model" else study.hardware_spec(knobs)
            except SpecError as err:
                raise _rehome(err, study, kind, None) from None
    for variant in study.space.variants:
        for kind, overrides, load in (("model", variant.model_overrides, study.model_spec),
                                      ("hardware", variant.hardware_overrides, study.hardware_spec)):
            try:
                load(overrides)
            except SpecError as err:
                field = f"variants.{variant.name}.{kind}.{err.field}" if err.field in dict(overrides) else \
                    f"variants.{variant.name} ({kind} {err.source}): {err.field}"
                raise SpecError(study.path, field, err.value, err.allowed) from None
    _check_variants_apart(study)


def _check_variants_apart(study: Study) -> None:
    """Refuse two variants (or one and the study's own specs, with `{}` among the variants) that
    resolve to the same model and hardware: their points would share ids, so one's rows would
    stand for the other's."""
    resolved = {}
    for variant in study.space.variants:
        specs = (spec_digest(study.model_spec(variant.model_overrides)),
                 spec_digest(study.hardware_spec(variant.hardware_overrides)))
        other = resolved.setdefault(specs, variant.name)
        if other != variant.name:
            raise SpecError(study.path, f"variants.{variant.name}",
                            {**{f"model.{k}": v for k, v in variant.model_overrides},
                             **{f"hardware.{k}": v for k, v in variant.hardware_overrides}} or "{}",
                            f"the same model and hardware as variant {other} once resolved (an override "
                            "written another way, or the value the files already hold): give it a change of its own")


def _rehome(err: SpecError, study: Study, kind: str, ref) -> SpecError:
    """Core's error about a spec field, restated as the study field that set it."""
    if err.field in (kind, "<file>") and ref is not None:
        return SpecError(study.path, kind, ref, f"{err.allowed} ({err.source})" if err.source else err.allowed)
    overrides = study.model_overrides if kind == "model" else study.hardware_overrides
    if err.field in dict(overrides):
        return SpecError(study.path, f"overrides.{kind}.{err.field}", err.value, err.allowed)
    space_field = f"{kind}.{err.field}"
    for name in study.space.names:
        if SPEC_KNOB_ALIASES.get(name, name) == space_field:
            allowed = err.allowed
            if name == "dtype":  # the short knob takes compute dtypes only
                rated = dict(study.hardware_spec().gpu.peak_flops)
                allowed = (f"expected one of {', '.join(d for d in COMPUTE_DTYPES if d in rated)}, "
                           f"the compute dtypes {study.hardware} has a peak for")
            return SpecError(study.path, f"space.{name}", err.value, allowed)
    return SpecError(study.path, f"{kind} ({err.source}): {err.field}", err.value, err.allowed)
