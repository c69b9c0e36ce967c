"""Chakra execution-trace files: `<prefix>.<rank>.et`, each a length-delimited
GlobalMetadata followed by length-delimited Nodes, written the way ASTRA-sim's Chakra
feeder reads them:
- send and recv nodes carry both real ranks (`comm_src`, `comm_dst`, read as unsigned);
- a collective's `pg_name` is a decimal communicator id listed in the bundle's
  comm_group.json ("" or "0" would mean all ranks);
- `comm_size` is each rank's input (for all-gather: the gathered total over the group size);
- compute nodes carry `duration_micros` and a non-zero roofline cost (`num_ops`, `tensor_size`),
  plus our exact time in `rapid_duration_s`;
- collectives record the algorithm we simulated in `comm_algorithm`."""
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from . import _wire
from .schema import COLLECTIVE_TYPES, NODE_TYPES, GlobalMetadata, Node
from core.errors import SpecError

SCHEMA_VERSION = "0.0.4"
COLLECTIVE_OF = {"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
                 "all_to_all": "ALL_TO_ALL", "broadcast": "BROADCAST"}
KIND_OF_TYPE = {"COMP_NODE": "compute", "COMM_COLL_NODE": "collective", "COMM_SEND_NODE": "send",
                "COMM_RECV_NODE": "recv"}
EXACT_DURATION_ATTR = "rapid_duration_s"
NODE_COUNT_ATTR = "rapid_node_count"  # in our files' GlobalMetadata: a file cut between two nodes is caught


@dataclass(frozen=True)
class TraceNode:
    """One node of one rank's trace, in Chakra's terms (sizes as the feeder reads them)."""
    id: int
    name: str
    kind: str  # "compute", "collective", "send", "recv"
    duration_s: float = 0.0
    deps: tuple = ()
    collective: str = ""  # all_reduce, all_gather, ... for kind == "collective"
    bytes_: int = 0  # comm_size, or tensor_size for compute
    group: str = ""  # pg_name: decimal communicator id
    src: int = 0  # sending rank of a send/recv
    dst: int = 0  # receiving rank of a send/recv
    tag: int = 0
    flops: int = 0  # num_ops
    algorithm: str = ""  # comm_algorithm: ring, direct, double_binary_tree, halving_doubling
    involved_dims: tuple = field(default=())


class UnsupportedNode(ValueError):
    """A node this reader cannot turn into a TraceNode: (node id, name, what it is)."""

    def __init__(self, node_id: int, name: str, what: str):
        self.node_id, self.name, self.what = node_id, name, what
        super().__init__(f"node {node_id} '{name}': {what}")


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


# the mapping tables read backwards, built once (the readers and writers run per node)
_TYPE_OF_KIND = {kind: type_name for type_name, kind in KIND_OF_TYPE.items()}
_TYPE_NAME = {number: name for name, number in NODE_TYPES.items()}
_COLLECTIVE_NAME = {number: name for name, number in COLLECTIVE_TYPES.items()}
_OUR_COLLECTIVE = {theirs: ours for ours, theirs in COLLECTIVE_OF.items()}


def to_proto(node: TraceNode):
    proto = Node(id=node.id, name=node.name, type=NODE_TYPES[_TYPE_OF_KIND[node.kind]],
                 duration_micros=int(round(node.duration_s * 1e6)))
    proto.data_deps.extend(node.deps)
    proto.attr.add(name="is_cpu_op", bool_val=False)
    if node.kind == "compute":
        proto.attr.add(name="num_ops", int64_val=node.flops)
        proto.attr.add(name="tensor_size", uint64_val=node.bytes_)
        proto.attr.add(name=EXACT_DURATION_ATTR, double_val=node.duration_s)
    elif node.kind == "collective":
        proto.attr.add(name="comm_type", int64_val=COLLECTIVE_TYPES[COLLECTIVE_OF[node.collective]])
        proto.attr.add(name="comm_size", int64_val=node.bytes_)
        proto.attr.add(name="pg_name", string_val=node.group)
        if node.algorithm:
            proto.attr.add(name="comm_algorithm", string_val=node.algorithm)
        if node.involved_dims:
            proto.attr.add(name="involved_dim").bool_list.values.extend(node.involved_dims)
    else:
        proto.attr.add(name="comm_src", int32_val=node.src)
        proto.attr.add(name="comm_dst", int32_val=node.dst)
        proto.attr.add(name="comm_tag", int32_val=node.tag)
        proto.attr.add(name="comm_size", int64_val=node.bytes_)
    return proto


def node_attrs(proto) -> dict:
    """A Chakra node's attributes as {name: value}, whatever integer width each was written with."""
    return {a.name: getattr(a, a.WhichOneof("value")) for a in proto.attr if a.WhichOneof("value")}


def from_proto(proto) -> TraceNode:
    """Our view of any Chakra node; raises UnsupportedNode for what we cannot replay."""
    return from_fields(proto.id, proto.name, proto.type, proto.duration_micros, node_attrs(proto),
                       tuple(proto.data_deps) + tuple(proto.ctrl_deps))


def from_fields(node_id: int, name: str, node_type: int, duration_micros: int, attrs: dict, deps: tuple) -> TraceNode:
    """Our view of a Chakra node from its fields (attributes as node_attrs gives them), however they
    were read; raises UnsupportedNode for what we cannot replay."""
    type_name = _TYPE_NAME.get(node_type, f"type {node_type}")
    if type_name not in KIND_OF_TYPE:
        raise UnsupportedNode(node_id, name, f"node type {type_name} is not supported "
                                             f"(supported: {', '.join(KIND_OF_TYPE)})")
    kind = KIND_OF_TYPE[type_name]
    collective = ""
    if kind == "collective":
        comm_type = _COLLECTIVE_NAME.get(attrs.get("comm_type"), f"comm_type {attrs.get('comm_type')}")
        if comm_type not in _OUR_COLLECTIVE:
            raise UnsupportedNode(node_id, name, f"collective {comm_type} is not supported "
                                                 f"(supported: {', '.join(_OUR_COLLECTIVE)})")
        collective = _OUR_COLLECTIVE[comm_type]
    duration_s = attrs.get(EXACT_DURATION_ATTR, duration_micros * 1e-6)
    dims = tuple(attrs["involved_dim"].values) if "involved_dim" in attrs else ()
    return TraceNode(id=node_id, name=name, kind=kind, duration_s=duration_s, deps=deps, collective=collective,
                     bytes_=int(attrs.get("comm_size", attrs.get("tensor_size", 0))),
                     group=str(attrs.get("pg_name", "")), src=int(attrs.get("comm_src", 0)),
                     dst=int(attrs.get("comm_dst", 0)), tag=int(attrs.get("comm_tag", 0)),
                     flops=int(attrs.get("num_ops", 0)), algorithm=attrs.get("comm_algorithm", ""),
                     involved_dims=dims)


def metadata_record(metadata: dict | None, count: int) -> bytes:
    """A file's length-prefixed GlobalMetadata: our schema version, `metadata` as text attributes
    and the count of nodes that follow it."""
    meta = GlobalMetadata(version=SCHEMA_VERSION)
    for key, value in (metadata or {}).items():
        if str(key) != NODE_COUNT_ATTR:  # that name is the count's
            meta.attr.add(name=str(key), string_val=str(value))
    meta.attr.add(name=NODE_COUNT_ATTR, int64_val=count)
    data = meta.SerializeToString()
    return varint(len(data)) + data


def write_trace(path, nodes, metadata: dict | None = None) -> None:
    """One rank's file: written whole to a temporary name, then renamed into place."""
    path = Path(path)
    chunks = [to_proto(n).SerializeToString() for n in nodes]
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as handle:
        handle.write(metadata_record(metadata, len(nodes)))
        for chunk in chunks:
            handle.write(varint(len(chunk)))
            handle.write(chunk)
    temp.replace(path)


def record_spans(path) -> tuple:
    """(the bytes of a length-prefixed `.et` file, start and end of each record in them as arrays;
    record 0 is the GlobalMetadata). An empty file, one that ends inside a record, or one of ours
    holding fewer nodes than its metadata counts (cut between two records) is a SpecError naming
    the file."""
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise SpecError(str(path), "<file>", "0 bytes", "a Chakra trace: a GlobalMetadata record, then the nodes")
    starts, ends, cut_at = _wire.records(data)
    if cut_at >= 0:
        raise SpecError(str(path), f"record {starts.size - 1}", f"at byte {cut_at}",
                        f"a whole record; the file ends inside it after {len(data)} bytes (cut short?)")
    counted = [a.int64_val for a in parse_record(path, GlobalMetadata, data[starts[0]:ends[0]], 0).attr
               if a.name == NODE_COUNT_ATTR and a.WhichOneof("value") == "int64_val"]
    if counted and counted[0] > len(starts) - 1:
        raise SpecError(str(path), f"GlobalMetadata {NODE_COUNT_ATTR}", counted[0],
                        f"at most the {len(starts) - 1} nodes that follow it (the file was cut short)")
    return data, starts, ends


def node_records(path) -> tuple:
    """(GlobalMetadata bytes, [one bytes object per node]) of a length-prefixed `.et` file (see
    record_spans)."""
    data, starts, ends = record_spans(path)
    records = [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    return records[0], records[1:]


def parse_record(path, message, record: bytes, index: int):
    """One record of an `.et` file parsed as `message` (GlobalMetadata or Node), or a SpecError
    naming the file and the record."""
    try:
        return message.FromString(record)
    except DecodeError:
        raise SpecError(str(path), f"record {index}", f"{len(record)} bytes",
                        f"a Chakra {message.__name__} message (it does not parse)") from None


def read_protos(path) -> tuple:
    """(GlobalMetadata, list of raw Node messages) from one `.et` file."""
    meta, records = node_records(path)
    return (parse_record(path, GlobalMetadata, meta, 0),
            [parse_record(path, Node, record, i) for i, record in enumerate(records, 1)])


def read_trace(path) -> tuple:
    """(metadata dict of its text attributes, list of TraceNode) from one `.et` file."""
    meta, protos = read_protos(path)
    return ({a.name: a.string_val for a in meta.attr if a.WhichOneof("value") == "string_val"},
            [from_proto(p) for p in protos])


def write_traces(directory, prefix: str, ranks: dict, metadata: dict | None = None) -> list:
    """`<directory>/<prefix>.<rank>.et` for each rank's node list; returns the paths. Rank files
    of the same prefix that an earlier run left are removed first, so the folder holds one set."""
    remove_rank_files(directory, prefix)
    directory = Path(directory)
    paths = []
    for rank, nodes in sorted(ranks.items()):
        path = directory / f"{prefix}.{rank}.et"
        write_trace(path, nodes, metadata)
        paths.append(path)
    return paths


def remove_rank_files(directory, prefix: str) -> None:
    """Creates `directory` if need be and removes the `<prefix>.<rank>.et` files an earlier run left
    there, so that the folder holds one set."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{prefix}.*.et"):
        if stale.name[len(prefix) + 1:-3].isdigit():
            stale.unlink()
