"""The bulk writer (numpy, straight from a replay's arrays) writes the bytes protobuf writes for
the same nodes one by one (TraceNode -> to_proto), on training and inference bundles with every
kind of node, idle NPUs included; and varints match protobuf's at every width."""
import numpy as np
import pytest
from astra_backend import ALGORITHMS, NODE_KINDS

import core
from core.chakra.bundle import write_bundle
from core.chakra.encode import roofline_cost, varints
from core.chakra.trace import TraceNode, varint, write_trace
from core.replay.steps import infer_request_astra, train_step_astra

KIND_NAME = {code: name for name, code in NODE_KINDS.items()}
ALGORITHM_NAME = {code: name for name, code in ALGORITHMS.items()}


def test_varints_match_protobuf_at_every_width():
    values = [0, 1, 127, 128, 300, 2**14 - 1, 2**14, 2**35 + 7, 2**63 - 1, -1, -(2**31)]
    data, widths = varints(values)
    assert [bytes(row[:w]) for row, w in zip(data, widths)] == [varint(v % 2**64) for v in values]


def _expected_nodes(trace, group_sizes, peak, memory, rank) -> list:
    """One rank's TraceNodes, converted node by node the way the bundle reads the arrays."""
    mine = np.flatnonzero(trace.rank == rank)
    local = {int(g): i for i, g in enumerate(mine)}
    nodes = []
    for i, g in enumerate(mine):
        kind = KIND_NAME[int(trace.kind[g])]
        deps = tuple(local[int(d)] for d in trace.deps[trace.dep_offsets[g]:trace.dep_offsets[g + 1]])
        if kind == "compute":
            duration_s = float(trace.duration_s[g])
            flops, tensor = (int(x[0]) for x in roofline_cost(np.array([duration_s]), peak, memory))
            nodes.append(TraceNode(i, "compute", "compute", duration_s=duration_s, deps=deps, flops=flops, bytes_=tensor))
        elif kind in ("send", "recv"):
            peer = int(trace.peer[g])
            src, dst = (rank, peer) if kind == "send" else (peer, rank)
            nodes.append(TraceNode(i, kind, kind, deps=deps, src=src, dst=dst, tag=int(trace.tag[g]),
                                   bytes_=int(round(float(trace.bytes_[g])))))
        else:
            group = int(trace.group[g])
            size = float(trace.bytes_[g]) / (group_sizes[group] if kind == "all_gather" else 1)
            nodes.append(TraceNode(i, kind, "collective", deps=deps, collective=kind, group=str(group + 1),
                                   bytes_=int(round(size)), algorithm=ALGORITHM_NAME[int(trace.algorithm[g])]))
    if not nodes:
        flops, tensor = (int(x[0]) for x in roofline_cost(np.zeros(1), peak, memory))
        nodes.append(TraceNode(0, "idle", "compute", flops=flops, bytes_=tensor))
    return nodes


@pytest.mark.parametrize("model, par, work, gpus", [
    ("qwen2.5-3b", core.Parallelism(tp=2, pp=2, sp=True), core.TrainWorkload(global_batch=4, seq=256), 4),
    ("mixtral-8x7b", core.Parallelism(dp=2, ep=2, zero=1), core.TrainWorkload(global_batch=2, seq=256), 2),
    ("qwen2.5-3b", core.Parallelism(pp=2, dp=2), core.InferWorkload(batch=2, prompt=64, decode=3), 4),
])
def test_bulk_writer_writes_what_protobuf_writes(tmp_path, a100, model, par, work, gpus):
    model = core.load_model(model)
    captured = {}

    def emit(trace, ctx):
        captured.update(trace=trace, ctx=ctx)
        write_bundle(tmp_path, "bulk", trace, ctx, "astra-flattened")

    if isinstance(work, core.TrainWorkload):
        train_step_astra(model, a100, par, work, gpus, "astra-flattened", emit)
    else:
        infer_request_astra(model, a100, par, work, gpus, "astra-flattened", emit)
    trace, ctx = captured["trace"], captured["ctx"]
    group_sizes = [len(m) for m in ctx.groups.members]
    peak, memory = a100.gpu.flops(a100.dtype), a100.gpu.hbm.bandwidth_bps
    files = sorted(tmp_path.glob("bulk.*.et"))
    assert len(files) == int(np.prod([d.size for d in ctx.dims]))
    for rank in range(len(files)):
        nodes = _expected_nodes(trace, group_sizes, peak, memory, rank)
        metadata = {"generator": "rapid-sweep", "backend": "astra-flattened", "ranks": len(files)}
        write_trace(tmp_path / "expected.et", nodes, metadata)
        assert (tmp_path / f"bulk.{rank}.et").read_bytes() == (tmp_path / "expected.et").read_bytes(), rank
