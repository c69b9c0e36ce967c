"""Chakra `.et` files at the wire level, in bulk: each node's id, type and dependencies read
straight from its bytes with numpy, the rest of it (its content) left as bytes. Training traces
repeat the same content (layer after layer) under new ids, so a reader parses each distinct
content once with protobuf."""
from dataclasses import dataclass

import numpy as np


ID, NAME, TYPE, CTRL_DEPS, DATA_DEPS = 1, 2, 3, 4, 5
VARINT, LENGTH = 0, 2
MAX_VARINT_BYTES = 10
MAX_CONTENT_BYTES = 512  # longer node contents are told apart by a dict of their bytes


@dataclass(frozen=True)
class NodeHeads:
    """Per node record: id, type, dependencies (data_deps then ctrl_deps: `dep_counts` per node,
    `deps` one after the other) and where its content starts. `regular` is False when a record
    does not open with fields 1..5 in number order, packed and whole (protobuf writers' order):
    the caller then parses every record with protobuf instead."""
    ids: np.ndarray
    types: np.ndarray
    dep_counts: np.ndarray
    deps: np.ndarray
    content: np.ndarray
    regular: bool


def distinct(*columns) -> tuple:
    """(index of the first of each distinct row of `columns`, in order of first appearance; each
    row's distinct row, numbered in that order)."""
    order = np.lexsort(columns)
    new = np.zeros(order.size, bool)
    new[:1] = True
    for column in columns:
        ordered = column[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    group = np.empty(order.size, np.int64)
    group[order] = np.cumsum(new) - 1
    first = order[new]  # lexsort is stable: the first of each distinct row
    by_appearance = np.argsort(first, kind="stable")
    renumber = np.empty(first.size, np.int64)
    renumber[by_appearance] = np.arange(first.size)
    return first[by_appearance], renumber[group]


def contents(data: bytes, starts: np.ndarray, ends: np.ndarray, types: np.ndarray) -> tuple:
    """(index of the first record of each distinct (type, bytes `starts`..`ends`), in order of
    appearance; each record's distinct one). Records are compared as padded rows of 64-bit words,
    hashed, and the hash's grouping checked word for word (a collision falls back to a dict)."""
    sizes = ends - starts
    width = max(8, -(-int(sizes.max(initial=0)) // 8) * 8)
    if width > MAX_CONTENT_BYTES or not sizes.size:
        return _contents_by_dict(data, starts, ends, types)
    padded = np.concatenate([np.frombuffer(data, np.uint8), np.zeros(width, np.uint8)])
    rows = np.lib.stride_tricks.sliding_window_view(padded, width)[starts]
    rows[np.arange(rows.shape[1]) >= sizes[:, None]] = 0
    words = np.column_stack([sizes.astype(np.uint64), types.astype(np.uint64), rows.view(np.uint64)])
    hashes = np.zeros(sizes.size, np.uint64)
    for column in words.T:
        hashes = hashes * np.uint64(0x100000001B3) + column  # wraps modulo 2**64
    first, inverse = distinct(hashes)
    if not np.array_equal(words, words[first[inverse]]):
        return _contents_by_dict(data, starts, ends, types)
    return first, inverse


def _contents_by_dict(data: bytes, starts: np.ndarray, ends: np.ndarray, types: np.ndarray) -> tuple:
    seen = {}
    index = np.fromiter((seen.setdefault(data[a:b], len(seen)) for a, b in zip(starts.tolist(), ends.tolist())),
                        np.int64, starts.size)
    return distinct(index, types)


def _varints_at(raw: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple:
    """(values, widths, whole) of the varints starting at `pos`; `whole` is False where one runs
    to `end` (its record's end) without finishing."""
    values = np.zeros(pos.size, np.uint64)
    widths = np.zeros(pos.size, np.int64)
    done = np.zeros(pos.size, bool)
    for byte in range(MAX_VARINT_BYTES):
        at = pos + byte
        take = ~done & (at < end)
        if not take.any():
            break
        b = raw[np.minimum(at, raw.size - 1)].astype(np.uint64)
        values |= np.where(take, (b & np.uint64(0x7F)) << np.uint64(7 * byte), np.uint64(0))
        widths += take
        done |= take & (b < 0x80)
    return values, widths, done


def _packed(raw: np.ndarray, first: np.ndarray, size: np.ndarray) -> tuple:
    """(values, count per span, whole) of the varints packed in spans `first`, `size` (in order)."""
    ends = np.cumsum(size)
    index = np.repeat(first - (ends - size), size) + np.arange(int(ends[-1]) if ends.size else 0)
    data = raw[index].astype(np.uint64)
    last = data < 0x80
    before = np.concatenate(([0], np.cumsum(last)))
    counts = before[ends] - before[ends - size]
    whole = bool(np.all(last[ends[size > 0] - 1])) if data.size else True
    opens = np.flatnonzero(np.concatenate(([True], last[:-1])))
    place = np.arange(data.size) - np.repeat(opens, np.diff(np.append(opens, data.size)))
    values = np.add.reduceat((data & np.uint64(0x7F)) << (np.uint64(7) * place.astype(np.uint64)), opens) \
        if data.size else np.zeros(0, np.uint64)
    return values, counts, whole


def node_heads(data: bytes, starts: np.ndarray, ends: np.ndarray) -> NodeHeads:
    """The heads of the node records at `starts`..`ends` of `data` (see NodeHeads)."""
    raw = np.frombuffer(data, np.uint8)
    count = starts.size
    cursor = starts.copy()
    ids, types = np.zeros(count, np.uint64), np.zeros(count, np.uint64)
    spans = {field: (np.zeros(count, np.int64), np.zeros(count, np.int64)) for field in (DATA_DEPS, CTRL_DEPS)}
    regular = True
    for field, wire in ((ID, VARINT), (NAME, LENGTH), (TYPE, VARINT), (CTRL_DEPS, LENGTH), (DATA_DEPS, LENGTH)):
        has = np.flatnonzero((cursor < ends) & (raw[np.minimum(cursor, raw.size - 1)] == (field << 3 | wire)))
        if not has.size:
            continue
        value, width, whole = _varints_at(raw, cursor[has] + 1, ends[has])
        regular &= bool(whole.all())
        after = cursor[has] + 1 + width
        if field == ID:
            ids[has] = value
        elif field == TYPE:
            types[has] = value
        elif field in spans:
            spans[field][0][has], spans[field][1][has] = after, value.astype(np.int64)
        cursor[has] = after + (value.astype(np.int64) if wire == LENGTH else 0)
    regular &= bool(np.all(cursor <= ends))
    key = raw[np.minimum(cursor, raw.size - 1)]
    regular &= not np.any((cursor < ends) & (key < 0x80) & (key >> 3 <= DATA_DEPS))  # a head field further on
    if not regular:
        return NodeHeads(ids, types, np.zeros(count, np.int64), np.zeros(0, np.uint64), cursor, False)
    first = np.column_stack([spans[DATA_DEPS][0], spans[CTRL_DEPS][0]]).ravel()
    size = np.column_stack([spans[DATA_DEPS][1], spans[CTRL_DEPS][1]]).ravel()
    deps, counts, whole = _packed(raw, first, size)
    return NodeHeads(ids, types, counts.reshape(-1, 2).sum(axis=1), deps, cursor, whole)
