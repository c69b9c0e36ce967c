"""Chakra execution traces: our writer and reader, and files any Chakra reader can decode."""
import importlib
import sys

import pytest
from grpc_tools import protoc

import core
from core.chakra.trace import TraceNode, read_trace, write_traces

# The public et_def.proto's field numbers (MLCommons Chakra, package ChakraProtoMsg), written
# out independently of core.chakra.schema for the parts a trace reader needs.
PUBLIC_SCHEMA = """
syntax = "proto3";
package ChakraProtoMsg;
message AttributeProto {
  string name = 1;
  oneof value { int32 int32_val = 7; int64 int64_val = 9; uint64 uint64_val = 13; bool bool_val = 27;
                BoolList bool_list = 28; string string_val = 29; }
}
message BoolList { repeated bool values = 1; }
message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
enum NodeType { INVALID_NODE = 0; METADATA_NODE = 1; MEM_LOAD_NODE = 2; MEM_STORE_NODE = 3; COMP_NODE = 4;
                COMM_SEND_NODE = 5; COMM_RECV_NODE = 6; COMM_COLL_NODE = 7; }
message Node {
  uint64 id = 1; string name = 2; NodeType type = 3; repeated uint64 ctrl_deps = 4; repeated uint64 data_deps = 5;
  uint64 start_time_micros = 6; uint64 duration_micros = 7; repeated AttributeProto attr = 10;
}
"""

NODES = [
    TraceNode(0, "qkv", "compute", duration_s=120e-6, flops=10**12, bytes_=4096),
    TraceNode(1, "tp allreduce", "collective", deps=(0,), collective="all_reduce", bytes_=1 << 20,
              group="3", algorithm="ring", involved_dims=(True, False)),
    TraceNode(2, "to next stage", "send", deps=(1,), src=0, dst=8, tag=3, bytes_=8192),
    TraceNode(3, "from previous stage", "recv", deps=(1,), src=4, dst=0, tag=5, bytes_=8192),
]


def test_round_trip_is_exact(tmp_path):
    write_traces(tmp_path, "run", {0: NODES}, {"model": "tiny"})
    metadata, nodes = read_trace(tmp_path / "run.0.et")
    assert nodes == NODES and metadata == {"model": "tiny"}


@pytest.fixture(scope="module")
def public_schema(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schema")
    (folder / "et_def.proto").write_text(PUBLIC_SCHEMA)
    assert protoc.main(["protoc", f"-I{folder}", f"--python_out={folder}", str(folder / "et_def.proto")]) == 0
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("et_def_pb2")
    finally:
        sys.path.remove(str(folder))


def _decode(path, schema):
    """Length-delimited GlobalMetadata then Nodes, read with the independently compiled schema."""
    from google.protobuf.internal.decoder import _DecodeVarint32

    data, pos = path.read_bytes(), 0
    size, pos = _DecodeVarint32(data, pos)
    metadata = schema.GlobalMetadata.FromString(data[pos:pos + size])
    pos += size
    nodes = []
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        nodes.append(schema.Node.FromString(data[pos:pos + size]))
        pos += size
    return metadata, nodes


def test_files_decode_with_a_schema_compiled_from_the_public_field_numbers(tmp_path, public_schema):
    write_traces(tmp_path, "run", {0: NODES})
    metadata, nodes = _decode(tmp_path / "run.0.et", public_schema)
    assert metadata.version
    assert [n.type for n in nodes] == [public_schema.COMP_NODE, public_schema.COMM_COLL_NODE,
                                       public_schema.COMM_SEND_NODE, public_schema.COMM_RECV_NODE]
    attrs = {a.name: a for a in nodes[1].attr}
    assert attrs["comm_type"].int64_val == 0  # ALL_REDUCE
    assert attrs["comm_size"].int64_val == 1 << 20
    assert attrs["pg_name"].string_val == "3"
    assert list(attrs["involved_dim"].bool_list.values) == [True, False]
    send = {a.name: a for a in nodes[2].attr}
    assert (send["comm_src"].int32_val, send["comm_dst"].int32_val, send["comm_tag"].int32_val) == (0, 8, 3)
    assert nodes[0].duration_micros == 120 and list(nodes[1].data_deps) == [0]


def test_emitted_training_traces_are_acyclic_per_rank(tmp_path, a100):
    model = core.load_model("llama2-7b")
    par = core.Parallelism(tp=2, pp=2, sp=True, recompute="selective")
    core.evaluate(model, a100, par, core.TrainWorkload(global_batch=4, seq=1024), 4,
                  backend="astra-flattened", emit_traces=tmp_path)
    assert len(list(tmp_path.glob("llama2-7b.*.et"))) == 8  # one per NPU of the 8-GPU NVLink network
    for path in (tmp_path / f"llama2-7b.{rank}.et" for rank in range(4)):
        _, nodes = read_trace(path)
        ids = {n.id for n in nodes}
        done = set()
        for node in nodes:  # written in an order where every dependency comes first
            assert set(node.deps) <= done and set(node.deps) <= ids
            done.add(node.id)
        kinds = {n.kind for n in nodes}
        assert {"compute", "collective", "send", "recv"} <= kinds
