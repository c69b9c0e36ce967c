"""Trace sets shared by the Chakra tests and scripts/check_astra_interop.py: our bundles of the
interop layouts (name, model, Parallelism, workload, gpus), and a set in the shape ASTRA-sim's
microbenchmark generator writes, with a one-ring ASTRA-sim network file."""
from pathlib import Path

import pytest
import yaml

import core
from core.chakra.trace import varint
from core.chakra.schema import COLLECTIVE_TYPES, NODE_TYPES, GlobalMetadata, Node

MODELS = Path(__file__).resolve().parent.parent.parent / "shared" / "models"
# the published configs beside the repository (../shared), which a clone alone lacks
HAVE_MODELS = MODELS.is_dir()
NEEDS_MODELS = pytest.mark.skipif(not HAVE_MODELS, reason="no ../shared/models")
# Mixed-layer models shrunk to a few layers and experts (dotted overrides of their shared configs):
# DeepSeek-V3 with two dense layers, four MoE layers and its MTP module; Nemotron-3's Mamba-2,
# attention and MoE blocks.
SMALL_DEEPSEEK = ("deepseek-v3", {"num_hidden_layers": 6, "first_k_dense_replace": 2, "n_routed_experts": 16,
                                  "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1})
SMALL_NEMOTRON = (str(MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"),
                  {"num_hidden_layers": 6, "hybrid_override_pattern": "MEM*EM", "n_routed_experts": 8,
                   "num_experts_per_tok": 2})

_LAYOUTS = (
    ("train-tp2-dp2", "qwen2.5-3b", core.Parallelism(tp=2, dp=2, sp=True), core.TrainWorkload(global_batch=4, seq=512), 4),
    ("train-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.TrainWorkload(global_batch=8, seq=512), 4),
    ("train-cp2-tp2", "qwen2.5-3b", core.Parallelism(cp=2, tp=2, sp=True), core.TrainWorkload(global_batch=2, seq=1024), 4),
    ("train-ep2-dp2", "mixtral-8x7b", core.Parallelism(dp=2, ep=2, zero=1), core.TrainWorkload(global_batch=2, seq=256), 2),
    ("infer-tp2", "qwen2.5-3b", core.Parallelism(tp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 2),
    ("infer-pp2-dp2", "qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.InferWorkload(batch=2, prompt=256, decode=4), 4),
    ("train-deepseek-pp2-ep2", SMALL_DEEPSEEK, core.Parallelism(tp=2, pp=2, ep=2, etp=1, sp=True),
     core.TrainWorkload(global_batch=4, seq=512), 4),
    ("train-nemotron-pp2-dp2", SMALL_NEMOTRON, core.Parallelism(pp=2, dp=2), core.TrainWorkload(global_batch=8, seq=512), 4),
    ("infer-deepseek-pp2-tp2", SMALL_DEEPSEEK, core.Parallelism(tp=2, pp=2), core.InferWorkload(batch=2, prompt=256, decode=4),
     4),
)
# Nemotron-3's layout needs its config from ../shared/models
LAYOUTS = tuple(layout for layout in _LAYOUTS if HAVE_MODELS or layout[1] is not SMALL_NEMOTRON)


def layout_model(ref):
    """A layout's model: a preset name, or (preset or file, dotted overrides)."""
    return core.load_model(*ref) if isinstance(ref, tuple) else core.load_model(ref)


def write_bundles(folder, hardware, backend="astra-flattened") -> dict:
    """{name: (bundle folder, model name, evaluated record)} for every layout."""
    out = {}
    for name, model_name, par, work, gpus in LAYOUTS:
        bundle = Path(folder) / name
        model = layout_model(model_name)
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
