"""The serving engine's iteration loop as plain Python, statement for statement what the compiled
loop (core/serving/src/loop.cpp) does: the reference tests/test_serving_loop.py holds it to, bit
for bit. It was the simulator itself until the loop was compiled for speed."""
import heapq
import math
from collections import deque

from core.serving.simulate import Load, SimResult, requests


def _defined(values, weights):
    """Values that exist (a one-token request has no time per output token) and their weights."""
    kept = [(v, w) for v, w in zip(values, weights) if not math.isnan(v)]
    return [v for v, _ in kept], [w for _, w in kept]


def _stats(values, weights) -> tuple:
    """Weighted mean, p50, p90, p99."""
    total = sum(weights)
    if not total:
        return (math.nan,) * 4
    mean = sum(v * w for v, w in zip(values, weights)) / total
    ordered = sorted(zip(values, weights))
    out, seen, wanted = [], 0.0, [0.5, 0.9, 0.99]
    for value, weight in ordered:
        seen += weight
        while wanted and seen >= wanted[0] * total - 1e-9:
            out.append(value)
            wanted.pop(0)
    while wanted:
        out.append(ordered[-1][0])
        wanted.pop(0)
    return (mean, *out)


def simulate(it, engine, load: Load, kv_tokens: int, state_tokens: int = 0) -> SimResult:
    """Serve `load` on one engine whose KV cache holds `kv_tokens` tokens, one scheduler turn at a
    time; each request also holds `state_tokens` of it (a recurrent state)."""
    isl, osl, arrival, first_wave, warmup = requests(load)
    n = load.requests
    closed = load.concurrency > 0
    block = engine.kv_block_tokens
    reserve = engine.kv_policy == "reserve"
    need = list(isl)  # prompt tokens still to compute (more after a preemption)
    done = [0] * n  # of them computed
    out_left = list(osl)  # output tokens still to make
    first = [math.nan] * n
    join = [0] * n  # decode clock when it joined the decodes, and its context then
    ctx0 = [0] * n
    decoding = [False] * n
    waiting = deque()
    prefilling = []
    heap = []  # (decode clock at which it ends, rid)
    order = []  # decoding rids by join, newest last (preemption victims)
    unseen = []  # rids whose first token the client sees only when their first decode step ends
    ttft, tpot, latency, weight = [], [], [], []
    now, clock = 0.0, 0
    issued = completed = 0
    scheduled = first_wave  # requests whose arrival is known (the first wave's, then each successor's)
    decodes = sum_base = 0  # sum of decode contexts = sum_base + decodes * clock
    kv_used = 0
    busy = prefill_total = decode_total = iterations = 0.0
    preemptions = stale = finish_sum = 0
    held = 0  # iterations the prompts waiting to prefill have been held back (batch waiting)
    finish = [0] * n  # decode clock at which a decoding request ends
    seen = {}
    cyclic = closed and load.length_spread <= 0 and load.return_s == 0

    def footprint(rid):
        tokens = isl[rid] + osl[rid] if reserve else need[rid]
        return -(-tokens // block) * block + state_tokens

    def join_decodes(rid):
        nonlocal decodes, sum_base, finish_sum
        finish[rid] = clock + max(0, out_left[rid])
        finish_sum += finish[rid]
        heapq.heappush(heap, (finish[rid], rid))
        decoding[rid] = True
        join[rid], ctx0[rid] = clock, need[rid]
        order.append(rid)
        decodes += 1
        sum_base += ctx0[rid] - clock

    while completed < n:
        while issued < scheduled and arrival[issued] <= now:
            waiting.append(issued)
            issued += 1
        active = len(prefilling) + decodes
        while waiting and active < engine.max_batch:
            rid = waiting[0]
            # on demand, a newcomer also leaves every running decode its next token, so a
            # preempted request is not readmitted straight into the room it was evicted from
            cost = footprint(rid) + (0 if reserve else decodes + len(prefilling) + 1)
            if kv_used + cost > kv_tokens and active:
                break
            waiting.popleft()
            kv_used += footprint(rid)
            active += 1
            if load.prefilled and math.isnan(first[rid]):
                # its prompt was computed elsewhere, its first token made there
                done[rid], first[rid] = need[rid], arrival[rid]
                out_left[rid] -= 1
                join_decodes(rid)
            else:
                prefilling.append(rid)
        if not prefilling and not decodes:
            now = max(now, arrival[issued])  # idle until the next arrival
            continue
        chunks = []
        if prefilling:
            budget = engine.max_num_tokens - (decodes if engine.mixed_batches else 0)
            for rid in prefilling:
                left = need[rid] - done[rid]
                if budget <= 0 or (not engine.chunked_prefill and left > budget and chunks):
                    break
                take = min(left, budget)
                chunks.append((rid, take))
                budget -= take
        hold = 0  # batch waiting: the picked prompts wait while decodes run, `hold` iterations at most
        if chunks and decodes and engine.batch_wait_iters > 0:
            tokens = decodes + sum(take for _, take in chunks)
            if held < engine.batch_wait_iters and tokens < engine.batch_wait_tokens_ratio * engine.max_num_tokens:
                chunks, hold = [], engine.batch_wait_iters - held
            else:
                held = 0
        run_decodes = decodes if (engine.mixed_batches or not chunks) else 0
        steps = 1
        if run_decodes and not chunks:
            steps = int(heap[0][0] - clock)
            if hold:
                steps = min(steps, hold)
            if issued < scheduled:
                step_s = it.time_s(0, 0, decodes, (sum_base + decodes * clock) // decodes,
                                   decodes <= engine.cuda_graph_max_batch)
                steps = min(steps, max(1, math.ceil((arrival[issued] - now) / step_s)))
            if not reserve:
                room = (kv_tokens - kv_used) // decodes
                if room <= 0:
                    victim = order.pop()
                    while not decoding[victim]:
                        victim = order.pop()
                    decoding[victim] = False
                    finish_sum -= finish[victim]
                    stale += 1
                    decodes -= 1
                    sum_base -= ctx0[victim] - join[victim]
                    kv_used -= footprint(victim) + (clock - join[victim])
                    out_left[victim] -= clock - join[victim]  # made since it joined: kept, recomputed
                    need[victim], done[victim] = isl[victim] + osl[victim] - out_left[victim], 0
                    waiting.appendleft(victim)
                    preemptions += 1
                    continue
                steps = max(1, min(steps, room))
        if chunks:
            prefill = sum(take for _, take in chunks)
            past = done[chunks[0][0]]
            context = (sum_base + run_decodes * clock) // run_decodes if run_decodes else 0
            seconds = it.time_s(prefill, past, run_decodes, context, False)
            first_step = seconds
        else:
            prefill = 0
            c0 = (sum_base + decodes * clock) // decodes
            graph = decodes <= engine.cuda_graph_max_batch
            seconds = it.time_s(0, 0, decodes, c0, graph)
            first_step = seconds
            if steps > 1:
                seconds = steps * (seconds + it.time_s(0, 0, decodes, c0 + steps - 1, graph)) / 2
        if run_decodes:
            for rid in [r for r in unseen if decoding[r]]:
                first[rid] = now + first_step
                unseen.remove(rid)
        now += seconds
        busy += seconds
        iterations += steps
        prefill_total += prefill
        held += steps if hold else 0
        if run_decodes:
            clock += steps
            decode_total += run_decodes * steps
            if not reserve:
                kv_used += run_decodes * steps
        for rid, take in chunks:
            done[rid] += take
            if done[rid] < need[rid]:
                continue
            prefilling.remove(rid)
            if math.isnan(first[rid]):
                first[rid] = now
                out_left[rid] -= 1
                if engine.first_token_with_decode and out_left[rid] > 0:
                    unseen.append(rid)
            join_decodes(rid)
        finished = False
        while heap and heap[0][0] <= clock:
            end, rid = heapq.heappop(heap)
            if not decoding[rid] or end != finish[rid]:
                stale -= 1
                continue  # preempted since it was queued
            finish_sum -= end
            decoding[rid] = False
            decodes -= 1
            sum_base -= ctx0[rid] - join[rid]
            kv_used -= footprint(rid) + (0 if reserve else clock - join[rid])
            completed += 1
            if rid >= warmup:
                ttft.append(first[rid] - arrival[rid] + engine.request_overhead_s)
                latency.append(now - arrival[rid] + engine.request_overhead_s)
                tpot.append((now - first[rid]) / (osl[rid] - 1) if osl[rid] > 1 else math.nan)
                weight.append(1)
            finished = True
            if closed and scheduled < n:  # the successor arrives return_s later (at once: it waits now)
                arrival[scheduled] = now + load.return_s
                scheduled += 1
                if load.return_s == 0:
                    waiting.append(issued)
                    issued += 1
        if len(order) > 2 * decodes + 64:
            order = [r for r in order if decoding[r]]
        if not (finished and cyclic and not stale and issued >= first_wave and completed >= warmup):
            continue
        # a cheap fingerprint of the scheduler's state first, the full state only on a match
        key = (tuple(need[r] - done[r] for r in prefilling), len(waiting), kv_used, decodes,
               finish_sum - decodes * clock, len(unseen), held)
        totals = (now, clock, busy, prefill_total, decode_total, iterations)
        earlier = seen.get(key)
        if earlier is None or sorted(e - earlier[1][1] for e, _ in earlier[0]) != sorted(e - clock for e, _ in heap):
            seen[key] = (heap[:], totals, issued, len(weight))
            continue
        _, before, issued0, record0 = seen.pop(key)
        per_cycle = issued - issued0
        repeats = (n - issued) // per_cycle - 1 if per_cycle else 0
        if repeats <= 0:
            continue
        # the scheduler is where it was a cycle ago: the next `repeats` cycles repeat this one
        shift = [repeats * (x - y) for x, y in zip(totals, before)]
        for w in range(record0, len(weight)):
            weight[w] += repeats
        completed += repeats * per_cycle
        issued += repeats * per_cycle
        scheduled += repeats * per_cycle
        for rid in (*prefilling, *waiting, *(r for _, r in heap)):
            arrival[rid] += shift[0]
            first[rid] += shift[0]
        heap = [(e + shift[1], r) for e, r in heap]
        for _, rid in heap:
            join[rid] += shift[1]
            finish[rid] += shift[1]
        sum_base -= decodes * shift[1]
        finish_sum += decodes * shift[1]
        now, clock, busy, prefill_total, decode_total, iterations = (x + y for x, y in zip(totals, shift))
        seen.clear()
    start = 0.0 if closed else arrival[0]
    return SimResult(_stats(ttft, weight), _stats(*_defined(tpot, weight)), _stats(latency, weight), now - start,
                     sum(osl[i] for i in range(n)), n, busy, prefill_total, decode_total, iterations, preemptions)
