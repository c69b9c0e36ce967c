"""Our protobuf schema for execution traces, wire-compatible with MLCommons Chakra's
`et_def.proto` (package `ChakraProtoMsg`: same message names, field numbers and enum
values for the parts we use). The schema is built here from descriptors at import time,
so no protoc step and no generated code are needed."""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"
_F = descriptor_pb2.FieldDescriptorProto

# AttributeProto's `value` oneof: (field name, number, type, message type for lists).
_ATTRIBUTE_VALUES = (
    ("double_val", 3, _F.TYPE_DOUBLE, None),
    ("int32_val", 7, _F.TYPE_INT32, None),
    ("int64_val", 9, _F.TYPE_INT64, None),
    ("int64_list", 10, _F.TYPE_MESSAGE, "Int64List"),
    ("uint64_val", 13, _F.TYPE_UINT64, None),
    ("bool_val", 27, _F.TYPE_BOOL, None),
    ("bool_list", 28, _F.TYPE_MESSAGE, "BoolList"),
    ("string_val", 29, _F.TYPE_STRING, None),
    ("string_list", 30, _F.TYPE_MESSAGE, "StringList"),
)
_LISTS = (("Int64List", _F.TYPE_INT64), ("BoolList", _F.TYPE_BOOL), ("StringList", _F.TYPE_STRING))

NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
              "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
COLLECTIVE_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4,
                    "BROADCAST": 5, "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8,
                    "BARRIER": 9}


def _field(message, name, number, kind, type_name=None, repeated=False, oneof=None):
    field = message.field.add(name=name, number=number, type=kind,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _enum(file, name, values):
    enum = file.enum_type.add(name=name)
    for key, number in values.items():
        enum.value.add(name=key, number=number)


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="rapid_sweep/et_def.proto", package=PACKAGE,
                                              syntax="proto3")
    attribute = file.message_type.add(name="AttributeProto")
    _field(attribute, "name", 1, _F.TYPE_STRING)
    _field(attribute, "doc_string", 2, _F.TYPE_STRING)
    attribute.oneof_decl.add(name="value")
    for name, number, kind, type_name in _ATTRIBUTE_VALUES:
        _field(attribute, name, number, kind, type_name, oneof=0)
    for name, kind in _LISTS:
        _field(file.message_type.add(name=name), "values", 1, kind, repeated=True)
    metadata = file.message_type.add(name="GlobalMetadata")
    _field(metadata, "version", 1, _F.TYPE_STRING)
    _field(metadata, "attr", 2, _F.TYPE_MESSAGE, "AttributeProto", repeated=True)
    _enum(file, "NodeType", NODE_TYPES)
    _enum(file, "CollectiveCommType", COLLECTIVE_TYPES)
    io = file.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io, name, number, _F.TYPE_STRING)
    node = file.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, "NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, "IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, "IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, "AttributeProto", repeated=True)
    return file


_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(_build_file())


def _message(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


AttributeProto = _message("AttributeProto")
GlobalMetadata = _message("GlobalMetadata")
Node = _message("Node")
