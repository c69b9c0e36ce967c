"""A replay's arrays written straight to Chakra `.et` files, with no per-node objects.

Each distinct node content (all fields after the dependencies) is laid out with numpy as a row of
byte slots (a field's key and value, left-aligned, each slot as wide as its widest value); the
bytes a row leaves unused are dropped when the rows are joined. The compiled writer then puts
each node's id, kind and dependencies in front of its content. The bytes are the ones protobuf
writes for the same node (`trace.to_proto`): fields in number order, zero scalars left out, an
attribute's oneof value always written."""
from pathlib import Path

import numpy as np
from astra_backend import ALGORITHMS, NODE_KINDS

from . import _wire
from .schema import COLLECTIVE_TYPES, NODE_TYPES, AttributeProto, Node
from .trace import COLLECTIVE_OF, EXACT_DURATION_ATTR, metadata_record, remove_rank_files, varint
from .wire import distinct

VARINT, LENGTH = 0, 2
COMPUTE, SEND, RECV = NODE_KINDS["compute"], NODE_KINDS["send"], NODE_KINDS["recv"]
IDLE = max(NODE_KINDS.values()) + 1  # the zero-time op of an NPU the replay gave nothing
NODES_PER_WRITE = 1 << 18  # nodes laid out at a time: bounds the memory a file takes to write
_KIND_NAME = {code: name for name, code in NODE_KINDS.items()}
_ALGORITHM_NAME = {code: name for name, code in ALGORITHMS.items()}


def roofline_cost(duration_s, peak_flops: float, memory_bps: float) -> tuple:
    """(num_ops, tensor_size) arrays that ASTRA-sim's roofline turns back into `duration_s`: the
    op's time as FLOPs at peak, over just few enough bytes to sit at the ridge (compute-bound).
    ASTRA-sim truncates to whole nanoseconds and cannot take a zero-time event, so the time is
    rounded to the nearest nanosecond, at least one."""
    num_ops = np.rint((np.maximum(duration_s, 1e-9) + 0.5e-9) * peak_flops)
    return num_ops.astype(np.int64), np.maximum(1, (num_ops * memory_bps / peak_flops).astype(np.int64))


def comm_size(kind, bytes_, group, group_sizes) -> np.ndarray:
    """Chakra's comm_size of communication nodes: whole bytes, an all-gather's as each rank's
    input (the gathered total over the group size), as the feeder reads it."""
    gather = kind == NODE_KINDS["all_gather"]
    per_rank = np.where(gather, bytes_ / np.where(gather, group_sizes[group], 1), bytes_)
    return np.rint(per_rank).astype(np.int64)


def varints(values) -> tuple:
    """(an (n, w) uint8 matrix holding each value's varint left-aligned, each one's width in bytes).
    A negative value takes ten bytes, as protobuf writes a negative int32 or int64."""
    values = np.asarray(values).astype(np.int64).astype(np.uint64)
    width = 1
    while width < 10 and (values >> np.uint64(7 * width)).any():
        width += 1
    widths = np.ones(values.size, np.int64)
    out = np.empty((values.size, width), np.uint8)
    for byte in range(width):
        group = values >> np.uint64(7 * byte)
        out[:, byte] = group & np.uint64(0x7F)
        if byte + 1 < width:
            more = group > np.uint64(0x7F)
            out[:, byte] |= more.astype(np.uint8) << 7
            widths += more
    return out, widths


def _key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def _tiled(data: bytes, rows: int) -> np.ndarray:
    return np.broadcast_to(np.frombuffer(data, np.uint8), (rows, len(data)))


def _keyed(key: bytes, values) -> tuple:
    """A slot of `key` then each value's varint."""
    data, widths = varints(values)
    return np.hstack([_tiled(key, data.shape[0]), data]), widths + len(key)


def _choice(options: list, index) -> tuple:
    """A slot holding options[index] (bytes) in each row."""
    sizes = np.array([len(o) for o in options], np.int64)
    table = np.zeros((len(options), int(sizes.max(initial=0))), np.uint8)
    for row, option in enumerate(options):
        table[row, :len(option)] = np.frombuffer(option, np.uint8)
    return table[index], sizes[index]


def _attr(message) -> bytes:
    """One Node.attr field: key, length and the AttributeProto."""
    data = message.SerializeToString()
    return _key(10, LENGTH) + varint(len(data)) + data


def _varint_attr(name: str, number: int, values) -> tuple:
    """A Node.attr slot: an AttributeProto named `name` whose varint field `number` holds each value
    (every such attribute is under 128 bytes: its length takes one byte)."""
    head = AttributeProto(name=name).SerializeToString() + _key(number, VARINT)
    data, widths = varints(values)
    rows, size = data.shape[0], len(head) + widths
    return np.hstack([_tiled(_key(10, LENGTH), rows), size[:, None].astype(np.uint8), _tiled(head, rows), data]), size + 2


def _double_attr(name: str, values) -> tuple:
    """A Node.attr slot of an AttributeProto named `name` holding each value as double_val."""
    head = _attr(AttributeProto(name=name, double_val=1.0))[:-8]
    data = np.ascontiguousarray(values, "<f8").view(np.uint8).reshape(-1, 8)
    return np.hstack([_tiled(head, data.shape[0]), data]), len(head) + 8


_IS_CPU_OP = _attr(AttributeProto(name="is_cpu_op", bool_val=False))
_COMM_TYPE = np.array([COLLECTIVE_TYPES[COLLECTIVE_OF[_KIND_NAME[k]]] if _KIND_NAME.get(k) in COLLECTIVE_OF else 0
                       for k in range(IDLE + 1)])


def _head(code: int) -> bytes:
    """A kind's name and type fields."""
    chakra = {COMPUTE: "COMP_NODE", IDLE: "COMP_NODE", SEND: "COMM_SEND_NODE", RECV: "COMM_RECV_NODE"}
    name = "idle" if code == IDLE else _KIND_NAME[code]
    return Node(name=name, type=NODE_TYPES[chakra.get(code, "COMM_COLL_NODE")]).SerializeToString()


_HEADS = [_head(code) for code in range(IDLE + 1)]
_HEAD_TABLE = np.frombuffer(b"".join(_HEADS), np.uint8)
_HEAD_OFFSETS = np.cumsum([0] + [len(head) for head in _HEADS], dtype=np.int64)


class _Rows:
    """Records laid out as rows of slots (see the module's docstring)."""

    def __init__(self, count: int, slots: list):
        width = sum(data.shape[1] for data, _ in slots)
        self.cells = np.empty((count, width), np.uint8)  # every column is written by a slot
        self.used = np.empty((count, width), bool)
        self.size = np.zeros(count, np.int64)
        col = 0
        for data, widths in slots:
            end = col + data.shape[1]
            self.cells[:, col:end] = data
            np.less(np.arange(data.shape[1]), np.reshape(widths, (-1, 1)), out=self.used[:, col:end])
            self.size += widths
            col = end

    def compact(self) -> tuple:
        """(each row's bytes left-aligned in a matrix, each row's length)."""
        table = np.zeros((self.size.size, int(self.size.max(initial=0))), np.uint8)
        at = np.cumsum(self.used, axis=1) - 1
        table[np.nonzero(self.used)[0], at[self.used]] = self.cells[self.used]
        return table, self.size


def _content(rank: int, nodes: dict, costs: tuple, group_sizes) -> tuple:
    """(the distinct contents, the fields after the dependencies, as a matrix of left-aligned
    rows; each one's length; each node's row in it). Nodes of one kind share a layout of fields,
    and a trace repeats the same content (layer after layer) under other ids and dependencies."""
    kind = nodes["kind"]

    def compute(mine):
        duration_s = nodes["duration_s"][mine]
        micros = np.rint(duration_s * 1e6).astype(np.int64)
        data, widths = _keyed(_key(7, VARINT), micros)
        num_ops, tensor_size = roofline_cost(duration_s, *costs)
        return [(data, widths * (micros != 0)), (_tiled(_IS_CPU_OP, mine.size), len(_IS_CPU_OP)),
                _varint_attr("num_ops", 9, num_ops), _varint_attr("tensor_size", 13, tensor_size),
                _double_attr(EXACT_DURATION_ATTR, duration_s)]

    def p2p(mine):
        send, peer = kind[mine] == SEND, nodes["peer"][mine]
        return [(_tiled(_IS_CPU_OP, mine.size), len(_IS_CPU_OP)),
                _varint_attr("comm_src", 7, np.where(send, rank, peer)),
                _varint_attr("comm_dst", 7, np.where(send, peer, rank)),
                _varint_attr("comm_tag", 7, nodes["tag"][mine]),
                _varint_attr("comm_size", 9, np.rint(nodes["bytes_"][mine]))]

    def collective(mine):
        kinds, group = kind[mine], nodes["group"][mine]
        used_groups, group_index = np.unique(group, return_inverse=True)
        algorithms, algorithm_index = np.unique(nodes["algorithm"][mine], return_inverse=True)
        return [(_tiled(_IS_CPU_OP, mine.size), len(_IS_CPU_OP)),
                _varint_attr("comm_type", 9, _COMM_TYPE[kinds]),
                _varint_attr("comm_size", 9, comm_size(kinds, nodes["bytes_"][mine], group, group_sizes)),
                _choice([_attr(AttributeProto(name="pg_name", string_val=str(g + 1))) for g in used_groups],
                        group_index),
                _choice([_attr(AttributeProto(name="comm_algorithm", string_val=_ALGORITHM_NAME[a]))
                         for a in algorithms], algorithm_index)]

    layouts = ((compute, (kind == COMPUTE) | (kind == IDLE), ("kind", "duration_s")),
               (p2p, (kind == SEND) | (kind == RECV), ("kind", "peer", "tag", "bytes_")),
               (collective, (kind > RECV) & (kind != IDLE), ("kind", "group", "algorithm", "bytes_")))
    tables, row, count = [], np.zeros(kind.size, np.int64), 0
    for slots, mask, keys in layouts:
        mine = np.flatnonzero(mask)
        if mine.size:
            first, inverse = distinct(*(nodes[key][mine] for key in keys))
            shown = mine[first]
            tables.append(_Rows(shown.size, slots(shown)).compact())
            row[mine] = count + inverse
            count += shown.size
    width = max(table.shape[1] for table, _ in tables)
    table = np.vstack([np.pad(t, ((0, 0), (0, width - t.shape[1]))) for t, _ in tables])
    return table, np.concatenate([lengths for _, lengths in tables]), row


def _node_bytes(rank: int, nodes: dict, costs: tuple, group_sizes) -> bytes:
    """The length-prefixed records of `nodes` (arrays of one rank's nodes, in order): id, the kind's
    name and type, dependencies, then the content, laid out by the compiled writer."""
    table, lengths, row = _content(rank, nodes, costs, group_sizes)
    return _wire.assemble(np.ascontiguousarray(nodes["id"], np.int64), np.ascontiguousarray(nodes["kind"], np.int64),
                          _HEAD_TABLE, _HEAD_OFFSETS, np.ascontiguousarray(nodes["dep_counts"], np.int64),
                          np.ascontiguousarray(nodes["deps"], np.int64), np.ascontiguousarray(table, np.uint8),
                          np.ascontiguousarray(lengths, np.int64), np.ascontiguousarray(row, np.int64))


def write_rank_files(directory, prefix: str, trace, group_sizes, costs: tuple, npus: int, metadata: dict) -> list:
    """`<directory>/<prefix>.<rank>.et` for NPUs 0..npus-1 from a replay Trace, each node's id its
    index in its rank's file; an NPU without nodes gets one zero-time op (ASTRA-sim's feeder stops on a
    file without nodes). `costs`: (peak FLOP/s, memory bytes/s) of the compute roofline. Files of
    the same prefix an earlier run left are removed first. Returns the paths."""
    directory = Path(directory)
    remove_rank_files(directory, prefix)
    rank = np.asarray(trace.rank)
    order = np.argsort(rank, kind="stable")
    counts = np.bincount(rank, minlength=npus)
    firsts = np.cumsum(counts) - counts
    local = np.empty(order.size, np.int64)
    local[order] = np.arange(order.size) - np.repeat(firsts, counts)
    dep_offsets, deps = np.asarray(trace.dep_offsets), np.asarray(trace.deps)
    columns = {name: np.asarray(getattr(trace, name)) for name in ("kind", "duration_s", "bytes_", "group", "peer", "tag",
                                                                   "algorithm")}
    idle = {"kind": np.array([IDLE]), "duration_s": np.zeros(1), "id": np.zeros(1, np.int64),
            "deps": np.zeros(0, np.int64), "dep_counts": np.zeros(1, np.int64)}
    paths = []
    for npu in range(npus):
        mine = order[firsts[npu]:firsts[npu] + counts[npu]]
        path = directory / f"{prefix}.{npu}.et"
        temp = path.with_name(path.name + ".tmp")
        with open(temp, "wb") as handle:
            handle.write(metadata_record(metadata, max(1, mine.size)))
            if not mine.size:
                handle.write(_node_bytes(npu, idle, costs, group_sizes))
            for start in range(0, mine.size, NODES_PER_WRITE):
                part = mine[start:start + NODES_PER_WRITE]
                first, dep_counts = dep_offsets[part], dep_offsets[part + 1] - dep_offsets[part]
                ends = np.cumsum(dep_counts)
                awaited = deps[np.repeat(first - (ends - dep_counts), dep_counts) + np.arange(ends[-1] if ends.size else 0)]
                nodes = {name: column[part] for name, column in columns.items()}
                nodes.update(id=local[part], deps=local[awaited], dep_counts=dep_counts)
                handle.write(_node_bytes(npu, nodes, costs, group_sizes))
        temp.replace(path)
        paths.append(path)
    return paths
