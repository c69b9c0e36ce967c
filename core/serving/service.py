"""A serving configuration end to end: the engines' KV capacity from memory, the iteration
loop simulated per engine, and the figures a user asks about (TTFT, TPOT, throughput per GPU
and per user). Aggregated: `replicas` engines share the load evenly. Disaggregated: prefill
engines hand each request's KV cache to decode engines over the network."""
import math
from dataclasses import dataclass, replace

from core.errors import SpecError
from core.model.collectives import collective_time
from core.model.memory import (RUNTIME_RESERVE_BYTES, kv_cache_bytes_per_token, served_weight_bytes,
                               state_bytes_per_sequence)
from core.model.specs import KV_DTYPES, HardwareSpec, ModelSpec, Parallelism, kv_element_bytes

from .engines import EngineSpec, on_gpu, with_knobs
from .iteration import IterationModel
from .simulate import Load, SimResult, pool as pooled, simulate


@dataclass(frozen=True)
class Pool:
    """Engines of one kind: `workers` engines of `tp` x `pp` GPUs each; `attention_dp` ranks of
    an engine run attention for their own requests, `ep` splits its experts; `batch` caps the
    requests one engine holds (0: the engine's default)."""
    workers: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    attention_dp: int = 1
    batch: int = 0

    @property
    def gpus(self) -> int:
        return self.workers * self.tp * self.pp


def check_pool(pool: Pool, source: str = "", prefix: str = "") -> None:
    """One-line refusals of a pool that cannot exist."""
    for name in ("workers", "tp", "pp", "ep", "attention_dp"):
        value = getattr(pool, name)
        if not isinstance(value, int) or value < 1:
            raise SpecError(source, prefix + name, value, "expected a positive integer")
    if pool.batch < 0:
        raise SpecError(source, prefix + "batch", pool.batch, "expected a positive integer (0 = the engine's default)")
    if pool.tp % pool.attention_dp:
        raise SpecError(source, prefix + "attention_dp", pool.attention_dp,
                        f"expected a divisor of the engine's {pool.tp} tensor-parallel GPUs (tp)")
    if pool.ep > pool.tp * pool.pp or (pool.tp * pool.pp) % pool.ep:
        raise SpecError(source, prefix + "ep", pool.ep,
                        f"expected a divisor of the engine's {pool.tp * pool.pp} GPUs (tp x pp)")


def closed_loop_reason(concurrency: int, requests: int) -> str:
    """Why a closed loop of `concurrency` in flight cannot be run on `requests` in all ("" if it can)."""
    if concurrency > requests:
        return (f"concurrency ({concurrency}) above requests ({requests}): a closed loop never holds more requests "
                "in flight than it sends (give several times the concurrency, so that the first wave, which "
                "arrives at once, does not set the figures)")
    return ""


def check_load(load: Load, source: str = "") -> None:
    for name in ("isl", "osl", "requests"):
        value = getattr(load, name)
        if not isinstance(value, int) or value < 1:
            raise SpecError(source, name, value, "expected a positive integer")
    both = ("expected exactly one of concurrency (a positive integer, closed loop) and "
            "request_rate (requests per second > 0, open loop)")
    if not isinstance(load.concurrency, int) or load.concurrency < 0:
        raise SpecError(source, "concurrency", load.concurrency, both)
    if not load.request_rate >= 0:
        raise SpecError(source, "request_rate", load.request_rate, both)
    if load.concurrency and load.request_rate:
        raise SpecError(source, "request_rate", load.request_rate, both)
    if not load.concurrency and not load.request_rate:
        raise SpecError(source, "concurrency", load.concurrency, both)
    reason = closed_loop_reason(load.concurrency, load.requests)
    if reason:
        raise SpecError(source, "requests", load.requests, reason)
    if not 0 <= load.length_spread < 1:
        raise SpecError(source, "length_spread", load.length_spread, "expected a fraction in [0, 1)")


def kv_bytes_per_element(hw: HardwareSpec, kv_dtype: str, source: str = "") -> float:
    if kv_dtype and kv_dtype not in KV_DTYPES:
        raise SpecError(source, "kv_dtype", kv_dtype, f"expected one of {', '.join(KV_DTYPES)}")
    return kv_element_bytes(kv_dtype) if kv_dtype else hw.act_bytes


def kv_tokens(model: ModelSpec, hw: HardwareSpec, pool: Pool, engine: EngineSpec, kv_bytes: float) -> int:
    """Tokens the KV cache of one attention rank holds: what the engine's memory fraction leaves
    the cache (EngineSpec.kv_budget) once the weights (as stored: served_weight_bytes), and the runtime
    where the fraction holds it, are in; 0 when the weights do not fit."""
    par = Parallelism(tp=pool.tp, pp=pool.pp, ep=pool.ep, etp=1 if pool.ep > 1 else 0)
    weights = served_weight_bytes(model, hw, par)
    capacity, share = hw.gpu.hbm.capacity_bytes, engine.kv_memory_fraction
    cache = {"free": share * (capacity - weights - RUNTIME_RESERVE_BYTES),
             "utilization": share * capacity - weights - RUNTIME_RESERVE_BYTES,
             "static": share * capacity - weights}[engine.kv_budget]
    # every kind of layer's cache (MLA's latent, sliding windows before they fill), one stage's share
    per_token = kv_cache_bytes_per_token(model, kv_bytes, pool.tp // pool.attention_dp) / pool.pp
    return max(0, int(cache / per_token))


def state_tokens(model: ModelSpec, pool: Pool, engine: EngineSpec, kv_bytes: float) -> int:
    """The cache, in tokens, that a request's fixed recurrent state (its Mamba and linear-attention
    layers') takes on one attention rank beside its tokens' blocks, in whole blocks (vLLM's hybrid
    cache pages the state as it pages tokens); 0 for a model of attention alone."""
    tp = pool.tp // pool.attention_dp
    state = state_bytes_per_sequence(model, kv_bytes, tp)
    if not state:
        return 0
    tokens = math.ceil(state / kv_cache_bytes_per_token(model, kv_bytes, tp))
    return -(-tokens // engine.kv_block_tokens) * engine.kv_block_tokens


def request_cache_tokens(engine: EngineSpec, tokens: int, state: int) -> int:
    """The cache, in tokens, one request of `tokens` tokens holds on an attention rank: its
    tokens in whole blocks, and its recurrent `state` (state_tokens)."""
    return -(-tokens // engine.kv_block_tokens) * engine.kv_block_tokens + state


_MEMOS = {}


def iteration_model(model, hw, pool: Pool, kv_bytes: float, overhead_s: float, grouped_moe: bool = False,
                    attention_kernels: str = "", allreduce_kernels: str = "",
                    sequence_overhead_s: float = 0.0) -> IterationModel:
    """One engine's iteration model, its memo kept across configurations that share it."""
    key = (model, hw, pool.tp, pool.pp, kv_bytes, pool.attention_dp, overhead_s, pool.ep, grouped_moe,
           attention_kernels, allreduce_kernels, sequence_overhead_s)
    it = _MEMOS.get(key)
    if it is None:
        if len(_MEMOS) > 256:
            _MEMOS.clear()
        it = _MEMOS[key] = IterationModel(model, hw, pool.tp, pool.pp, kv_bytes, pool.attention_dp, overhead_s,
                                          pool.ep, grouped_moe, attention_kernels, allreduce_kernels,
                                          sequence_overhead_s)
    return it


def _engine_run(model, hw, pool: Pool, engine: EngineSpec, load: Load, kv_bytes: float,
                samples: bool = False) -> tuple:
    """(simulation of one attention rank, its KV capacity in requests)."""
    if pool.batch:
        engine = with_knobs(engine, max_batch=pool.batch)
    engine = on_gpu(engine, hw.gpu, pool.tp, pool.pp, pool.attention_dp)
    it = iteration_model(model, hw, pool, kv_bytes, engine.iteration_overhead_s, engine.grouped_moe,
                         engine.attention_kernels, engine.allreduce_kernels, engine.sequence_overhead_s)
    capacity, state = kv_tokens(model, hw, pool, engine, kv_bytes), state_tokens(model, pool, engine, kv_bytes)
    per_request = request_cache_tokens(engine, load.isl + load.osl, state)
    if capacity < per_request:
        return None, 0
    if load.concurrency and load.ramp_share:
        load = replace(load, ramp_s=load.ramp_share * lifetime_s(it, engine, load))
    return simulate(it, engine, load, capacity, samples, state), capacity // per_request


def lifetime_s(it: IterationModel, engine: EngineSpec, load: Load) -> float:
    """About one request's lifetime at the offered concurrency: the span a benchmark client's
    ramp-up is measured against (Load.ramp_share)."""
    users = min(load.concurrency, engine.max_batch)
    step_s = it.time_s(0, 0, users, load.isl + load.osl // 2, users <= engine.cuda_graph_max_batch)
    return it.time_s(min(load.isl, engine.max_num_tokens), 0, 0, 0, False) + load.osl * step_s


def shares(load: Load, parts: int) -> tuple:
    """The load split over `parts` engines (or attention ranks), as (one engine's share, engines
    taking it): an open loop's rate and requests evenly; a closed loop's requests in flight as
    evenly as whole requests go (one more on concurrency mod parts of them; fewer requests than
    parts leave the rest idle), each share's requests in all in proportion."""
    if not load.concurrency:
        return ((replace(load, request_rate=load.request_rate / parts,
                         requests=max(1, round(load.requests / parts))), parts),)
    low, extra = divmod(load.concurrency, parts)
    return tuple((replace(load, concurrency=users,
                          requests=max(users, round(load.requests * users / load.concurrency))), engines)
                 for users, engines in ((low + 1, extra), (low, parts - extra)) if users and engines)


def _pool_run(model, hw, pool: Pool, engine: EngineSpec, load: Load, kv_bytes: float, parts: int) -> tuple:
    """(the simulation of one busy engine, or of all of them pooled where their shares differ;
    the engines it stands for; one engine's KV capacity in requests) for `parts` engines or
    attention ranks of `pool` sharing `load`."""
    split = shares(load, parts)
    runs = [(_engine_run(model, hw, pool, engine, share, kv_bytes, samples=len(split) > 1), engines)
            for share, engines in split]
    if any(sim is None for (sim, _), _ in runs):
        return None, 0, 0
    (sim, fit), engines = runs[0]
    if len(runs) == 1:
        return sim, engines, fit
    return pooled(tuple((sim, engines) for (sim, _), engines in runs)), 1, fit


def serve(model: ModelSpec, hw: HardwareSpec, engine: EngineSpec, load: Load, pool: Pool,
          kv_dtype: str = "", source: str = "") -> dict:
    """Aggregated serving: `pool.workers` engines, each of `pool.attention_dp` attention ranks,
    share the load as evenly as whole requests go (shares)."""
    check_pool(pool, source)
    check_load(load, source)
    kv_bytes = kv_bytes_per_element(hw, kv_dtype, source)
    ranks = pool.workers * pool.attention_dp
    sim, engines, fit = _pool_run(model, hw, pool, engine, load, kv_bytes, ranks)
    return _record(sim, engines, pool.gpus, fit * ranks)


def _record(sim: SimResult | None, ranks: int, gpus: int, kv_requests: int, extra_ttft_s: float = 0.0) -> dict:
    if sim is None:
        return {"feasible": False, "max_concurrency_kv": 0, **{k: math.nan for k in SERVE_COLUMNS[1:]}}
    tokens_s = ranks * sim.output_tokens / sim.duration_s
    ttft = [v + extra_ttft_s for v in sim.ttft_s]
    record = {"feasible": True, "max_concurrency_kv": kv_requests,
              "ttft_s": ttft[0], "ttft_p50_s": ttft[1], "ttft_p90_s": ttft[2], "ttft_p99_s": ttft[3],
              "tpot_s": sim.tpot_s[0], "tpot_p50_s": sim.tpot_s[1], "tpot_p90_s": sim.tpot_s[2],
              "tpot_p99_s": sim.tpot_s[3],
              "request_s": sim.request_s[0] + extra_ttft_s, "request_p50_s": sim.request_s[1] + extra_ttft_s,
              "request_p90_s": sim.request_s[2] + extra_ttft_s, "request_p99_s": sim.request_s[3] + extra_ttft_s,
              "output_tokens_per_s": tokens_s, "output_tokens_per_s_per_gpu": tokens_s / gpus,
              "output_tokens_per_s_per_user": 1.0 / sim.tpot_s[0] if sim.tpot_s[0] > 0 else math.nan,
              "busy_s": ranks * sim.busy_s, "duration_s": sim.duration_s,
              "prefill_tokens": ranks * sim.prefill_tokens, "decode_tokens": ranks * sim.decode_tokens,
              "iterations": ranks * sim.iterations, "preemptions": ranks * sim.preemptions}
    return record


SERVE_COLUMNS = ("max_concurrency_kv", "ttft_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_s", "tpot_p50_s",
                 "tpot_p90_s", "tpot_p99_s", "request_s", "request_p50_s", "request_p90_s", "request_p99_s",
                 "output_tokens_per_s",
                 "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "busy_s", "duration_s",
                 "prefill_tokens", "decode_tokens", "iterations", "preemptions")


def kv_transfer_s(model: ModelSpec, hw: HardwareSpec, isl: int, kv_bytes: float, prefill: Pool, decode: Pool) -> float:
    """Seconds to move one request's KV cache from a prefill engine to a decode engine: each
    prefill rank sends its heads' share point to point, over NVLink when both pools fit in one
    NVLink domain, else over the next network level."""
    gpus = prefill.gpus + decode.gpus
    dims = hw.dims_for(gpus)
    level = 0 if dims[0].size >= gpus or len(dims) == 1 else 1
    per_rank = 2 * model.layers * max(1, model.kv_heads // prefill.tp) * model.head_dim * kv_bytes * isl / prefill.pp
    return sum(collective_time(hw, dims, "send_recv", per_rank, ((level, 2),)).values())


# Rounds of the fixed point that splits a closed loop's requests between the two pools.
DISAGG_ROUNDS = 3


def serve_disagg(model: ModelSpec, hw: HardwareSpec, engine: EngineSpec, load: Load, prefill: Pool, decode: Pool,
                 kv_dtype: str = "", source: str = "") -> dict:
    """Disaggregated serving: prefill engines compute prompts and first tokens, hand the KV
    cache over, decode engines continue. Each pool is simulated with its own queue. In a closed
    loop every client slot cycles through both pools: the prefill pool sees the whole first wave
    at once, then each slot's next request only after its KV transfer and decode (the decode
    pool's time per request, found by a fixed point), so prefills queue when the prefill pool is
    the bottleneck or the wave is large; the decode pool holds the requests in flight as its
    time takes them (Little's law: N_decode = throughput x time in decode)."""
    check_pool(prefill, source, "prefill_")
    check_pool(decode, source, "decode_")
    check_load(load, source)
    kv_bytes = kv_bytes_per_element(hw, kv_dtype, source)
    transfer_s = kv_transfer_s(model, hw, load.isl, kv_bytes, prefill, decode)
    p_ranks, d_ranks = prefill.workers * prefill.attention_dp, decode.workers * decode.attention_dp
    gpus = prefill.gpus + decode.gpus
    first_load = replace(load, osl=1)
    next_load = replace(load, prefilled=True)
    if not load.concurrency:
        p_sim, p_engines, _ = _pool_run(model, hw, prefill, engine, first_load, kv_bytes, p_ranks)
        d_sim, d_engines, fit = _pool_run(model, hw, decode, engine, next_load, kv_bytes, d_ranks)
        return _disagg_record(p_sim, p_engines, d_sim, d_engines, gpus, fit * d_ranks, transfer_s)
    in_decode = float(load.concurrency)
    for _ in range(DISAGG_ROUNDS):
        decode_load = replace(next_load, concurrency=max(1, round(in_decode)))
        d_sim, d_engines, fit = _pool_run(model, hw, decode, engine, decode_load, kv_bytes, d_ranks)
        if d_sim is None:
            p_sim = None
            break
        d_time = d_sim.request_s[0]
        p_sim, p_engines, _ = _pool_run(model, hw, prefill, engine, replace(first_load, return_s=transfer_s + d_time),
                                        kv_bytes, p_ranks)
        if p_sim is None:
            break
        rate = load.concurrency / (p_sim.ttft_s[0] + transfer_s + d_time)
        in_decode = rate * d_time
        # the prefill pool paces the decode pool's first wave: it arrives at the loop's rate,
        # not all at once as the client sent it
        next_load = replace(next_load, ramp_share=0.0, ramp_s=in_decode / rate)
    return _disagg_record(p_sim, p_engines, d_sim, d_engines, gpus, fit * d_ranks, transfer_s)


def _disagg_record(p_sim, p_engines, d_sim, d_engines, gpus, kv_requests, transfer_s) -> dict:
    """The record of a disaggregated run: `p_sim` and `d_sim` each standing for that many
    engines (or attention ranks) of its pool (_pool_run)."""
    if p_sim is None:
        return _record(None, 1, gpus, 0)
    record = _record(d_sim, d_engines, gpus, kv_requests, p_sim.ttft_s[0] + transfer_s)
    if d_sim is None:
        return record
    for name, value in zip(("ttft_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s"), p_sim.ttft_s):
        record[name] = value + transfer_s
    record["kv_transfer_s"] = transfer_s
    record["busy_s"] += p_engines * p_sim.busy_s
    record["prefill_tokens"] += p_engines * p_sim.prefill_tokens
    return record
