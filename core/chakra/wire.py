"""Chakra `.et` files at the wire level, in bulk: each node's id, type and dependencies read
straight from its bytes (compiled: core/chakra/src/wire.cpp), the rest of it (its content) left as
bytes. Training traces repeat the same content (layer after layer) under new ids, so a reader
reads each distinct content once, compiled too where its fields are plain (`node_fields`)."""
from dataclasses import dataclass

import numpy as np

from . import _wire


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
    appearance; each record's distinct one, numbered in that order)."""
    return _wire.contents(data, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64),
                          np.ascontiguousarray(types, np.uint64))


# node_fields' status of a record: read plainly; left to protobuf (a field or value type it does not
# read, bytes that may not parse, text that is not ASCII); a head field (1..5) again in its content
PLAIN, PROTOBUF, HEAD_IN_CONTENT = _wire.PLAIN, _wire.PROTOBUF, _wire.HEAD_IN_CONTENT


def node_fields(data: bytes, starts: np.ndarray, ends: np.ndarray, content: np.ndarray, records: np.ndarray) -> list:
    """Per record `records[k]` of the node records `starts`..`ends` (contents from `content`):
    (status, name, duration_micros, {attribute name: value}), read as protobuf and
    trace.node_attrs read them where the status is PLAIN (then the only one to use them)."""
    return _wire.fields(data, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64),
                        np.ascontiguousarray(content, np.int64), np.ascontiguousarray(records, np.int64))


def node_heads(data: bytes, starts: np.ndarray, ends: np.ndarray) -> NodeHeads:
    """The heads of the node records at `starts`..`ends` of `data` (see NodeHeads)."""
    return NodeHeads(*_wire.heads(data, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64)))
