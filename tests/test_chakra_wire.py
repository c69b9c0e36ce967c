"""The wire-level node reader: id, type and dependencies as protobuf reads them (one-byte and
multi-byte varints, packed deps), and a trace set written out of field order replays to the
same arrays as the same set in field order (the reader then falls back to a full parse)."""
import numpy as np

from core.chakra.trace import TraceNode, node_records, to_proto, varint, write_traces
from core.chakra.replay import build_trace, trace_files
from core.chakra.schema import GlobalMetadata, Node
from core.chakra.wire import node_heads

BIG = 300_000  # a three-byte varint


def _rank(rank: int) -> list:
    nodes = [TraceNode(BIG + i, f"layer{i}", "compute", duration_s=1e-3, flops=10**12, bytes_=10**6,
                       deps=(BIG + i - 1,) if i else ()) for i in range(3)]
    nodes.append(TraceNode(5, "ar", "collective", collective="all_reduce", bytes_=1 << 20,
                           algorithm="ring", deps=(BIG, BIG + 2)))
    peer = 1 - rank
    nodes.append(TraceNode(7, "send", "send", src=rank, dst=peer, tag=3, bytes_=4096, deps=(5,)))
    nodes.append(TraceNode(8, "recv", "recv", src=peer, dst=rank, tag=3, bytes_=4096, deps=(5,)))
    return nodes


def test_node_heads_read_what_protobuf_reads(tmp_path):
    protos = [to_proto(node) for node in _rank(0)]
    protos[3].ctrl_deps.extend([BIG + 1, 7])  # data_deps then ctrl_deps, as from_proto joins them
    records = [proto.SerializeToString() for proto in protos]
    data = b"".join(records)
    ends = np.cumsum([len(r) for r in records])
    heads = node_heads(data, ends - [len(r) for r in records], ends)
    assert heads.regular
    deps = np.split(heads.deps, np.cumsum(heads.dep_counts)[:-1])
    for i, proto in enumerate(protos):
        assert (heads.ids[i], heads.types[i]) == (proto.id, proto.type)
        assert tuple(deps[i]) == tuple(proto.data_deps) + tuple(proto.ctrl_deps)
        assert Node.FromString(data[heads.content[i]:ends[i]]).attr == proto.attr


def _write_reordered(folder, prefix, ranks):
    """Each node as its attributes first, then id, name, type and deps: valid protobuf, other order."""
    for rank, nodes in ranks.items():
        chunks = [GlobalMetadata(version="0.0.4").SerializeToString()]
        for node in nodes:
            proto = to_proto(node)
            tail = Node(attr=proto.attr, duration_micros=proto.duration_micros).SerializeToString()
            head = Node(id=proto.id, name=proto.name, type=proto.type, data_deps=proto.data_deps).SerializeToString()
            chunks.append(tail + head)
        (folder / f"{prefix}.{rank}.et").write_bytes(b"".join(varint(len(c)) + c for c in chunks))


def test_out_of_order_nodes_replay_like_ordered_ones(tmp_path):
    ranks = {r: _rank(r) for r in range(2)}
    write_traces(tmp_path, "ordered", ranks)
    _write_reordered(tmp_path, "reordered", ranks)
    assert len(node_records(tmp_path / "reordered.0.et")[1]) == len(ranks[0])
    ordered = build_trace(trace_files(tmp_path / "ordered")).trace
    reordered = build_trace(trace_files(tmp_path / "reordered")).trace
    for name in ("rank", "kind", "duration_s", "bytes_", "group", "peer", "tag", "algorithm", "deps", "dep_offsets"):
        assert np.array_equal(getattr(ordered, name), getattr(reordered, name)), name


def test_a_cut_or_garbled_trace_file_is_named_not_replayed(tmp_path):
    import pytest

    from core import SpecError
    from core.chakra.trace import read_trace

    whole = write_traces(tmp_path, "t", {0: _rank(0)})[0].read_bytes()
    meta_size, pos = whole[0], 1  # the metadata record is short: a one-byte length
    second_node = pos + meta_size + 1 + whole[pos + meta_size]  # end of the first node
    cases = {
        b"": "0 bytes",
        whole[:-3]: "the file ends inside it",  # cut inside the last node
        whole + b"\x85": "record 7.*at byte %d.*the file ends inside it" % len(whole),  # inside a length prefix
        whole[:second_node]: "= 6: at most the 1 nodes that follow it",  # cut between two nodes: only our count tells
        varint(3) + b"\xff\xff\xff": "does not parse",
    }
    path = tmp_path / "cut.0.et"
    for data, why in cases.items():
        path.write_bytes(data)
        with pytest.raises(SpecError, match=why) as error:
            read_trace(path)
        assert str(path) in str(error.value)


def test_a_node_record_cut_inside_a_field_is_named_on_replay(tmp_path):
    import pytest

    from core import SpecError

    paths = write_traces(tmp_path, "g", {0: _rank(0), 1: _rank(1)})
    meta, records = node_records(paths[0])
    records[-1] = b"\x08\xff\xff"  # field 1 (id), a varint that never ends: the count still matches
    paths[0].write_bytes(b"".join(varint(len(r)) + r for r in [meta, *records]))
    with pytest.raises(SpecError, match=r"g\.0\.et: field 'record 6'.*does not parse"):
        build_trace(trace_files(tmp_path / "g"))


def test_a_smaller_run_into_the_same_folder_leaves_one_set_of_rank_files(tmp_path):
    write_traces(tmp_path, "t", {rank: _rank(rank % 2) for rank in range(4)})
    (tmp_path / "t.notes.et").write_text("not ours to remove")
    write_traces(tmp_path, "t", {0: _rank(0), 1: _rank(1)})
    assert sorted(p.name for p in tmp_path.glob("t.*.et")) == ["t.0.et", "t.1.et", "t.notes.et"]


def test_a_missing_last_rank_file_is_named(tmp_path):
    import pytest

    from core import SpecError

    write_traces(tmp_path, "m", {0: _rank(0), 1: _rank(1)})
    (tmp_path / "m.1.et").unlink()
    with pytest.raises(SpecError, match=r"rank 1 has no file in this set: is m\.1\.et missing\?"):
        build_trace(trace_files(tmp_path / "m"))


def _attr(**fields) -> bytes:
    """One Node.attr field holding an AttributeProto written from `fields` (several values of its
    oneof: written one after the other, as a writer may, the last one counting)."""
    from core.chakra.schema import AttributeProto

    name = fields.pop("name", "")
    data = AttributeProto(name=name).SerializeToString() if name else b""
    for key, value in fields.items():
        data += AttributeProto(**{key: value}).SerializeToString()
    return b"\x52" + varint(len(data)) + data


def _fields_cases() -> dict:
    """{what: a node record} the compiled reader should read as protobuf does."""
    head = Node(id=4, name="n", type=4, data_deps=[1, 2]).SerializeToString()
    return {
        "compute": to_proto(_rank(0)[0]).SerializeToString(),
        "collective": to_proto(_rank(0)[3]).SerializeToString(),
        "send": to_proto(_rank(0)[4]).SerializeToString(),
        "negative int32": head + _attr(name="comm_src", int32_val=-3),
        "int64 and uint64 beyond 32 bits": head + _attr(name="comm_size", int64_val=-(1 << 40))
        + _attr(name="tensor_size", uint64_val=(1 << 63) + 5),
        "bool, double, string": head + _attr(name="b", bool_val=True) + _attr(name="d", double_val=2.5e-7)
        + _attr(name="pg_name", string_val="12"),
        "last oneof member counts": head + _attr(name="x", int64_val=5, string_val="s", double_val=0.5),
        "an attribute without a value is left out": head + _attr(name="comm_tag", int64_val=9)
        + _attr(name="comm_tag"),
        "the last of two attributes of a name counts": head + _attr(name="comm_tag", int64_val=1)
        + _attr(name="comm_tag", int32_val=2),
        "start time and duration": head + Node(start_time_micros=77, duration_micros=1 << 35).SerializeToString(),
    }


def test_node_fields_read_what_protobuf_reads():
    from core.chakra.trace import from_fields, from_proto, node_attrs
    from core.chakra.wire import PLAIN, node_fields

    records = list(_fields_cases().values())
    data = b"".join(records)
    ends = np.cumsum([len(r) for r in records])
    starts = ends - [len(r) for r in records]
    heads = node_heads(data, starts, ends)
    assert heads.regular
    read = node_fields(data, starts, ends, heads.content, np.arange(len(records)))
    for what, record, (status, name, micros, attrs) in zip(_fields_cases(), records, read):
        proto = Node.FromString(record)
        assert status == PLAIN, what
        assert (name, micros, attrs) == (proto.name, proto.duration_micros, node_attrs(proto)), what
        assert [type(v) for v in attrs.values()] == [type(v) for v in node_attrs(proto).values()], what
        deps = tuple(proto.data_deps) + tuple(proto.ctrl_deps)
        assert from_fields(proto.id, name, proto.type, micros, attrs, deps) == from_proto(proto), what


def test_node_fields_leave_to_protobuf_what_they_do_not_read_plainly():
    from core.chakra.trace import TraceNode
    from core.chakra.wire import HEAD_IN_CONTENT, PROTOBUF, node_fields

    head = Node(id=4, name="n", type=4).SerializeToString()
    collective = TraceNode(5, "ar", "collective", collective="all_reduce", bytes_=64, involved_dims=(True, False))
    cases = {
        "a list attribute": (to_proto(collective).SerializeToString(), PROTOBUF),
        "a field it does not read (inputs)": (head + b"\x42\x02\x0a\x00", PROTOBUF),
        "a name that is not ASCII": (Node(id=4, name="l\u00e4yer", type=4).SerializeToString(), PROTOBUF),
        "an attribute value that is not ASCII": (head + _attr(name="pg_name", string_val="\u00e9"), PROTOBUF),
        "a type beyond 32 bits": (b"\x08\x04\x18" + varint((1 << 32) + 4), PROTOBUF),
        "an attribute cut short": (head + b"\x52\x05\x0a\x01x", PROTOBUF),
        "a double of the wrong wire type": (head + b"\x52\x02\x18\x01", PROTOBUF),
        "an id again after the attributes": (head + _attr(name="a", int64_val=1) + b"\x08\x07", HEAD_IN_CONTENT),
    }
    records = [record for record, _ in cases.values()]
    data = b"".join(records)
    ends = np.cumsum([len(r) for r in records])
    starts = ends - [len(r) for r in records]
    heads = node_heads(data, starts, ends)
    read = node_fields(data, starts, ends, heads.content, np.arange(len(records)))
    assert {what: status for what, (status, *_) in zip(cases, read)} == {what: s for what, (_, s) in cases.items()}


def test_contents_left_to_protobuf_or_holding_a_head_field_replay_like_plain_ones(tmp_path):
    """Involved dimensions (a list attribute, read by protobuf) change nothing in the replay; an id
    written again after the attributes is the node's id, as protobuf reads it."""
    ranks = {r: _rank(r) for r in range(2)}
    write_traces(tmp_path, "plain", ranks)
    listed = {r: [n if n.kind != "collective" else TraceNode(**{**n.__dict__, "involved_dims": (True,)})
                  for n in nodes] for r, nodes in ranks.items()}
    write_traces(tmp_path, "listed", listed)
    for rank, nodes in ranks.items():
        chunks = [GlobalMetadata(version="0.0.4").SerializeToString()]
        for node in nodes:  # an id of 0 first, the node's own id after its attributes
            chunks.append(to_proto(TraceNode(**{**node.__dict__, "id": 0})).SerializeToString()
                          + b"\x08" + varint(node.id))
        (tmp_path / f"again.{rank}.et").write_bytes(b"".join(varint(len(c)) + c for c in chunks))
    plain = build_trace(trace_files(tmp_path / "plain")).trace
    for other in ("listed", "again"):
        trace = build_trace(trace_files(tmp_path / other)).trace
        for name in ("rank", "kind", "duration_s", "bytes_", "group", "peer", "tag", "algorithm", "deps", "dep_offsets"):
            assert np.array_equal(getattr(plain, name), getattr(trace, name)), (other, name)
