"""Analytical inference-request time: a prefill of the prompt, which emits the first output
token, then one decode step per further output token over a growing KV cache; pipeline
stages run one after another."""
import math
from functools import lru_cache

from . import ops
from .collectives import collective_time
from .graph import LayerShape, build_decode_layer, build_layer, decode_context
from .layout import group_spans
from .specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism
from .training import add_times, time_ops


@lru_cache(maxsize=8192)
def _decode_step(model, hw, dims, spans_key, batch, context, tp, kv_bytes):
    """One layer's share of one decode step at a given context length."""
    ops_list = build_decode_layer(model, hw, batch, context, tp, kv_bytes)
    return time_ops(hw, dims, dict(spans_key), ops_list)


def decode_steps(output_tokens: int) -> int:
    """Decode steps of a request: the prefill emits the first output token, each step one more
    (TensorRT-LLM's and Hugging Face's output length counts that first token)."""
    return max(0, output_tokens - 1)


def request_flops(model: ModelSpec, work: InferWorkload) -> float:
    """FLOPs of one replica's request: the prompt's tokens, then one token per decode step."""
    return 2.0 * model.active_params() * work.batch * (work.prompt + decode_steps(work.decode))


def lm_head_s(model: ModelSpec, hw: HardwareSpec, batch: int, tp: int) -> float:
    """Final norm, LM head and sampling for one new token per sequence."""
    el = hw.act_bytes
    return (ops.pointwise(hw, 2 * batch * model.hidden * el).time_s
            + ops.gemm(hw, batch, model.vocab // tp, model.hidden, dtype=hw.act_dtype).time_s
            + ops.pointwise(hw, batch * model.vocab / tp * 4 * 2).time_s)


def decode_points(model: ModelSpec, first: int, last: int) -> tuple:
    """((context, steps), ...) whose decode-layer times, weighted by steps, sum a uniform
    spec's decode steps at contexts first..last: a step's time is linear in the tokens its
    attention reads (graph.decode_context), so the mean of a linear stretch's ends stands for
    it; a sliding window's stretch past the window is flat; a chunk's reads cycle, so the
    steps are costed at the mean number they read; a fixed-state mixer reads none."""
    steps = last - first + 1
    if model.mixer != "attention":
        return ((first, steps),)
    if model.chunk:
        span = range(first, min(last, first + model.chunk - 1) + 1)
        mean = sum(decode_context(model, c) for c in span) / len(span)
        return ((max(1, round(mean)), steps),)
    limit = model.window or (model.mla.index_topk if model.mla else 0)
    if limit and last > limit:
        if first >= limit:
            return ((limit, steps),)
        before = limit - first  # steps at contexts first .. limit - 1, then flat at the window
        return ((first, before / 2), (limit - 1, before / 2), (limit, last - limit + 1))
    return ((first, steps / 2), (last, steps / 2))


def infer_request(model: ModelSpec, hw: HardwareSpec, par: Parallelism, work: InferWorkload, gpus: int):
    """(request seconds, TTFT, time per output token, breakdown, FLOPs of one replica's request)."""
    dims = hw.dims_for(gpus)
    spans = group_spans(par, dims)
    spans_key = (("tp", spans.get("tp", ())),)
    b, prompt = work.batch, work.prompt
    el, kv_bytes = hw.act_bytes, work.kv_bytes(hw)

    shape = LayerShape(b, prompt, prompt, par.tp, par.sp, 1, 1)
    head_s = lm_head_s(model, hw, b, par.tp)
    p2p_prefill, p2p_decode = {}, {}
    if par.pp > 1:
        pp_span = spans["pp"][:1]
        add_times(p2p_prefill, collective_time(hw, dims, "send_recv", b * prompt * model.hidden * el, pp_span),
             par.pp - 1)
        add_times(p2p_decode, collective_time(hw, dims, "send_recv", b * model.hidden * el, pp_span), par.pp - 1)

    comm = {}
    compute_s = head_s
    for spec, count in model.layer_groups():
        prefill = time_ops(hw, dims, dict(spans_key), build_layer(spec, hw, shape).forward)
        add_times(comm, dict(prefill.comm_s), count)
        compute_s += count * prefill.compute_s
    add_times(comm, p2p_prefill)
    ttft_s = compute_s + sum(comm.values())

    # Decode time is linear in the tokens attention reads, so a stretch of steps costs the mean
    # of its first and last steps times their count (decode_points).
    steps = decode_steps(work.decode)
    compute_s += steps * head_s
    for spec, count in model.layer_groups() if steps else ():
        for context, weight in decode_points(spec, prompt + 1, prompt + steps):
            step = _decode_step(spec, hw, dims, spans_key, b, context, par.tp, kv_bytes)
            compute_s += count * weight * step.compute_s
            add_times(comm, dict(step.comm_s), count * weight)
    add_times(comm, p2p_decode, steps)
    request_s = compute_s + sum(comm.values())
    tpot_s = (request_s - ttft_s) / steps if steps else math.nan  # one output token: none after the first
    breakdown = {"compute_s": compute_s, "prefill_s": ttft_s, "decode_s": request_s - ttft_s}
    breakdown.update({f"comm_{name}_s": seconds for name, seconds in comm.items()})
    return request_s, ttft_s, tpot_s, breakdown, request_flops(model, work)
