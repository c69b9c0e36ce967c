"""Speed of the core model, printed (asserts nothing):
1. warm-memo throughput over legal training layouts of Llama3.1-70B on 64 A100s;
2. the GPT-1T 512-GPU validation case from a cold process: wall time and peak RSS;
3. Llama3.1-70B training on 64 A100s (tp8 pp4 dp2, 1F1B and interleaved over 5 chunks)
   replayed on the network simulator, astra-hierarchical and astra-flattened, per
   configuration on one core."""
import itertools
import json
import statistics
import subprocess
import sys
import time

import core

COLD_CASE = r"""
import json, resource, time
start = time.perf_counter()
import core
model = core.load_model("gpt-1t")
hw = core.load_hardware("a100-sxm4-80gb")
par = core.Parallelism(tp=8, pp=64, dp=1, sp=True, recompute="selective", micro_batch=1)
record = core.evaluate(model, hw, par, core.TrainWorkload(global_batch=512, seq=2048), 512)
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_s": elapsed, "rss_bytes": rss, "step_time_s": record["step_time_s"]}))
"""


def training_layouts(model, hw, gpus: int, work) -> list:
    layouts = []
    for tp, pp, cp, zero, mb, recompute in itertools.product(
            (1, 2, 4, 8), (1, 2, 4, 8), (1, 2), (0, 1, 2, 3), (1, 2, 4), ("none", "selective", "full")):
        dp = gpus // (tp * pp * cp)
        par = core.Parallelism(dp=dp, tp=tp, pp=pp, cp=cp, sp=tp > 1, zero=zero, micro_batch=mb,
                               recompute=recompute)
        if core.check_layout(model, hw, par, work, gpus) is None:
            layouts.append(par)
    return layouts


def main() -> None:
    # First, while this process is small: a child's peak RSS counts what it forked from.
    out = subprocess.run([sys.executable, "-c", COLD_CASE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    print(f"gpt-1t on 512 x a100-sxm4-80gb (tp8 pp64, cold process, imports included): "
          f"{result['wall_s']:.3f} s, peak RSS {result['rss_bytes'] / 2**20:.0f} MiB, "
          f"predicted step {result['step_time_s']:.2f} s")

    model = core.load_model("llama3.1-70b")
    hw = core.load_hardware("a100-sxm4-80gb")
    work = core.TrainWorkload(global_batch=64, seq=4096)
    layouts = training_layouts(model, hw, 64, work)
    start = time.perf_counter()
    for par in layouts:
        core.evaluate(model, hw, par, work, 64, time_infeasible=True)
    cold = time.perf_counter() - start
    rounds = []
    for _ in range(7):
        start = time.perf_counter()
        for par in layouts:
            core.evaluate(model, hw, par, work, 64, time_infeasible=True)
        rounds.append(time.perf_counter() - start)
    best, median = min(rounds), statistics.median(rounds)
    print(f"llama3.1-70b on 64 x a100-sxm4-80gb: {len(layouts)} legal training layouts")
    print(f"  first pass (cold memo): {len(layouts) / cold:,.0f} configs/s")
    print(f"  warm memo:              {len(layouts) / best:,.0f} configs/s best of {len(rounds)} passes "
          f"({1e3 * best / len(layouts):.3f} ms each), {len(layouts) / median:,.0f} median "
          "(a shared machine's other load only ever slows a pass)")
    plain = core.Parallelism(tp=8, pp=4, dp=2, sp=True, recompute="selective")
    interleaved = core.Parallelism(tp=8, pp=4, dp=2, sp=True, recompute="selective", schedule="interleaved",
                                   virtual_stages=5)
    for name, replay_layout in (("tp8 pp4 dp2", plain), ("tp8 pp4 vp5 dp2", interleaved)):
        for backend in ("astra-hierarchical", "astra-flattened"):
            core.evaluate(model, hw, replay_layout, work, 64, backend=backend)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                record = core.evaluate(model, hw, replay_layout, work, 64, backend=backend)
                times.append(time.perf_counter() - start)
            print(f"llama3.1-70b {name} on 64 GPUs, {backend}: {1e3 * min(times):.0f} ms per configuration "
                  f"(best of 3; step {record['step_time_s']:.3f} s)")


if __name__ == "__main__":
    main()
