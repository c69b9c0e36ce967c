"""From a study to the points worth evaluating, one point at a time: a sampled point
(`sweep.search.loop`) or one member of a group of rejections (`sweep.study.grid`, which plans
a grid as arrays), rejected with its reason or given its stable id."""
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass

from core import MODEL_VERSION, check_layout
from core.serving.point import POOL_KNOBS, serve_layout_reason

from .space import PARALLEL_KNOBS, VARIANT_KNOB, Resolved
from .digests import digest, spec_digest
from .loader import Study


@dataclass(frozen=True)
class Point:
    """A legal configuration, ready for a worker: ids index into `Plan.models` / `Plan.hardware`."""
    point_id: str
    values: tuple  # knob values in `Space.knobs` order
    parallelism: tuple  # Parallelism fields, in order (cheap to ship)
    model_index: int
    hardware_index: int


@dataclass(frozen=True)
class Plan:
    points: tuple  # of Point, sorted by point_id
    models: tuple  # ModelSpec per model variant
    hardware: tuple  # HardwareSpec per hardware variant
    illegal: Counter  # reason pattern -> count
    illegal_examples: dict  # reason pattern -> the group's reason: numbers all its members share kept, others N
    total: int  # combinations in the space
    legal: int  # legal points (the length of `points` when they were asked for)

    @property
    def illegal_count(self) -> int:
        return sum(self.illegal.values())


class Planner:
    """Turns knob choices into legal points, caching spec variants by their knob values."""

    def __init__(self, study: Study):
        self.study = study
        self._models, self._hardware = {}, {}
        self._digests = {}
        self.gpu_count_reasons = set()  # reasons given where tp*pp*cp does not divide the study's GPU count

    def specs(self) -> tuple[tuple, tuple]:
        return (tuple(spec for _, spec in self._models.values()),
                tuple(spec for _, spec in self._hardware.values()))

    def point(self, choice: dict) -> Point | str:
        """The legal point `choice` describes, or the reason it is illegal."""
        resolved = self.study.space.resolve(choice)
        if resolved.reason:
            self.gpu_count_reasons.add(resolved.reason)
            return resolved.reason
        model_index, model = self._variant(self._models, resolved.model_knobs, self.study.model_spec)
        hardware_index, hw = self._variant(self._hardware, resolved.hardware_knobs, self.study.hardware_spec)
        par = resolved.parallelism
        work = self.study.workload_for(resolved.workload_knobs)
        reason = check_layout(model, hw, par, work, self.study.gpus)
        if not reason and work.mode == "serve":
            reason = serve_layout_reason(model, hw, par, work, self.study.gpus) or self._pools_unused(choice, work)
        if reason:
            return reason
        fields = tuple(getattr(par, name) for name in PARALLELISM_FIELDS)
        return Point(point_id(self.study, resolved, self._digest(model), self._digest(hw)), resolved.values,
                     fields, model_index, hardware_index)

    def _pools_unused(self, choice: dict, work) -> str:
        """An aggregated point takes no pool: it is planned once, at each swept pool knob's first
        value (its id and row the same whatever the pool knobs say; the table leaves them null)."""
        if work.disagg:
            return ""
        moved = [f"{k.name} = {choice[k.name]}" for k in self.study.space.knobs
                 if k.name in POOL_KNOBS and choice[k.name] != k.values[0]]
        return (f"{', '.join(moved)}: pool knobs, which an aggregated point (disagg false) does not take "
                "(it is planned at their first values)") if moved else ""

    def _digest(self, spec) -> str:
        key = id(spec)
        if key not in self._digests:
            self._digests[key] = spec_digest(spec)
        return self._digests[key]

    @staticmethod
    def _variant(cache: dict, knobs: tuple, load):
        key = knobs
        try:
            hash(knobs)
        except TypeError:  # a variant's list-valued override (a network) does not hash
            key = json.dumps(knobs, sort_keys=True, default=str)
        if key not in cache:
            cache[key] = (len(cache), load(knobs))
        return cache[key]


PARALLELISM_FIELDS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "micro_batch", "recompute", "schedule",
                      "virtual_stages", "placement", "etp", "first_stage_layers", "last_stage_layers",
                      "overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "overlap_p2p_comm",
                      "grad_dtype", "fp8_params", "master_weights", "optimizer_dtype",
                      "grad_accumulation_fusion", "fused_cross_entropy", "reshard_after_forward",
                      "expandable_segments")


def locality_key(point: Point) -> tuple:
    """Sort key that puts points sharing core's memo caches (same specs, same layer shape:
    micro-batch, cp, tp, sp, ep) next to each other, so a batch rarely warms a cache another
    worker has already warmed. Dispatch order only; tables are sorted by point_id."""
    par = dict(zip(PARALLELISM_FIELDS, point.parallelism))
    return (point.model_index, point.hardware_index, par["micro_batch"], par["cp"], par["tp"], par["sp"],
            par["ep"], point.point_id)


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def reason_pattern(reason: str) -> str:
    """A reason with its numbers written N, so rejections group by kind and a group reads as
    its kind, not as one member's numbers: "heads (32) not divisible by tp (3)" -> "heads (N)
    not divisible by tp (N)". Digits inside a name (fp8, llama3.1-8b) stay."""
    return _NUMBER.sub("N", reason)


def group_reason(member: str, shared: list) -> str:
    """A group's reason: `member`'s text with each number the group does not share (None in
    `shared`) written N, so "gpus (16) not divisible by tp*pp*cp (N*N*N = N)" keeps the 16
    every member has and drops the numbers that vary."""
    slots = iter(shared)
    return _NUMBER.sub(lambda number: next(slots) or "N", member)


def point_id(study: Study, resolved: Resolved, model_digest: str, hardware_digest: str) -> str:
    """Hash of what decides a point's numbers: the resolved model and hardware (their contents,
    from `spec_digest`), GPUs, workload, parallelism, backend and MODEL_VERSION. The same
    across runs, processes and machines; different after any edit that moves a number."""
    return digest({"model": model_digest, "hardware": hardware_digest, "gpus": study.gpus,
                   "workload": asdict(study.workload_for(resolved.workload_knobs)),
                   "parallelism": asdict(resolved.parallelism),
                   "backend": study.backend, "model_version": MODEL_VERSION})[:16]


# How fault samples are drawn (2: from the point's layout, not its point_id): a table whose
# samples were drawn otherwise is not extended.
FAULT_DRAWS = 2
VARIANTS_KEY = "variants"


def definition_digests(study: Study) -> dict:
    """What a results folder's rows share beyond their knob values: a table never mixes rows of
    two. Besides the specs and workload: the knobs that set spec fields (rows written without
    one would have no value in its column), what each variant name resolves to (a name is all
    its rows record), and the faults block but its sample count (samples are drawn per index,
    so more of them extend a table)."""
    faults = None if study.faults is None else digest(
        {"draws": FAULT_DRAWS, **{k: v for k, v in asdict(study.faults).items() if k != "samples"}})
    variants = {v.name: digest([spec_digest(study.model_spec(v.model_overrides)),
                                spec_digest(study.hardware_spec(v.hardware_overrides))]) for v in study.space.variants}
    return {"model": spec_digest(study.model_spec()), "hardware": spec_digest(study.hardware_spec()),
            "gpus": study.gpus, "workload": digest(asdict(study.workload)), "backend": study.backend,
            "model_version": MODEL_VERSION, "faults": faults, "spec_knobs": _spec_knobs(study.space.columns),
            VARIANTS_KEY: variants}


def definition_changes(theirs: str | None, ours: str, their_knobs: str) -> str:
    """The components two definitions (JSON, as stored) disagree on; empty when their rows may
    share a table. Variants are added or dropped as a whole (the rows of one side would record
    none); with both sides having them, a name only one has adds points and a name both have
    must resolve alike. `their_knobs`, the part's knob columns, completes a definition written
    before it held spec knobs and variants."""
    try:
        old, new = json.loads(theirs), json.loads(ours)
    except (TypeError, ValueError):
        return "" if theirs == ours else "the whole definition"
    columns = [c for c in their_knobs.split(",") if c]
    old = {"spec_knobs": _spec_knobs(columns), **({} if VARIANT_KNOB in columns else {VARIANTS_KEY: {}}), **old}
    changed = []
    for key in sorted(set(old) | set(new)):
        mine, yours = old.get(key), new.get(key)
        if key == VARIANTS_KEY and isinstance(mine, dict) and isinstance(yours, dict) and bool(mine) == bool(yours):
            changed += [f"variant {name!r}" for name in sorted(set(mine) & set(yours)) if mine[name] != yours[name]]
        elif mine != yours:
            changed.append(key)
    return ", ".join(changed)


def _spec_knobs(columns) -> list:
    """The knob columns that set model or hardware fields (not parallelism, not the variant)."""
    return sorted(c for c in columns if c not in PARALLEL_KNOBS and c != VARIANT_KNOB)
