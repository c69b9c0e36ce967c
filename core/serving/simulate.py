"""The iteration loop of one serving engine over a stream of requests.

Each iteration the scheduler admits waiting requests while the batch cap and the KV cache
allow, then runs the decodes in flight and prefill chunks within the token budget (or, for
an engine that does not mix them, a prefill batch that stalls decoding); an engine that
batch-waits (EngineSpec.batch_wait_iters) holds the picked prompts back while decodes run.
Stretches where nothing but decoding happens are advanced in one step up to the next event (a
request ending, an arrival, the cache filling, a held prompt's wait running out), their time
the mean of the first and last iteration's (decode time is linear in context). A closed loop
with fixed lengths settles into a cycle: when the scheduler's state recurs, the cycle's
requests are repeated instead of simulated again."""
import random
from dataclasses import dataclass

from . import _loop
from .engines import EngineSpec
from .iteration import IterationModel


@dataclass(frozen=True)
class Load:
    """Requests offered to one engine: `isl` prompt and `osl` output tokens (each drawn
    uniformly within +-`length_spread` of them when it is > 0), `concurrency` kept in flight
    (closed loop) or arriving at `request_rate` per second (open loop, Poisson)."""
    isl: int
    osl: int
    concurrency: int = 0
    request_rate: float = 0.0
    requests: int = 1000
    length_spread: float = 0.0
    seed: int = 0
    prefilled: bool = False  # requests arrive with their KV cache and first token (a disaggregated decode pool)
    # closed loop: the first `concurrency` requests arrive spread over `ramp_s` seconds, or over
    # `ramp_share` of one request's lifetime, as a benchmark client ramps up; with
    # `skip_warmup` they are left out of the figures
    ramp_s: float = 0.0
    ramp_share: float = 0.0
    skip_warmup: bool = False
    # closed loop: seconds from a request's end to its successor's arrival (0: at once). A
    # disaggregated prefill pool's client slot comes back only after the KV transfer and decode.
    return_s: float = 0.0


@dataclass(frozen=True)
class SimResult:
    ttft_s: tuple  # (mean, p50, p90, p99)
    tpot_s: tuple
    request_s: tuple
    duration_s: float  # first arrival to last completion
    output_tokens: float
    requests: float
    busy_s: float  # time the engine spent in iterations
    prefill_tokens: float  # prompt tokens computed, recomputation after preemption included
    decode_tokens: float
    iterations: float
    preemptions: int
    # with simulate(samples=True): each finished request's (TTFT, TPOT, latency, weight), which
    # pool() merges shares of one load by
    samples: tuple | None = None


def _lengths(load: Load, rng: random.Random):
    if load.length_spread <= 0:
        return [load.isl] * load.requests, [load.osl] * load.requests
    s = load.length_spread

    def draw(n):
        return max(1, round(n * rng.uniform(1 - s, 1 + s)))

    return [draw(load.isl) for _ in range(load.requests)], [draw(load.osl) for _ in range(load.requests)]


def requests(load: Load) -> tuple:
    """(prompt lengths, output lengths, arrival times, requests in the first wave, requests left
    out of the figures as warm-up) of `load`: a closed loop's first wave spread over its ramp
    (the rest arrive as requests end), an open loop's Poisson arrivals."""
    rng = random.Random(load.seed)
    isl, osl = _lengths(load, rng)
    n = load.requests
    arrival = [0.0] * n
    if load.concurrency > 0:
        first_wave = min(load.concurrency, n)
        arrival[:first_wave] = [i * load.ramp_s / first_wave for i in range(first_wave)]
        return isl, osl, arrival, first_wave, first_wave if load.skip_warmup and n > first_wave else 0
    t = 0.0
    for i in range(n):
        t += rng.expovariate(load.request_rate)
        arrival[i] = t
    return isl, osl, arrival, n, 0


def simulate(it: IterationModel, engine: EngineSpec, load: Load, kv_tokens: int, samples: bool = False,
             state_tokens: int = 0) -> SimResult:
    """Serve `load` on one engine whose KV cache holds `kv_tokens` tokens: the iteration loop
    run compiled (core/serving/src/loop.cpp) on `it`'s memo; with `samples`, keeping each
    finished request's figures (SimResult.samples). `state_tokens`: the cache a request's fixed
    recurrent state takes beside its tokens' blocks, in tokens."""
    isl, osl, arrival, first_wave, warmup = requests(load)
    closed = load.concurrency > 0
    out = _loop.simulate(
        it.memo, it._time_s, engine.mixed_batches, engine.chunked_prefill, engine.kv_policy == "reserve",
        engine.kv_block_tokens, engine.max_num_tokens, engine.max_batch, engine.cuda_graph_max_batch,
        engine.request_overhead_s, engine.first_token_with_decode, isl, osl, arrival, first_wave, warmup, closed,
        closed and load.length_spread <= 0, load.prefilled, kv_tokens, load.return_s, engine.batch_wait_iters,
        engine.batch_wait_tokens_ratio, samples, state_tokens)
    figures, kept = (out[0], tuple(out[1:])) if samples else (out, None)
    ttft, tpot, latency, now, busy, prefill, decode, iterations, preemptions = figures
    start = 0.0 if closed else arrival[0]
    return SimResult(ttft, tpot, latency, now - start, sum(osl), load.requests, busy, prefill, decode, iterations,
                     preemptions, kept)


def pool(parts: tuple) -> SimResult:
    """One result for (result, engines running it) pairs: engines serving uneven shares of one
    load (simulated with samples), their requests' figures pooled, their totals summed, over the
    longest one's duration. Output tokens are scaled so that output_tokens / duration_s is the
    engines' summed rate."""
    columns = [[], [], [], []]
    for sim, engines in parts:
        ttft, tpot, latency, weights = sim.samples
        for column, values in zip(columns, (ttft, tpot, latency, [w * engines for w in weights])):
            column.extend(values)
    duration = max(sim.duration_s for sim, _ in parts)
    rate = sum(engines * sim.output_tokens / sim.duration_s for sim, engines in parts)

    def total(field):
        return sum(engines * getattr(sim, field) for sim, engines in parts)
    ttft, tpot, latency = (_loop.weighted_stats(values, columns[3]) for values in columns[:3])
    return SimResult(ttft, tpot, latency, duration, rate * duration, total("requests"), total("busy_s"),
                     total("prefill_tokens"), total("decode_tokens"), total("iterations"), int(total("preemptions")))
