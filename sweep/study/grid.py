"""The grid planned as arrays: combinations numbered 0..total-1 (knob indices in mixed radix,
the first knob slowest, as `Space.grid` walks them), planned in chunks of bounded size.

Legality comes from core.layout_failures, a mask per check_layout rule; each reason's text
from the per-point path (`Planner.point`) called once per group of rejected combinations
sharing what the text depends on. Point ids are the per-point path's (`point_id`), the JSON
it hashes assembled from per-value fragments, a chunk at a time."""
import hashlib
import json
import math
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, fields, replace

import numpy as np

from core import MODEL_VERSION, Parallelism, SpecError
from core.model.specs import SERVE_LAYOUT_KNOBS, gathers_parameters
from core.model.layout import serving_etp
from core.model.layout_masks import REASON_INPUTS, layout_failures
from core.replay.network import astra_network

from .loader import Study
from .plan import PARALLELISM_FIELDS, Plan, Planner, Point, group_reason, reason_pattern, _NUMBER
from .space import AUTO, VARIANT_KNOB

CHUNK_COMBINATIONS = 1 << 17
FRAGMENT_TABLE = 4096  # joint JSON fragments of several Parallelism fields, per id column
GPU_COUNT_RULE = 1  # Space.resolve's rule; check_layout's rules follow it
GPU_COUNT_INPUTS = ("tp", "pp", "cp")
# A serving study's own rules, after check_layout's: the per-point path's (check_layout on the
# point's own workload, then core.serving.point.serve_layout_reason), asked once per group of
# combinations sharing the layout and the swept serving-layout knobs (SERVE_LAYOUT_KNOBS)
SERVE_RULE = GPU_COUNT_RULE + len(REASON_INPUTS) + 1
SERVE_INPUTS = ("dp", "tp", "pp", "ep", "etp", "model", "hardware")


@dataclass
class Chunk:
    """Combinations (`numbers`, one row each; [start, stop) unless picked): the legal rows and,
    when asked, their ids."""
    numbers: np.ndarray
    legal: np.ndarray  # rows
    columns: dict  # Parallelism field -> (codes per row, values)
    model_codes: np.ndarray
    hardware_codes: np.ndarray
    ids: list | None = None


@dataclass(frozen=True)
class Verdict:
    """Combinations [start, stop) judged on their own (one task of a count pass, on a worker or
    in the driver): the legal ones as offsets from `start` in dispatch order (points sharing
    core's memos side by side, as PointBlock orders them, combination number for the id),
    their rejections, and which of the reasons are the GPU-count rule's."""
    start: int
    stop: int
    order: np.ndarray  # uint32 offsets
    rejections: "Rejections"
    gpu_count_reasons: frozenset

    def numbers(self) -> np.ndarray:
        return self.order.astype(np.int64) + self.start


@dataclass(frozen=True)
class ChunkRange:
    """A count-pass task: combinations [start, stop) to judge (GridPlanner.verdict)."""
    start: int
    stop: int


@dataclass(frozen=True)
class GridSlice:
    """An evaluation task: legal combinations (numbers) a worker plans into points, skipping
    those its table already holds, and evaluates."""
    numbers: np.ndarray

    def __len__(self) -> int:
        return len(self.numbers)


class DoneIds:
    """Point ids a table holds, as sorted 64-bit integers (a point id is 16 hex digits): 8 bytes
    an id to ship to workers, not a string's ~70."""

    def __init__(self, ids=()):
        self.values = np.unique(np.fromiter((int(i, 16) for i in ids), np.uint64, len(ids)))

    def __len__(self) -> int:
        return len(self.values)

    def holds(self, ids: list) -> np.ndarray:
        """Whether each of `ids` is among them."""
        if not len(self.values):
            return np.zeros(len(ids), bool)
        return np.isin(np.fromiter((int(i, 16) for i in ids), np.uint64, len(ids)), self.values)


@dataclass(frozen=True)
class PointBlock:
    """Legal points as arrays, what a worker needs to evaluate them (sweep.evaluation.points)
    at a few bytes a point: their ids, each Parallelism field's value codes and values
    (PARALLELISM_FIELDS order), each knob's column (a Parallelism field's index, or its value
    codes and values) and each point's spec variants."""
    ids: list
    parallelism: tuple  # ((codes, values), ...)
    knobs: tuple  # per knob of Space.knobs: an index into `parallelism`, or (codes, values)
    model_codes: np.ndarray
    hardware_codes: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def slice(self, start: int, stop: int) -> "PointBlock":
        return PointBlock(self.ids[start:stop], tuple((codes[start:stop], values) for codes, values in self.parallelism),
                          tuple(k if isinstance(k, int) else (k[0][start:stop], k[1]) for k in self.knobs),
                          self.model_codes[start:stop], self.hardware_codes[start:stop])

    def columns(self) -> tuple:
        """(ids, each knob's column values, each point's Parallelism fields, model indices,
        hardware indices) as lists, knob columns as Point.values writes them."""
        fields = [_take(values, codes) for codes, values in self.parallelism]
        knobs = [(fields[k] if isinstance(k, int) else _take(k[1], k[0])) for k in self.knobs]
        placement = PARALLELISM_FIELDS.index("placement")
        knobs = [[",".join(v) for v in column] if k == placement else column for k, column in zip(self.knobs, knobs)]
        return (self.ids, knobs, list(zip(*fields)), self.model_codes.tolist(), self.hardware_codes.tolist())


def _take(values: tuple, codes: np.ndarray) -> list:
    """values[code] for each code (values may be tuples: an object array of them, not a 2-D one)."""
    table = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        table[i] = value
    return table[codes].tolist()


class Rejections:
    """Illegal combinations grouped by reason pattern, as the per-point path groups them: the
    count, the text of the first member in grid order, and the numbers every member shares."""

    def __init__(self):
        self.counts = Counter()
        self.first = {}  # pattern -> (combination number, reason)
        self.shared = {}

    def add(self, reason: str, count: int, number: int) -> None:
        pattern = reason_pattern(reason)
        self.counts[pattern] += count
        if pattern not in self.first or number < self.first[pattern][0]:
            self.first[pattern] = (number, reason)
        numbers = _NUMBER.findall(reason)
        kept = self.shared.get(pattern, numbers)
        self.shared[pattern] = [mine if mine == theirs else None for mine, theirs in zip(kept, numbers)]

    def merge(self, other: "Rejections") -> None:
        """Take in another share of the grid's rejections (any order: counts add, the first
        member is the lowest combination number, shared numbers those both shares keep)."""
        for pattern, count in other.counts.items():
            self.counts[pattern] += count
            number, reason = other.first[pattern]
            if pattern not in self.first or number < self.first[pattern][0]:
                self.first[pattern] = (number, reason)
            kept = self.shared.get(pattern, other.shared[pattern])
            self.shared[pattern] = [mine if mine == theirs else None for mine, theirs in zip(kept, other.shared[pattern])]

    def ordered(self) -> Counter:
        """The counts in the order the per-point path meets the patterns (ties keep it)."""
        return Counter({p: self.counts[p] for p in sorted(self.counts, key=lambda p: self.first[p][0])})

    def examples(self) -> dict:
        return {pattern: group_reason(self.first[pattern][1], self.shared[pattern]) for pattern in self.counts}


class GridPlanner:
    """A study's grid as numbered combinations: legality, reasons, ids and points per chunk."""

    def __init__(self, study: Study):
        self.study, self.space = study, study.space
        self.planner = Planner(study)  # the per-point path: reason texts and the spec variants
        knobs = self.space.knobs
        self.sizes = [len(k.values) for k in knobs]
        self.total = grid_size(self.space)
        self.strides = [math.prod(self.sizes[i + 1:]) for i in range(len(knobs))]
        self.position = {k.name: i for i, k in enumerate(knobs)}
        model_names = {name for name, _ in self.space._model_paths} | {VARIANT_KNOB}
        hardware_names = {name for name, _ in self.space._hardware_paths} | {VARIANT_KNOB}
        self.model_axes = [i for i, k in enumerate(knobs) if k.name in model_names]
        self.hardware_axes = [i for i, k in enumerate(knobs) if k.name in hardware_names]
        self.rejections = Rejections()
        self.legal = 0
        # a serving study's swept layout knobs, grouped on as `knob:<name>` codes
        self.serve_axes = [i for i in self.space.workload_axes if knobs[i].name in SERVE_LAYOUT_KNOBS]
        self.serve_inputs = SERVE_INPUTS + tuple(f"knob:{knobs[i].name}" for i in self.serve_axes)
        # check_layout's rules read the workload; a swept kv_dtype is the serving pass's to check
        self.layout_workload = study.workload
        if "kv_dtype" in (knobs[i].name for i in self.serve_axes):
            self.layout_workload = replace(study.workload, kv_dtype="")
        if self.total:
            self.model_table = self._variants(self.model_axes, "model_knobs", self.planner._models, study.model_spec)
            self.hardware_table = self._variants(self.hardware_axes, "hardware_knobs", self.planner._hardware,
                                                 study.hardware_spec)
            self.models, self.hardware = self.planner.specs()
            self._id_texts = _IdTexts(self)

    def _variants(self, axes: list, field: str, cache: dict, load) -> np.ndarray:
        """Spec index (into the planner's cache) per combination of the `axes` knobs' values."""
        first = self.choice(0)
        table = []
        for combo in np.ndindex(*(self.sizes[i] for i in axes)):
            choice = {**first, **{self.space.knobs[i].name: self.space.knobs[i].values[j] for i, j in zip(axes, combo)}}
            table.append(self.planner._variant(cache, getattr(self.space.resolve(choice), field), load)[0])
        return np.array(table, np.int64)

    def choice(self, number: int) -> dict:
        """Combination `number` as {knob name: value}."""
        return {k.name: k.values[(number // stride) % size]
                for k, stride, size in zip(self.space.knobs, self.strides, self.sizes)}

    def ranges(self, size: int | None = None):
        """ChunkRanges of CHUNK_COMBINATIONS (or `size`) combinations covering the grid in order."""
        size = size or CHUNK_COMBINATIONS
        return [ChunkRange(start, min(self.total, start + size)) for start in range(0, self.total, size)]

    def chunks(self, size: int | None = None, ids: bool = False):
        """Every chunk in grid order (CHUNK_COMBINATIONS each unless `size`); rejections and the
        legal count accumulate as they go."""
        for part in self.ranges(size):
            chunk = self.chunk(part.start, part.stop, ids)
            self.legal += len(chunk.legal)
            yield chunk

    def verdict(self, part: ChunkRange) -> Verdict:
        """The combinations of `part` judged on their own, for `add` to gather (in any order)."""
        rejections = Rejections()
        chunk = self.chunk(part.start, part.stop, rejections=rejections)
        legal = chunk.legal
        order = legal[np.lexsort((legal, *self._locality(chunk, legal)))]
        reasons = frozenset(r for _, r in rejections.first.values() if r in self.planner.gpu_count_reasons)
        return Verdict(part.start, part.stop, order.astype(np.uint32), rejections, reasons)

    def add(self, verdict: Verdict) -> None:
        """Count a Verdict in: the legal total, the rejections and their reasons."""
        self.legal += len(verdict.order)
        self.rejections.merge(verdict.rejections)
        self.planner.gpu_count_reasons |= verdict.gpu_count_reasons

    def picked(self, numbers: np.ndarray, ids: bool = True) -> Chunk:
        """A chunk of legal combinations (a Verdict's, or a slice of them) with their ids,
        planned without judging them again."""
        index = self._index(numbers)
        columns, _ = self._columns(index)
        chunk = Chunk(numbers, np.arange(len(numbers)), columns,
                      self.model_table[_mixed(index, self.model_axes, self.sizes)],
                      self.hardware_table[_mixed(index, self.hardware_axes, self.sizes)])
        if ids:
            chunk.ids = self._id_texts.ids(chunk)
        return chunk

    def _index(self, numbers: np.ndarray) -> list:
        """Each knob's value index per combination number."""
        return [(numbers // stride) % size if size > 1 else np.zeros(len(numbers), np.int64)
                for stride, size in zip(self.strides, self.sizes)]

    def _locality(self, chunk: Chunk, rows: np.ndarray) -> list:
        """Sort keys, least significant first, putting rows that share core's memos side by side
        (plan.locality_key's order: specs, micro-batch, cp, tp, sp, ep)."""
        return [*(chunk.columns[name][0][rows] for name in ("ep", "sp", "tp", "cp", "micro_batch")),
                chunk.hardware_codes[rows], chunk.model_codes[rows]]

    def chunk(self, start: int, stop: int, ids: bool = False, rejections: "Rejections | None" = None) -> Chunk:
        """Combinations [start, stop) judged: their rejections go to `rejections` (the grid's own
        unless given)."""
        numbers = np.arange(start, stop, dtype=np.int64)
        index = self._index(numbers)
        columns, gpu_count_broken = self._columns(index)
        model_codes = self.model_table[_mixed(index, self.model_axes, self.sizes)]
        hardware_codes = self.hardware_table[_mixed(index, self.hardware_axes, self.sizes)]
        failed = layout_failures(columns, self.models, model_codes, self.hardware, hardware_codes,
                                 self.layout_workload, self.study.gpus)
        failed = np.where(failed > 0, failed + GPU_COUNT_RULE, 0).astype(np.int8)
        failed[gpu_count_broken] = GPU_COUNT_RULE
        codes = {**{name: c for name, (c, _) in columns.items()}, "model": model_codes, "hardware": hardware_codes}
        sizes = {**{name: len(values) for name, (_, values) in columns.items()}, "model": len(self.models),
                 "hardware": len(self.hardware)}
        for axis in self.serve_axes:
            codes[f"knob:{self.space.knobs[axis].name}"], sizes[f"knob:{self.space.knobs[axis].name}"] = \
                index[axis], self.sizes[axis]
        if self.study.mode == "serve":
            self._serve_failures(start, failed, codes, sizes)
        self._reject(start, failed, codes, sizes, self.rejections if rejections is None else rejections)
        legal = np.flatnonzero(failed == 0)
        chunk = Chunk(numbers, legal, columns, model_codes, hardware_codes)
        if ids:
            chunk.ids = self._id_texts.ids(chunk)
        return chunk

    def _columns(self, index: list) -> tuple:
        """(codes, values) per Parallelism field as Space.resolve fills them, and where dp = auto
        meets a tp*pp*cp that does not divide the GPU count."""
        columns = {}
        for name in PARALLELISM_FIELDS:
            knob = self.space.knobs[self.position[name]]
            values = knob.values
            if name == "placement":
                values = tuple(tuple(v.split(",")) for v in values)
            columns[name] = (index[self.position[name]], values)
        tp, pp, cp = (np.asarray(columns[n][1])[columns[n][0]] for n in ("tp", "pp", "cp"))
        broken = np.zeros(len(tp), bool)
        if columns["dp"][1] == (AUTO,):
            inner = tp * pp * cp
            broken = self.study.gpus % inner != 0
            dp_values, dp_codes = np.unique(np.maximum(1, self.study.gpus // inner), return_inverse=True)
            columns["dp"] = (dp_codes.reshape(-1), tuple(dp_values.tolist()))
        if columns["sp"][1] == (AUTO,):
            columns["sp"] = (((tp > 1) & (self.study.mode == "train")).astype(np.int64), (False, True))
        if self.study.mode == "serve" and columns["etp"][1] == (0,):
            ep = np.asarray(columns["ep"][1])[columns["ep"][0]]
            etp_values, etp_codes = np.unique(np.where(ep > 1, serving_etp(tp, ep), 0), return_inverse=True)
            columns["etp"] = (etp_codes.reshape(-1), tuple(etp_values.tolist()))
        if columns["overlap_param_gather"][1] == (AUTO,):
            zero = np.asarray(columns["zero"][1])[columns["zero"][0]]
            columns["overlap_param_gather"] = (gathers_parameters(zero).astype(np.int64), (False, True))
        return columns, broken

    def _serve_failures(self, start: int, failed: np.ndarray, codes: dict, sizes: dict) -> None:
        """Mark SERVE_RULE on the combinations check_layout's masks pass and the per-point path
        refuses, asking it once per group sharing SERVE_INPUTS and the swept layout knobs."""
        rows = np.flatnonzero(failed == 0)
        if not len(rows):
            return
        key = _group_key([codes[name][rows] for name in self.serve_inputs],
                         [sizes[name] for name in self.serve_inputs], len(rows))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        refused = np.array([isinstance(self.planner.point(self.choice(start + int(rows[i]))), str) for i in first])
        failed[rows[refused[inverse.reshape(-1)]]] = SERVE_RULE

    def _reject(self, start: int, failed: np.ndarray, codes: dict, sizes: dict, rejections: "Rejections") -> None:
        """Group the chunk's rejections by what their reason's text depends on; the text of
        each group from the per-point path."""
        for rule in np.unique(failed[failed > 0]).tolist():
            rows = np.flatnonzero(failed == rule)
            inputs = (GPU_COUNT_INPUTS if rule == GPU_COUNT_RULE else self.serve_inputs if rule == SERVE_RULE
                      else REASON_INPUTS[rule - GPU_COUNT_RULE - 1])
            _, first, counts = np.unique(_group_key([codes[name][rows] for name in inputs],
                                                    [sizes[name] for name in inputs], len(rows)),
                                         return_index=True, return_counts=True)
            for row, count in zip(rows[first].tolist(), counts.tolist()):
                reason = self.planner.point(self.choice(start + row))
                if not isinstance(reason, str):
                    raise RuntimeError(f"core.layout_failures rule {rule} rejects combination {start + row}, "
                                       "which check_layout accepts: the two rule books differ")
                rejections.add(reason, count, start + row)

    def points(self, chunk: Chunk) -> list:
        """The chunk's legal combinations as Points (needs the chunk's ids)."""
        knobs = self.space.knobs
        field_at = {name: i for i, name in enumerate(PARALLELISM_FIELDS)}
        out = []
        for row, point_id in zip(chunk.legal.tolist(), chunk.ids):
            par = tuple(values[codes[row]] for codes, values in (chunk.columns[n] for n in PARALLELISM_FIELDS))
            values = tuple(par[field_at[k.name]] if k.name in field_at else k.values[chunk.numbers[row] // stride % size]
                           for k, stride, size in zip(knobs, self.strides, self.sizes))
            values = tuple(",".join(v) if k.name == "placement" else v for k, v in zip(knobs, values))
            out.append(Point(point_id, values, par, int(chunk.model_codes[row]), int(chunk.hardware_codes[row])))
        return out

    def block(self, chunk: Chunk, skip: DoneIds | None = None) -> "PointBlock":
        """The chunk's legal combinations but those in `skip` (needs the chunk's ids) as arrays,
        in dispatch order (plan.locality_key's: points sharing core's memos side by side)."""
        keep = np.flatnonzero(~skip.holds(chunk.ids)) if skip is not None and len(skip) else np.arange(len(chunk.ids))
        rows = chunk.legal[keep]
        ids = np.array(chunk.ids, dtype=str)[keep]
        order = np.lexsort((ids, *self._locality(chunk, rows)))
        rows, ids = rows[order], ids[order]
        field_at = {name: i for i, name in enumerate(PARALLELISM_FIELDS)}
        knobs = tuple(field_at[k.name] if k.name in field_at else
                      (chunk.numbers[rows] // stride % size, k.values)
                      for k, stride, size in zip(self.space.knobs, self.strides, self.sizes))
        return PointBlock(ids.tolist(), tuple((chunk.columns[n][0][rows], chunk.columns[n][1]) for n in PARALLELISM_FIELDS),
                          knobs, chunk.model_codes[rows], chunk.hardware_codes[rows])

    def reasons(self) -> tuple:
        """(pattern counts, pattern examples) of the chunks planned so far."""
        return self.rejections.ordered(), self.rejections.examples()

    def refuse_empty(self) -> None:
        """A space without a legal point is a study error, worded as the per-point path words it."""
        if self.legal:
            return
        counts = self.rejections.ordered()
        common = counts.most_common(1)[0][0] if counts else "empty space"
        reason = self.rejections.first[common][1] if counts else common
        combinations = f"{self.total} combination{'s' if self.total != 1 else ''}"
        if reason in self.planner.gpu_count_reasons:  # most combinations do not divide the GPU count
            raise SpecError(self.study.path, "gpus", self.study.gpus,
                            f"no legal layout in the space ({combinations}; most common reason: {reason})")
        raise SpecError(self.study.path, "space", combinations,
                        f"no legal layout on gpus = {self.study.gpus}; most common reason: {reason}")


def grid_size(space) -> int:
    """Combinations in the grid of the space's listed values (a range lists none)."""
    return math.prod(len(k.values) for k in space.knobs)


def _group_key(codes: list, sizes: list, rows: int) -> np.ndarray:
    """One integer per row for its tuple of codes (the codes themselves, stacked, when their
    combinations would overflow 64 bits)."""
    if math.prod(sizes) >= 1 << 62:
        return np.unique(np.stack(codes), axis=1, return_inverse=True)[1].reshape(-1)
    key = np.zeros(rows, np.int64)
    for column, size in zip(codes, sizes):
        key = key * size + column
    return key


def _mixed(index: list, axes: list, sizes: list) -> np.ndarray:
    """The combination number of the `axes` knobs' indices alone (0 without such knobs)."""
    code = np.zeros(len(index[0]), np.int64)
    for axis in axes:
        code = code * sizes[axis] + index[axis]
    return code


class _IdTexts:
    """Point ids a chunk at a time: `plan.point_id`'s JSON from per-value fragments."""
    SENTINEL = "\x01parallelism\x01"

    def __init__(self, grid: GridPlanner):
        study = grid.study
        self.grid = grid
        digests = grid.planner._digest
        self.model_digests = [digests(spec) for spec in grid.models]
        self.hardware_digests = [digests(spec) for spec in grid.hardware]
        knobs = grid.space.knobs
        # a serving study's swept load: one JSON tail (its workload comes after the parallelism) per combination
        self.workload_axes = grid.space.workload_axes
        tails = []
        for combo in np.ndindex(*(grid.sizes[i] for i in self.workload_axes)):
            workload = study.workload_for(tuple((knobs[i].name, knobs[i].values[j])
                                                for i, j in zip(self.workload_axes, combo)))
            whole = _json({"model": _MODEL, "hardware": _HARDWARE, "gpus": study.gpus, "workload": asdict(workload),
                           "parallelism": self.SENTINEL, "backend": study.backend, "model_version": MODEL_VERSION})
            self.head, tail = whole.split(_json(self.SENTINEL))
            tails.append(tail)
        self.tails = np.array(tails, dtype=object)
        defaults = {f.name: f.default for f in fields(Parallelism) if f.default is not MISSING}
        self.fields = sorted(defaults)
        self.defaults = defaults
        self.heads = {}

    def ids(self, chunk: Chunk) -> list:
        legal = chunk.legal
        pairs = chunk.model_codes[legal] * len(self.hardware_digests) + chunk.hardware_codes[legal]
        unique, inverse = np.unique(pairs, return_inverse=True)
        columns = [np.array([self._head(int(p)) + "{" for p in unique], dtype=object)[inverse.reshape(-1)]]
        table, codes, constant = [""], np.zeros(len(legal), np.int64), ""
        for i, name in enumerate(self.fields):
            field_codes, values = chunk.columns.get(name, (None, (self.defaults[name],)))
            fragments = [f'{"," if i else ""}"{name}":{_json(value)}' for value in values]
            if len(fragments) == 1:
                constant += fragments[0]
                continue
            if len(table) * len(fragments) > FRAGMENT_TABLE:  # one column per table of joint fragments
                columns.append(np.array(table, dtype=object)[codes])
                table, codes = [""], np.zeros(len(legal), np.int64)
            table = [before + constant + after for before in table for after in fragments]
            codes = codes * len(fragments) + field_codes[legal]
            constant = ""
        if not self.workload_axes:
            columns.append(np.array([text + constant + "}" + self.tails[0] for text in table], dtype=object)[codes])
        else:
            columns.append(np.array([text + constant + "}" for text in table], dtype=object)[codes])
            numbers, tail = chunk.numbers[legal], np.zeros(len(legal), np.int64)
            for axis in self.workload_axes:
                tail = tail * self.grid.sizes[axis] + (numbers // self.grid.strides[axis]) % self.grid.sizes[axis]
            columns.append(self.tails[tail])
        sha256 = hashlib.sha256
        return [sha256("".join(parts).encode()).hexdigest()[:16] for parts in zip(*(c.tolist() for c in columns))]

    def _head(self, pair: int) -> str:
        if pair not in self.heads:
            model, hardware = divmod(pair, len(self.hardware_digests))
            self.heads[pair] = self.head.replace(_MODEL, self.model_digests[model]).replace(
                _HARDWARE, self.hardware_digests[hardware])
        return self.heads[pair]


_MODEL, _HARDWARE = "@model-digest@", "@hardware-digest@"


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def check_faulted_network(study: Study) -> None:
    """A replaying backend's network with the hardware's faults must still connect every GPU."""
    if study.backend != "analytical" and study.hardware_spec().faults:
        try:
            astra_network(study.hardware_spec(), study.gpus)
        except SpecError as err:
            raise SpecError(study.path, f"hardware ({study.hardware}): faults", err.value, err.allowed) from None


def plan_study(study: Study, points: bool = True, progress=None) -> Plan:
    """Every legal point of the grid (only their count with `points=False`); a space with none
    is a study error. `progress(combinations)` is called after each chunk."""
    check_faulted_network(study)
    grid = GridPlanner(study)
    found = []
    for chunk in grid.chunks(ids=points):
        if points:
            found += grid.points(chunk)
        if progress:
            progress(len(chunk.numbers))
    grid.refuse_empty()
    illegal, examples = grid.reasons()
    return Plan(tuple(sorted(found, key=lambda p: p.point_id)), grid.models, grid.hardware, illegal, examples,
                grid.total, grid.legal)
