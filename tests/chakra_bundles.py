"""Trace sets shared by the Chakra tests and scripts/check_astra_interop.py: our bundles of the
interop layouts (name, model, Parallelism, workload, gpus), and a set in the shape ASTRA-sim's
microbenchmark generator writes, with a one-ring ASTRA-sim network file."""
from pathlib import Path

import yaml

import core
from core.chakra.trace import varint
from core.chakra.schema import COLLECTIVE_TYPES, NODE_TYPES, GlobalMetadata, Node

LAYOUTS = (
    ("train-tp2-dp2", "qwen2.5-3b", core.Parallelism(tp=2, dp=2, sp=True), core.TrainWorkload(global_batch=4, seq=512), 4),
    ("train-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.TrainWorkload(global_batch=8, seq=512), 4),
    ("train-cp2-tp2", "qwen2.5-3b", core.Parallelism(cp=2, tp=2, sp=True), core.TrainWorkload(global_batch=2, seq=1024), 4),
    ("train-ep2-dp2", "mixtral-8x7b", core.Parallelism(dp=2, ep=2, zero=1), core.TrainWorkload(global_batch=2, seq=256), 2),
    ("infer-tp2", "qwen2.5-3b", core.Parallelism(tp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 2),
    ("infer-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 4),
)


def write_bundles(folder, hardware, backend="astra-flattened") -> dict:
    """{name: (bundle folder, model name, evaluated record)} for every layout."""
    out = {}
    for name, model_name, par, work, gpus in LAYOUTS:
        bundle = Path(folder) / name
        model = core.load_model(model_name)
        record = core.evaluate(model, hardware, par, work, gpus, backend=backend, time_infeasible=True,
                               emit_traces=bundle)
        out[name] = (bundle, model.name, record)
    return out


def write_generator_set(folder, npus, comm_size, comm_type="ALL_REDUCE", node_type="COMM_COLL_NODE"):
    """One collective node per NPU file, as ASTRA-sim's microbenchmark generator writes them: no
    communicator (all ranks), no dependencies, comm_size per rank, schema version 0.0.4."""
    for npu in range(npus):
        node = Node(id=npu, name=f"{comm_type.lower()}_{npus}npus", type=NODE_TYPES[node_type])
        node.attr.add(name="is_cpu_op", bool_val=False)
        node.attr.add(name="comm_type", int64_val=COLLECTIVE_TYPES[comm_type])
        node.attr.add(name="comm_size", int64_val=comm_size)
        with open(folder / f"coll.{npu}.et", "wb") as handle:
            for message in (GlobalMetadata(version="0.0.4"), node):
                data = message.SerializeToString()
                handle.write(varint(len(data)) + data)
    return folder / "coll"


def ring_network(folder, npus, bandwidth_gib_s=50.0, latency_ns=500.0):
    path = folder / "net.yml"
    path.write_text(yaml.safe_dump({"topology": ["Ring"], "npus_count": [npus], "bandwidth": [bandwidth_gib_s],
                                    "latency": [latency_ns]}))
    return path
