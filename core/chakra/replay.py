"""Any Chakra ET set (ours, ASTRA-sim's microbenchmark generators, converted PyTorch traces)
replayed on the compiled network simulator: files -> astra_backend.Trace -> per-rank end
times, exposed communication and the busiest links."""
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from astra_backend import ALGORITHMS, NODE_KINDS, Trace

from .bundle import ASTRA_SIM_ALGORITHM, SYSTEM_KEYS
from .trace import UnsupportedNode, from_proto, parse_record, read_protos
from .schema import Node
from .wire import node_records, split_node
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


def load_system_algorithms(path) -> dict:
    """Our algorithm per collective from an ASTRA-sim system.json (first dimension's entry)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), "system", "(file)", f"must be readable JSON ({exc})") from None
    ours = {v: k for k, v in ASTRA_SIM_ALGORITHM.items()}
    out = {}
    for collective, key in SYSTEM_KEYS.items():
        names = raw.get(key) if isinstance(raw, dict) else None
        if names is None:
            continue
        name = names[0] if isinstance(names, list) and names else names
        if name not in ours:
            raise SpecError(str(path), key, name, f"one of {', '.join(ours)}")
        out[collective] = ours[name]
    return out


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
    all_rows, dep_lists = [], []
    for rank, path in enumerate(files):
        first = len(all_rows)
        rows, ids = _rank_rows(path, rank, ranks, comm_groups, algorithms, group_index, group_members)
        all_rows += rows
        index_of = {node_id: first + i for i, (node_id, _) in enumerate(ids)}
        for node_id, deps in ids:
            try:
                dep_lists.append([index_of[d] for d in deps])
            except KeyError as exc:
                name = next(p.name for p in read_protos(path)[1] if p.id == node_id)
                raise SpecError(str(path), f"node {node_id} '{name}'", f"dependency {exc.args[0]}",
                                "dependencies must name nodes of the same file") from None
    counts = np.array([len(d) for d in dep_lists], np.int64)
    dep_offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=dep_offsets[1:])
    deps = np.fromiter((d for ds in dep_lists for d in ds), np.int32, int(dep_offsets[-1]))
    group_offsets = np.zeros(len(group_members) + 1, np.int64)
    np.cumsum([len(m) for m in group_members], out=group_offsets[1:])
    group_npus = np.fromiter((r for m in group_members for r in m), np.int32, int(group_offsets[-1]))
    arrays = {name: np.array(values) for name, values in zip(COLUMNS, zip(*all_rows))}
    trace = Trace(dep_offsets=dep_offsets, deps=deps, group_offsets=group_offsets, group_npus=group_npus, **arrays)
    return ChakraSet(trace, ranks, arrays["kind"] != NODE_KINDS["compute"])


def _rank_rows(path, rank, ranks, comm_groups, algorithms, group_index, group_members) -> tuple:
    """([row tuple per node], [(node id, dependency ids) per node]) of one rank's file. Protobuf
    parses each distinct node content (all but id, name and dependencies) once per file."""
    _, records = node_records(path)
    rows, ids, seen = [], [], {}
    for index, record in enumerate(records, 1):
        try:
            node_id, node_type, deps, rest = split_node(record)
        except IndexError:  # a field runs past the record's end: protobuf names what is wrong
            parse_record(path, Node, record, index)
            raise
        row = seen.get((node_type, rest))
        if row is None:
            proto = parse_record(path, Node, record, index)
            try:
                node = from_proto(proto)
            except UnsupportedNode as exc:
                raise SpecError(str(path), f"node {exc.node_id} '{exc.name}'", "", exc.what) from None
            fields = _row(node, rank, ranks, path, comm_groups, algorithms, group_index, group_members)
            row = tuple(fields[name] for name in COLUMNS)
            if (proto.id, node.deps) == (node_id, deps):  # written in field order: the rest is the content
                seen[(node_type, rest)] = row
            node_id, deps = proto.id, node.deps
        rows.append(row)
        ids.append((node_id, deps))
    return rows, ids


def _row(node, rank, ranks, path, comm_groups, algorithms, group_index, group_members) -> dict:
    row = {"rank": rank, "duration_s": 0.0, "bytes_": 0.0, "group": 0, "peer": 0, "tag": 0, "algorithm": 0}
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
    return row


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
    """Per rank: the time its communication pushed its finish out, nodes taken by end time,
    each charged with what it ends past every earlier node of the rank."""
    order = np.lexsort((node_end, node_rank))
    ends, owners = node_end[order], node_rank[order]
    previous = np.concatenate(([0.0], ends[:-1]))
    previous[np.concatenate(([True], owners[1:] != owners[:-1]))] = 0.0
    return np.bincount(owners, weights=(ends - previous) * is_comm[order], minlength=ranks)
