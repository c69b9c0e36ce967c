"""Chakra `.et` files at the wire level: each node's id, type and dependencies read straight from
its bytes, the rest kept as a byte string. Training traces repeat the same node content (layer
after layer) under new ids, so a reader can parse each distinct content once with protobuf."""
from .trace import _read_varint, node_records

ID, TYPE, CTRL_DEPS, DATA_DEPS = 1, 3, 4, 5
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def _varints(data: bytes) -> list:
    if max(data, default=0) < 0x80:  # every value below 128: one byte each
        return list(data)
    out, pos = [], 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        out.append(value)
    return out


def split_node(record: bytes) -> tuple:
    """(id, type, dependencies as data_deps + ctrl_deps, rest) of one node record, reading fields
    while their numbers stay within 1..5 (the order protobuf writers use); `rest` is every byte
    from the first later field on. A node written in another order gets a `rest` that still holds
    some of these fields: callers check against a full parse before trusting it."""
    node_id = node_type = 0
    deps = {CTRL_DEPS: [], DATA_DEPS: []}
    pos = 0
    while pos < len(record):
        key = record[pos]  # fields 1..15 have one-byte keys; a longer key is a later field
        number, wire, after = key >> 3, key & 7, pos + 1
        if key & 0x80 or number > DATA_DEPS:
            break
        if wire == VARINT:
            value, after = _read_varint(record, after)
            if number == ID:
                node_id = value
            elif number == TYPE:
                node_type = value
            elif number in deps:
                deps[number].append(value)
        elif wire == LENGTH:
            size, after = _read_varint(record, after)
            if number in deps:
                deps[number] += _varints(record[after:after + size])
            after += size
        elif wire in (FIXED64, FIXED32):
            after += 8 if wire == FIXED64 else 4
        else:
            break
        pos = after
    return node_id, node_type, tuple(deps[DATA_DEPS] + deps[CTRL_DEPS]), record[pos:]
