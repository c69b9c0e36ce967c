"""Any Chakra ET set (ours, ASTRA-sim's microbenchmark generators, converted PyTorch traces)
replayed on the compiled network simulator: files -> astra_backend.Trace -> per-rank end
times, exposed communication and the busiest links."""
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from astra_backend import ALGORITHMS, NODE_KINDS, Trace
from astra_backend.trace import NODE_DTYPES

from .trace import UnsupportedNode, from_fields, from_proto, parse_record, read_protos, record_spans
from .schema import Node
from .wire import HEAD_IN_CONTENT, PLAIN, PROTOBUF, contents, node_fields, node_heads
from core.errors import SpecError

DEFAULT_ALGORITHM = "ring"
COLUMNS = ("rank", "kind", "duration_s", "bytes_", "group", "peer", "tag", "algorithm")


def trace_files(prefix) -> list:
    """`<prefix>.0.et` ... `<prefix>.<n-1>.et`, in rank order; a gap or no file is an error."""
    prefix = Path(prefix)
    pattern = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et$")
    folder = prefix.parent if str(prefix.parent) else Path(".")
    found = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = pattern.match(path.name)
            if match:
                found[int(match.group(1))] = path
    if not found:
        raise SpecError("", "TRACE_PREFIX", str(prefix), f"no files {prefix.name}.<rank>.et in {folder}")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise SpecError("", "TRACE_PREFIX", str(prefix), f"ranks must be 0..{max(found)}; rank {missing[0]} has no file")
    return [found[r] for r in range(len(found))]


def _rank_file(path: Path, rank: int) -> Path:
    """The file of `rank` in the set `path` (`<prefix>.<rank>.et`) belongs to."""
    prefix = Path(path).name.rsplit(".", 2)[0]
    return Path(path).with_name(f"{prefix}.{rank}.et")


def load_comm_groups(path) -> dict:
    """ASTRA-sim's --comm-group-configuration JSON: {"id": [ranks...]} -> {id string: tuple of ranks}."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), "comm groups", "(file)", f"must be readable JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise SpecError(str(path), "comm groups", type(raw).__name__, 'a mapping {"1": [ranks...], ...}')
    groups = {}
    for key, ranks in raw.items():
        ok = isinstance(ranks, list) and ranks and all(isinstance(r, int) and r >= 0 for r in ranks)
        if not key.isdigit() or int(key) == 0 or not ok:
            raise SpecError(str(path), key, ranks, "keys are positive decimal ids, values non-empty lists of ranks")
        groups[str(int(key))] = tuple(ranks)
    return groups


@dataclass(frozen=True)
class ChakraSet:
    """A trace set as simulator arrays, with what the report needs to read them back."""
    trace: Trace
    ranks: int
    is_comm: np.ndarray  # per node: a send, recv or collective


def build_trace(files, comm_groups=None, algorithms=None) -> ChakraSet:
    """Reads every rank's file into one Trace. A collective's pg_name picks its group ("" or "0":
    all ranks); all-gather comm_size is each rank's input. Bad or unsupported nodes raise SpecError."""
    ranks = len(files)
    comm_groups = comm_groups or {}
    algorithms = algorithms or {}
    group_index, group_members = {}, []
    table, rows, counts, dep_counts, deps, first = [], [], [], [], [], 0
    for rank, path in enumerate(files):
        distinct, row, ids, dep_count, awaited = _rank_rows(path, rank, ranks, comm_groups, algorithms, group_index,
                                                            group_members)
        rows.append(row + len(table))
        table.extend(distinct)
        counts.append(ids.size)
        dep_counts.append(dep_count)
        deps.append((first + _local_indices(path, ids, dep_count, awaited)).astype(np.int32))
        first += ids.size
    group_offsets = np.zeros(len(group_members) + 1, np.int64)
    np.cumsum([len(m) for m in group_members], out=group_offsets[1:])
    group_npus = np.fromiter((r for m in group_members for r in m), np.int32, int(group_offsets[-1]))
    row = np.concatenate(rows)  # int64: numpy would convert narrower indices for each column it gathers
    columns = list(zip(*table)) or [()] * (len(COLUMNS) - 1)
    arrays = {name: _narrowed(values, NODE_DTYPES[name])[row] for name, values in zip(COLUMNS[1:], columns)}
    arrays["rank"] = np.repeat(np.arange(ranks, dtype=NODE_DTYPES["rank"]), counts)
    trace = Trace(dep_offsets=_offsets(dep_counts, first), deps=np.concatenate(deps), group_offsets=group_offsets,
                  group_npus=group_npus, **arrays)
    return ChakraSet(trace, ranks, arrays["kind"] != NODE_KINDS["compute"])


def _offsets(counts: list, total: int) -> np.ndarray:
    """Where each node's dependencies start (and where the last ends) from their counts, an array
    per rank, filled rank by rank: no whole-trace temporary."""
    offsets = np.zeros(total + 1, np.int64)
    node = 0
    for count in counts:
        mine = offsets[node + 1:node + 1 + count.size]
        np.cumsum(count, out=mine)
        mine += offsets[node]
        node += count.size
    return offsets


def _narrowed(values: tuple, dtype) -> np.ndarray:
    """`values` as an array of the simulator's `dtype` where they all fit it, else as numpy reads
    them (the simulator's input check then names what does not fit)."""
    column, target = np.array(values), np.dtype(dtype)
    if target.kind == "f":
        fits = column.dtype.kind in "iuf"
    else:
        fits = column.dtype.kind in "iu" and (not column.size or np.iinfo(target).min <= column.min()
                                              and column.max() <= np.iinfo(target).max)
    return column.astype(target) if fits else column


def _local_indices(path, ids: np.ndarray, counts: np.ndarray, awaited: np.ndarray) -> np.ndarray:
    """Each dependency's index in its file (the last node holding that id), or a SpecError naming
    the first node that awaits an id the file lacks."""
    if np.array_equal(ids, np.arange(ids.size)) and np.all(awaited < ids.size):  # ids are the indices
        return awaited.astype(np.int64)
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    at = np.searchsorted(ordered, awaited, side="right") - 1
    found = (at >= 0) & (ordered[np.maximum(at, 0)] == awaited)
    if not found.all():
        missing = int(np.argmin(found))
        waiter = int(np.searchsorted(np.cumsum(counts), missing, side="right"))
        node_id = int(ids[waiter])
        name = next(p.name for p in read_protos(path)[1] if p.id == node_id)
        raise SpecError(str(path), f"node {node_id} '{name}'", f"dependency {int(awaited[missing])}",
                        "dependencies must name nodes of the same file")
    return order[at]


def _rank_rows(path, rank, ranks, comm_groups, algorithms, group_index, group_members) -> tuple:
    """(distinct rows: one tuple of COLUMNS values after the rank each, each node's row in them, node
    ids, dependency count per node, awaited ids) of one rank's file. Each distinct node content (all
    but id, name and dependencies) is read once, on its first node: by the compiled reader where its
    fields are plain, else by protobuf and checked against what the wire-level reader found; a file
    whose nodes are not in field order is parsed node by node."""
    data, starts, ends = record_spans(path)
    heads = node_heads(data, starts[1:], ends[1:])
    if heads.regular:
        first, inverse = contents(data, heads.content, ends[1:], heads.types)
        table = _content_rows(path, rank, ranks, data, starts, ends, heads, first, comm_groups, algorithms,
                              group_index, group_members)
        if table is not None:
            return table, inverse, heads.ids.astype(np.int64), heads.dep_counts, heads.deps.astype(np.int64)
    rows, ids, deps = [], [], []
    for index in range(1, starts.size):
        node = _node(path, from_proto, parse_record(path, Node, data[starts[index]:ends[index]], index))
        rows.append(_row(node, rank, ranks, path, comm_groups, algorithms, group_index, group_members))
        ids.append(node.id)
        deps.append(node.deps)
    return (rows, np.arange(len(rows)), np.array(ids, np.int64), np.array([len(d) for d in deps], np.int64),
            np.array([d for ds in deps for d in ds], np.int64))


def _content_rows(path, rank, ranks, data, starts, ends, heads, first, *context) -> list | None:
    """The row of each distinct content (`first`: its first node), or None where a content holds a
    head field again (the file is then to be parsed node by node)."""
    table = []
    read = node_fields(data, starts[1:], ends[1:], heads.content, first)
    if any(status == PROTOBUF for status, *_ in read):  # where protobuf's reading is checked against the heads
        dep_firsts = np.cumsum(heads.dep_counts) - heads.dep_counts
    for index, node_id, node_type, (status, name, micros, attrs) in zip(
            first.tolist(), heads.ids[first].tolist(), heads.types[first].tolist(), read):
        if status == HEAD_IN_CONTENT:
            return None
        if status == PLAIN:
            node = _node(path, from_fields, node_id, name, node_type, micros, attrs, ())
        else:
            proto = parse_record(path, Node, data[starts[index + 1]:ends[index + 1]], index + 1)
            node = _node(path, from_proto, proto)
            awaited = heads.deps[dep_firsts[index]:dep_firsts[index] + heads.dep_counts[index]]
            if (proto.id, node.deps) != (node_id, tuple(awaited.tolist())):
                return None  # fields out of order further on: the content holds more than it seems
        table.append(_row(node, rank, ranks, path, *context))
    return table


def _node(path, read, *fields):
    """Our view of a node, `read(*fields)` (from_proto or from_fields), or a SpecError naming it."""
    try:
        return read(*fields)
    except UnsupportedNode as exc:
        raise SpecError(str(path), f"node {exc.node_id} '{exc.name}'", "", exc.what) from None


def _row(node, rank, ranks, path, comm_groups, algorithms, group_index, group_members) -> tuple:
    """The node's values of COLUMNS after the rank, or a SpecError naming what it gets wrong."""
    row = {"duration_s": 0.0, "bytes_": 0.0, "group": 0, "peer": 0, "tag": 0, "algorithm": 0}
    where = f"node {node.id} '{node.name}'"
    if node.kind == "compute":
        row.update(kind=NODE_KINDS["compute"], duration_s=node.duration_s)
    elif node.kind in ("send", "recv"):
        me, peer = (node.src, node.dst) if node.kind == "send" else (node.dst, node.src)
        side = "comm_src" if node.kind == "send" else "comm_dst"
        if me != rank:
            raise SpecError(str(path), f"{where} {side}", me, f"a {node.kind} in rank {rank}'s file must name rank {rank}")
        if not 0 <= peer < ranks or peer == rank:
            other = "comm_dst" if node.kind == "send" else "comm_src"
            beyond = f" (rank {peer} has no file in this set: is {_rank_file(path, peer).name} missing?)" if peer >= ranks else ""
            raise SpecError(str(path), f"{where} {other}", peer, f"another rank in 0..{ranks - 1}{beyond}")
        row.update(kind=NODE_KINDS[node.kind], peer=peer, tag=node.tag, bytes_=float(node.bytes_))
    else:
        members = _members(node.group, ranks, comm_groups, path, where)
        if rank not in members:
            raise SpecError(str(path), f"{where} pg_name", node.group, f"a group that holds rank {rank}")
        if members not in group_index:
            group_index[members] = len(group_members)
            group_members.append(members)
        bytes_ = node.bytes_ * (len(members) if node.collective == "all_gather" else 1)
        algorithm = node.algorithm or algorithms.get(node.collective, DEFAULT_ALGORITHM)
        if algorithm not in ALGORITHMS:
            raise SpecError(str(path), f"{where} comm_algorithm", algorithm, f"one of {', '.join(ALGORITHMS)}")
        row.update(kind=NODE_KINDS[node.collective], group=group_index[members], bytes_=float(bytes_),
                   algorithm=ALGORITHMS[algorithm], peer=members[0])
    return tuple(row[name] for name in COLUMNS[1:])


def _members(pg_name, ranks, comm_groups, path, where) -> tuple:
    if pg_name in ("", "0"):
        return tuple(range(ranks))
    if pg_name not in comm_groups:
        known = ", ".join(sorted(comm_groups, key=int)) or "none: pass --comm-groups FILE"
        raise SpecError(str(path), f"{where} pg_name", pg_name, f"a communicator id in the comm-groups file ({known})")
    members = comm_groups[pg_name]
    if max(members) >= ranks:
        raise SpecError(str(path), f"{where} pg_name", pg_name, f"its group names ranks beyond 0..{ranks - 1}")
    return members


def exposed_comm_s(node_rank: np.ndarray, node_end: np.ndarray, is_comm: np.ndarray, ranks: int) -> np.ndarray:
    """Per rank: the time its communication pushed its finish out, nodes taken by end time (in node
    order where they end together), each charged with what it ends past every earlier node of the
    rank. Rank by rank: whole-trace sort keys and orders are hundreds of MB of fresh memory."""
    if np.any(node_rank[1:] < node_rank[:-1]):  # ranks interleaved: each rank's nodes together, in node order
        by_rank = np.argsort(node_rank, kind="stable")
        node_rank, node_end, is_comm = node_rank[by_rank], node_end[by_rank], is_comm[by_rank]
    firsts = np.flatnonzero(np.concatenate(([node_rank.size > 0], node_rank[1:] != node_rank[:-1])))
    exposed = np.zeros(ranks)
    for first, last in zip(firsts.tolist(), [*firsts[1:].tolist(), node_rank.size]):
        order = np.argsort(node_end[first:last], kind="stable")
        ends = node_end[first:last][order]
        charged = np.diff(ends, prepend=0.0) * is_comm[first:last][order]
        exposed[node_rank[first]] = np.cumsum(charged)[-1]  # summed in end order, as one pass would
    return exposed
