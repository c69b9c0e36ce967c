"""Chakra execution-trace files: `<prefix>.<rank>.et`, each a length-delimited
GlobalMetadata followed by length-delimited Nodes, as Chakra's tools and ASTRA-sim read
them. Nodes carry the attributes the public feeder reads (comm_type, comm_size, comm_src,
comm_dst, comm_tag, pg_name, is_cpu_op, num_ops, tensor_size, involved_dim)."""
from dataclasses import dataclass, field
from pathlib import Path

from .chakra_schema import COLLECTIVE_TYPES, NODE_TYPES, GlobalMetadata, Node

SCHEMA_VERSION = "0.0.4"
COLLECTIVE_OF = {"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
                 "all_to_all": "ALL_TO_ALL", "broadcast": "BROADCAST"}


@dataclass(frozen=True)
class TraceNode:
    """One node of one rank's trace, in plain Python terms."""
    id: int
    name: str
    kind: str  # "compute", "collective", "send", "recv"
    duration_us: int = 0
    deps: tuple = ()
    collective: str = ""  # all_reduce, all_gather, ... for kind == "collective"
    bytes_: int = 0
    group: str = ""  # communicator name for collectives
    peer: int = -1  # the other rank for send/recv
    tag: int = 0
    flops: int = 0
    involved_dims: tuple = field(default=())


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def to_proto(node: TraceNode):
    kinds = {"compute": "COMP_NODE", "collective": "COMM_COLL_NODE", "send": "COMM_SEND_NODE",
             "recv": "COMM_RECV_NODE"}
    proto = Node(id=node.id, name=node.name, type=NODE_TYPES[kinds[node.kind]],
                 duration_micros=node.duration_us)
    proto.data_deps.extend(node.deps)
    proto.attr.add(name="is_cpu_op", bool_val=False)
    if node.kind == "compute":
        proto.attr.add(name="num_ops", int64_val=node.flops)
        proto.attr.add(name="tensor_size", uint64_val=node.bytes_)
    elif node.kind == "collective":
        proto.attr.add(name="comm_type", int64_val=COLLECTIVE_TYPES[COLLECTIVE_OF[node.collective]])
        proto.attr.add(name="comm_size", int64_val=node.bytes_)
        proto.attr.add(name="pg_name", string_val=node.group)
        if node.involved_dims:
            proto.attr.add(name="involved_dim").bool_list.values.extend(node.involved_dims)
    else:
        src, dst = (-1, node.peer) if node.kind == "send" else (node.peer, -1)
        proto.attr.add(name="comm_src", int32_val=src)
        proto.attr.add(name="comm_dst", int32_val=dst)
        proto.attr.add(name="comm_tag", int32_val=node.tag)
        proto.attr.add(name="comm_size", int64_val=node.bytes_)
    return proto


def from_proto(proto) -> TraceNode:
    attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in proto.attr if a.WhichOneof("value")}
    type_name = {v: k for k, v in NODE_TYPES.items()}[proto.type]
    kind = {"COMP_NODE": "compute", "COMM_COLL_NODE": "collective", "COMM_SEND_NODE": "send",
            "COMM_RECV_NODE": "recv"}[type_name]
    collective = ""
    if kind == "collective":
        by_number = {v: k for k, v in COLLECTIVE_TYPES.items()}
        collective = {v: k for k, v in COLLECTIVE_OF.items()}[by_number[attrs["comm_type"]]]
    peer = attrs.get("comm_dst", -1) if kind == "send" else attrs.get("comm_src", -1)
    dims = tuple(attrs["involved_dim"].values) if "involved_dim" in attrs else ()
    return TraceNode(id=proto.id, name=proto.name, kind=kind, duration_us=proto.duration_micros,
                     deps=tuple(proto.data_deps), collective=collective,
                     bytes_=attrs.get("comm_size", attrs.get("tensor_size", 0)), group=attrs.get("pg_name", ""),
                     peer=peer, tag=attrs.get("comm_tag", 0), flops=attrs.get("num_ops", 0),
                     involved_dims=dims)


def write_trace(path, nodes, metadata: dict | None = None) -> None:
    """One rank's file: written whole to a temporary name, then renamed into place."""
    path = Path(path)
    meta = GlobalMetadata(version=SCHEMA_VERSION)
    for key, value in (metadata or {}).items():
        meta.attr.add(name=str(key), string_val=str(value))
    chunks = [meta.SerializeToString()] + [to_proto(n).SerializeToString() for n in nodes]
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as handle:
        for chunk in chunks:
            handle.write(_varint(len(chunk)))
            handle.write(chunk)
    temp.replace(path)


def read_trace(path) -> tuple:
    """(metadata dict, list of TraceNode) from one `.et` file."""
    data = Path(path).read_bytes()
    size, pos = _read_varint(data, 0)
    meta = GlobalMetadata.FromString(data[pos:pos + size])
    pos += size
    nodes = []
    while pos < len(data):
        size, pos = _read_varint(data, pos)
        nodes.append(from_proto(Node.FromString(data[pos:pos + size])))
        pos += size
    return {a.name: a.string_val for a in meta.attr}, nodes


def write_traces(directory, prefix: str, ranks: dict, metadata: dict | None = None) -> list:
    """`<directory>/<prefix>.<rank>.et` for each rank's node list; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, nodes in sorted(ranks.items()):
        path = directory / f"{prefix}.{rank}.et"
        write_trace(path, nodes, metadata)
        paths.append(path)
    return paths


def write_replay_traces(directory, prefix: str, trace, context, backend: str) -> list:
    """One `.et` file per rank of a replay graph (core.replay / astra_backend.Trace arrays)."""
    import numpy as np
    from astra_backend import NODE_KINDS

    names = {code: name for name, code in NODE_KINDS.items()}
    dims = context.dims
    sizes = np.array([d.size for d in dims])
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(sizes))), sizes[::-1])[::-1], axis=1)
    involved = [tuple(bool(v) for v in (coords[list(members)].min(0) != coords[list(members)].max(0)))
                for members in context.groups.members]
    ranks = {}
    starts = trace.dep_offsets
    for node in range(trace.rank.size):
        rank = int(trace.rank[node])
        kind = names[int(trace.kind[node])]
        deps = tuple(int(d) for d in trace.deps[starts[node]:starts[node + 1]] if trace.rank[d] == rank)
        common = {"id": node, "deps": deps, "bytes_": int(trace.bytes_[node])}
        if kind == "compute":
            entry = TraceNode(name="compute", kind="compute", duration_us=int(round(trace.duration_s[node] * 1e6)),
                              **common)
        elif kind in ("send", "recv"):
            entry = TraceNode(name=kind, kind=kind, peer=int(trace.peer[node]), tag=int(trace.tag[node]), **common)
        else:
            group = int(trace.group[node])
            entry = TraceNode(name=kind, kind="collective", collective=kind, group=f"group{group}",
                              involved_dims=involved[group], **common)
        ranks.setdefault(rank, []).append(entry)
    metadata = {"generator": "rapid-sweep", "backend": backend, "ranks": len(ranks)}
    return write_traces(directory, prefix, ranks, metadata)
