"""Measure one GPU's kernels and the clocks it holds under load, for the operator model's
GPU-family parameters (docs/accuracy.md, "Measured on our own H100"). Runs on a machine with
an NVIDIA GPU, PyTorch, Triton and nvidia-ml-py; writes CSVs under --out and prints a summary.

What it measures, each with random inputs (never zeros, which draw less power) and the L2
flushed between timed calls (triton.testing.do_bench), median of repeats:
- gemm.csv: BF16 (torch.mm) and FP8 e4m3 per-tensor-scaled (torch._scaled_mm) GEMMs on the
  m, n, k grid of the kernel tables, so rows compare one to one with those tables;
- pointwise.csv: elementwise, normalisation, softmax, FP8 cast, amax and fused AdamW kernels,
  with the bytes each must move, for the share of HBM bandwidth such kernels reach;
- attention.csv: fused causal attention forward and forward + backward (cuDNN and
  FlashAttention-2 backends of scaled_dot_product_attention), the training backward no kernel
  table holds;
- launch.csv: back-to-back tiny kernels launched eagerly and from a CUDA graph (launch gap);
- sustained.csv and clocks.csv: long loops of one kernel (BF16 GEMM, FP8 GEMM, attention
  forward + backward, HBM copy) with the achieved rate per window beside the SM clock, power
  draw, temperature and throttle reasons sampled every 50 ms by NVML: the clock a
  power-limited GPU sustains, which whole steps otherwise have to fit.

With --curve it measures instead what the first run left open: curve.csv and curve_clocks.csv,
loops of graded power (a BF16 GEMM then an idle spin of growing length; GEMMs of other sizes
and dtypes) for the clock the board settles at against its draw, and attention_tiles.csv,
cuDNN attention forward and backward over sequence length and batch x heads. With --tiles,
attention_tiles_large.csv: the same on both backends at batch x heads large enough that the
GPU's work, not autograd's launch, sets the time. With --stream, stream.csv and
stream_clocks.csv: decode-like GEMMs reading their weights from HBM, with clocks and power.
With --bursts, bursts.csv, transient.csv and bursts_clocks.csv: long GEMMs of the kernel tables'
grid timed the way the tables were taken (six copies of the layer replayed from a CUDA graph,
three replays of warm-up, six timed), each replay on its own, for how far a kernel's own length
pulls the clock down; and the first two seconds of a GEMM loop after idle, call by call, for how
fast the clock falls once the board reaches its power limit.

With --block-fp8, block_fp8.csv: per-tensor and block-scaled (1 x 128 / 128 x 128) FP8 GEMMs of
the same shapes, for the block-scaled share of the per-tensor rate.

With --graph-floor, graph_floor.csv: chains of 1,000 dependent small kernels (elementwise adds of
one block to several waves of blocks over L2-resident data, and small GEMMs) replayed from a CUDA
graph and launched eagerly, for what each kernel of a CUDA-graph decode step costs on the GPU
beyond its own work.

With --layers, layers.csv: one tensor-parallel rank's transformer layer (GPT-3 175B and Llama 3
70B at tp 4), forward and backward in BF16 eager PyTorch, at 1, 2 and 4 sequences per
micro-batch, for what a larger micro-batch gains per token on one GPU.

With --gemm-grid TABLE (a kernel table's gemm_perf.parquet), gemm_grid_<dtype>.parquet and
gemm_grid_kernels_<dtype>.parquet: every BF16 and FP8 shape of that table timed in its protocol,
and the cuBLAS kernels each one launches, for how far our tile model is from the library's own.

    python3 scripts/measure_gpu_kernels.py --out DIR [--quick | --curve | --tiles | --stream | --bursts | --block-fp8 |
                                                      --layers | --graph-floor | --gemm-grid TABLE]
"""
import argparse
import csv
import json
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from triton.testing import do_bench

GEMM_M = (1, 16, 64, 256, 1024, 4096, 8192, 16384)
GEMM_NK = ((4096, 4096), (8192, 8192), (1024, 8192), (8192, 1024), (5120, 5120), (12288, 4096),
           (16384, 8192), (8192, 16384))
POINTWISE_ELEMENTS = (2**22, 2**25, 2**28)
POINTWISE_HIDDEN = 8192
ATTENTION_SHAPES = (  # batch, sequence, heads, head dim
    (16, 1024, 32, 128), (8, 2048, 32, 128), (4, 4096, 32, 128), (2, 8192, 32, 128),
    (1, 16384, 32, 128), (1, 32768, 32, 128), (4, 4096, 32, 64), (1, 16384, 32, 64))
ATTENTION_BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION")
SAMPLE_PERIOD_S = 0.05
WINDOW_S = 0.25


def median_ms(fn, rep_ms=100):
    return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")


def write_csv(path, rows):
    if not rows:
        return
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def section(name, job, out, *args):
    """Run one measurement section; a failure is logged and the others still run."""
    start = time.time()
    try:
        rows = job(*args)
    except Exception:
        print(f"[{name}] FAILED after {time.time() - start:.1f} s")
        traceback.print_exc()
        return []
    write_csv(out / f"{name}.csv", rows)
    print(f"[{name}] {len(rows)} rows in {time.time() - start:.1f} s", flush=True)
    return rows


def fp8_operands(m, n, k):
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def bf16_operands(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.mm(a, w.t())


GEMM_BUILDERS = {"bfloat16": bf16_operands, "fp8": fp8_operands}


def measure_gemms(quick):
    rows = []
    for dtype, build in GEMM_BUILDERS.items():
        for n, k in GEMM_NK[:3] if quick else GEMM_NK:
            for m in GEMM_M:
                row = {"dtype": dtype, "m": m, "n": n, "k": k}
                try:
                    fn = build(m, n, k)
                    ms = median_ms(fn)
                    row.update(latency_ms=ms, tflops=2 * m * n * k / ms / 1e9)
                except RuntimeError as error:
                    row["error"] = str(error).splitlines()[0][:160]
                rows.append(row)
                torch.cuda.empty_cache()
    return rows


def pointwise_ops(elements):
    """name -> (callable, bytes it must move at least, kernels it launches)."""
    rows_ = elements // POINTWISE_HIDDEN
    x = torch.randn(rows_, POINTWISE_HIDDEN, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    weight = torch.randn(POINTWISE_HIDDEN, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn_like(weight)
    fp8 = torch.empty(x.shape, device="cuda", dtype=torch.float8_e4m3fn)
    two = 2 * elements
    ops = {
        "copy": (lambda: z.copy_(x), 2 * two, 1),
        "add": (lambda: torch.add(x, y, out=z), 3 * two, 1),
        "gelu_tanh": (lambda: F.gelu(x, approximate="tanh"), 2 * two, 1),
        "silu": (lambda: F.silu(x), 2 * two, 1),
        "layer_norm": (lambda: F.layer_norm(x, (POINTWISE_HIDDEN,), weight, bias), 2 * two, 1),
        "rms_norm": (lambda: F.rms_norm(x, (POINTWISE_HIDDEN,), weight), 2 * two, 1),
        "softmax": (lambda: torch.softmax(x, dim=-1), 2 * two, 1),
        "dropout": (lambda: F.dropout(x, 0.1, training=True), 2 * two + elements, 1),
        "cast_fp8": (lambda: fp8.copy_(x), two + elements, 1),
        "aminmax": (lambda: torch.aminmax(x), two, 1),
    }
    return ops


def measure_pointwise(quick):
    rows = []
    for elements in POINTWISE_ELEMENTS[1:] if quick else POINTWISE_ELEMENTS:
        for name, (fn, bytes_, kernels) in pointwise_ops(elements).items():
            ms = median_ms(fn)
            rows.append({"op": name, "elements": elements, "dtype": "bfloat16", "bytes": bytes_,
                         "kernels": kernels, "latency_ms": ms, "gbps": bytes_ / ms / 1e6})
        torch.cuda.empty_cache()
    rows.extend(measure_adamw(2**26 if quick else 2**28))
    return rows


def measure_adamw(params):
    """Fused AdamW over one FP32 tensor: reads param, grad, m, v; writes param, m, v."""
    param = torch.nn.Parameter(torch.randn(params, device="cuda"))
    param.grad = torch.randn_like(param)
    optimizer = torch.optim.AdamW([param], lr=1e-4, fused=True)
    optimizer.step()
    bytes_ = 4 * params * 7
    ms = median_ms(optimizer.step)
    del optimizer, param
    torch.cuda.empty_cache()
    return [{"op": "adamw_fused_fp32", "elements": params, "dtype": "float32", "bytes": bytes_,
             "kernels": 1, "latency_ms": ms, "gbps": bytes_ / ms / 1e6}]


def attention_tensors(batch, seq, heads, dim, grad):
    shape = (batch, heads, seq, dim)
    return [torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=grad) for _ in range(3)]


def attention_calls(batch, seq, heads, dim):
    """(forward, forward then backward) of causal attention on fresh random tensors, on the
    backend the caller's sdpa_kernel context picks."""
    q, k, v = attention_tensors(batch, seq, heads, dim, grad=True)
    grad_out = torch.randn_like(q)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        torch.autograd.grad(forward(), (q, k, v), grad_out)

    return forward, forward_backward


def timed_attention(backend, batch, seq, heads, dim):
    """One attention row: forward, forward + backward and backward times (ms)."""
    row = {"backend": backend, "batch": batch, "seq": seq, "heads": heads, "head_dim": dim, "causal": True,
           "fwd_flop": 2 * batch * heads * seq * seq * dim}  # 4 b h s^2 d, the causal half
    forward, forward_backward = attention_calls(batch, seq, heads, dim)
    with torch.no_grad():
        row["fwd_ms"] = median_ms(forward)
    row["fwd_bwd_ms"] = median_ms(forward_backward)
    row["bwd_ms"] = row["fwd_bwd_ms"] - row["fwd_ms"]
    return row


def measure_attention(quick):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for backend in ATTENTION_BACKENDS:
        for batch, seq, heads, dim in ATTENTION_SHAPES[:4] if quick else ATTENTION_SHAPES:
            try:
                with sdpa_kernel([getattr(SDPBackend, backend)]):
                    row = timed_attention(backend, batch, seq, heads, dim)
                row["fwd_tflops"] = row["fwd_flop"] / row["fwd_ms"] / 1e9
                row["bwd_tflops"] = 2.5 * row["fwd_flop"] / row["bwd_ms"] / 1e9
            except RuntimeError as error:
                row = {"backend": backend, "batch": batch, "seq": seq, "heads": heads, "head_dim": dim,
                       "error": str(error).splitlines()[0][:160]}
            rows.append(row)
            torch.cuda.empty_cache()
    return rows


def measure_launch(_quick):
    tiny = torch.zeros(1, device="cuda")
    count = 2000
    rows = []
    torch.cuda.synchronize()
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(count):
            tiny.add_(1)
        torch.cuda.synchronize()
        rows.append({"mode": "eager", "kernels": count, "per_kernel_us": (time.perf_counter() - start) / count * 1e6})
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            for _ in range(count):
                tiny.add_(1)
    torch.cuda.synchronize()
    for _ in range(3):
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        rows.append({"mode": "graph", "kernels": count, "per_kernel_us": (time.perf_counter() - start) / count * 1e6})
    rows.append({"mode": "do_bench_single", "kernels": 1, "per_kernel_us": median_ms(lambda: tiny.add_(1)) * 1e3})
    return rows


GRAPH_CHAIN = 1000
# (kernel, what it runs on): elementwise adds over 512 elements a block (PyTorch's vectorised
# elementwise kernel: 128 threads x 4), so one block, about one wave of 132 blocks, and 8 waves;
# GEMMs of decode size with weights small enough to stay in L2.
GRAPH_FLOOR_KERNELS = (("add", 512), ("add", 132 * 512), ("add", 8 * 132 * 512), ("add", 2**22),
                       ("mm", (1, 512, 512)), ("mm", (16, 1024, 1024)), ("mm", (64, 2048, 2048)))


def graph_floor_call(kind, size):
    if kind == "add":
        x = torch.rand(size, device="cuda")
        return lambda: x.add_(1.0)
    m, n, k = size
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.mm(a, w.t(), out=out)


def chain_us(call, graph):
    """Microseconds per kernel of GRAPH_CHAIN calls, replayed from a CUDA graph or launched eagerly."""
    if graph:
        captured = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()
            with torch.cuda.graph(captured):
                for _ in range(GRAPH_CHAIN):
                    call()
        torch.cuda.synchronize()
        run = captured.replay
    else:
        def run():
            for _ in range(GRAPH_CHAIN):
                call()
    return median_ms(run, rep_ms=200) * 1e3 / GRAPH_CHAIN


def measure_graph_floor():
    rows = []
    for kind, size in GRAPH_FLOOR_KERNELS:
        call = graph_floor_call(kind, size)
        row = {"kernel": kind, "size": "x".join(map(str, size)) if isinstance(size, tuple) else size,
               "single_us": median_ms(call) * 1e3, "graph_us": chain_us(call, True), "eager_us": chain_us(call, False)}
        rows.append(row)
        print(f"{kind:4s} {row['size']!s:>16s} single {row['single_us']:7.2f} us  graph {row['graph_us']:6.2f}"
              f"  eager {row['eager_us']:6.2f} us per kernel", flush=True)
    return rows


class ClockSampler(threading.Thread):
    """Samples SM and memory clock, power, temperature and throttle reasons through NVML."""

    def __init__(self):
        super().__init__(daemon=True)
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        self.phase = "start"
        self.rows = []
        self.running = True
        self.period_s = SAMPLE_PERIOD_S

    def limits(self):
        nvml, handle = self.nvml, self.handle
        return {"power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
                "max_sm_clock_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
                "max_mem_clock_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)}

    def run(self):
        nvml, handle = self.nvml, self.handle
        while self.running:
            reasons = -1
            for getter in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
                try:
                    reasons = getattr(nvml, getter)(handle)
                    break
                except Exception:
                    continue
            self.rows.append({
                "t_s": time.time(), "phase": self.phase,
                "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
                "reasons": reasons})
            time.sleep(self.period_s)


def sustained_loads():
    """name -> (callable, FLOPs per call, bytes per call)."""
    size = 8192
    bf16 = bf16_operands(size, size, size)
    fp8 = fp8_operands(size, size, size)
    _, attention = attention_calls(4, 8192, 32, 128)

    tokens = torch.randn(16384, size, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)

    def mixed():  # a GEMM with the elementwise kernels that follow it in a layer
        out = torch.mm(tokens, weight.t())
        torch.add(F.gelu(out, approximate="tanh"), tokens)

    source = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)
    target = torch.empty_like(source)
    attention_flop = 3.5 * 2 * 4 * 32 * 8192 * 8192 * 128
    return {"gemm_bf16_8192": (bf16, 2 * size**3, 0), "gemm_fp8_8192": (fp8, 2 * size**3, 0),
            "attention_fwd_bwd_cudnn": (attention, attention_flop, 0),
            "gemm_gelu_add_bf16": (mixed, 2 * 16384 * size * size, 5 * 16384 * size * 2),
            "hbm_copy_1gib": (lambda: target.copy_(source), 0, 2 * source.numel() * 2)}


def measure_sustained(sampler, seconds, idle_s):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    sampler.phase = "idle"
    time.sleep(idle_s)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for name, (fn, flop, bytes_) in sustained_loads().items():
            try:
                rows += run_loop(sampler, name, fn, flop, bytes_, seconds)
            except RuntimeError:
                print(f"[sustained] {name} failed")
                traceback.print_exc()
            time.sleep(idle_s)
    return rows


def run_loop(sampler, name, fn, flop, bytes_, seconds):
    """One long loop of `fn` in windows of about WINDOW_S, labelled `name` for the sampler."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    inner = max(1, int(WINDOW_S / max(time.perf_counter() - start, 1e-5)))
    sampler.phase = name
    rows, end = [], time.time() + seconds
    while time.time() < end:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        rows.append({"phase": name, "t_s": time.time(), "calls": inner, "elapsed_s": elapsed,
                     "tflops": flop * inner / elapsed / 1e12, "gbps": bytes_ * inner / elapsed / 1e9})
    sampler.phase = "idle"
    return rows


def measure_clock_curve(sampler, seconds):
    """Loads of graded power, for the board's clock against its draw: a BF16 GEMM 8192^3
    followed by an idle spin of the SMs (torch.cuda._sleep, in clock cycles) of growing
    length, and GEMMs of other sizes and dtypes run back to back."""
    size = 8192
    bf16 = bf16_operands(size, size, size)
    flop = 2 * size**3
    rows = []
    for cycles in (0, 500_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000):
        def duty(cycles=cycles):
            bf16()
            if cycles:
                torch.cuda._sleep(cycles)
        rows += run_loop(sampler, f"duty_bf16_8192_sleep{cycles}", duty, flop, 0, seconds)
    for dtype, n in (("bf16", 2048), ("bf16", 4096), ("fp8", 4096), ("fp8", 2048)):
        fn = GEMM_BUILDERS["bfloat16" if dtype == "bf16" else "fp8"](n, n, n)
        rows += run_loop(sampler, f"gemm_{dtype}_{n}", fn, 2 * n**3, 0, seconds)
    return rows


SMALL_TILES = ((512, 1024, 2048, 4096), (32, 128, 512))
# Enough batch x heads at every length that the GPU's work, not autograd's launch, sets the time.
LARGE_TILES = ((256, 512, 1024, 2048, 4096), (1024, 4096))


def measure_weight_streams(sampler, seconds):
    """Loops of decode-like GEMMs whose weights (28672 x 8192 BF16, 470 MB, past the L2) stream
    from HBM each call, at a few token counts: the board's draw while reading weights."""
    n, k = 28672, 8192
    rows = []
    for m in (1, 16, 64, 256, 1024):
        fn = bf16_operands(m, n, k)
        rows += run_loop(sampler, f"stream_bf16_m{m}", fn, 2 * m * n * k, 2 * (n * k + m * k + m * n), seconds)
    return rows


def measure_attention_tiles(grid, backends):
    """Causal attention forward and backward over sequence length and batch x heads (head dim
    128), for the fixed cost per tile the backward carries at short sequences."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for backend in backends:
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            for seq in grid[0]:
                for batch_heads in grid[1]:
                    rows.append(timed_attention(backend, batch_heads // 32, seq, 32, 128))
                    torch.cuda.empty_cache()
    return rows


# Shapes of the kernel tables' grid whose BF16 time on an H200 spans 0.5 to 80 ms.
BURST_SHAPES = ((4096, 4096, 4096), (3840, 3584, 16384), (8192, 8192, 8192), (4352, 65536, 1536),
                (4096, 3584, 65536), (4096, 12288, 51200), (2049, 51200, 51200), (4352, 51200, 51200),
                (16384, 65536, 16384), (32768, 51200, 8192))
BURST_COPIES, BURST_WARMUP, BURST_RUNS = 6, 3, 6
BURST_IDLE_S = 1.0


def gemm_copies(dtype, m, n, k, copies):
    """`copies` GEMMs on one input, each with its own weights, as a model's layers are."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    if dtype == "bfloat16":
        return [lambda w=w: torch.mm(a, w.t()) for w in weights]
    one = torch.ones((), device="cuda", dtype=torch.float32)
    a8 = a.to(torch.float8_e4m3fn)
    weights8 = [w.to(torch.float8_e4m3fn) for w in weights]
    del weights
    return [lambda w=w: torch._scaled_mm(a8, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            for w in weights8]


def measure_bursts(sampler):
    """Each shape after an idle second: the short-burst median (do_bench) and the tables'
    protocol, every graph replay timed by CUDA events, with the sampler's phase naming it."""
    rows = []
    for dtype in GEMM_BUILDERS:
        for m, n, k in BURST_SHAPES:
            base = {"dtype": dtype, "m": m, "n": n, "k": k, "flop": 2 * m * n * k}
            try:
                calls = gemm_copies(dtype, m, n, k, BURST_COPIES)
                sampler.phase = "idle"
                time.sleep(BURST_IDLE_S)
                sampler.phase = f"burst_{dtype}_{m}x{n}x{k}"
                single = median_ms(calls[0], rep_ms=50)
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    for call in calls:
                        call()
                torch.cuda.synchronize()
                with torch.cuda.graph(graph):
                    for call in calls:
                        call()
                events = [torch.cuda.Event(enable_timing=True) for _ in range(BURST_WARMUP + BURST_RUNS + 1)]
                events[0].record()
                for index in range(BURST_WARMUP + BURST_RUNS):
                    graph.replay()
                    events[index + 1].record()
                torch.cuda.synchronize()
                for index in range(BURST_WARMUP + BURST_RUNS):
                    per_gemm = events[index].elapsed_time(events[index + 1]) / BURST_COPIES
                    rows.append(base | {"replay": index, "warmup": index < BURST_WARMUP,
                                        "per_gemm_ms": per_gemm, "do_bench_ms": single,
                                        "tflops": base["flop"] / per_gemm / 1e9})
                del graph, calls
            except RuntimeError as error:
                rows.append(base | {"error": str(error).splitlines()[0][:160]})
            sampler.phase = "idle"
            torch.cuda.empty_cache()
    return rows


def measure_transient(sampler, seconds=2.0, idle_s=3.0):
    """The first `seconds` of a loop of 8192^3 GEMMs after `idle_s` idle, each call timed by
    CUDA events: the call-by-call time as the clock settles."""
    rows = []
    size = 8192
    for dtype, build in GEMM_BUILDERS.items():
        fn = build(size, size, size)
        fn()
        torch.cuda.synchronize()
        calls = int(seconds / (2 * size**3 / (1500e12 if dtype == "fp8" else 800e12)))
        events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
        sampler.phase = "idle"
        time.sleep(idle_s)
        sampler.phase = f"transient_{dtype}_8192"
        start = time.time()
        events[0].record()
        for index in range(calls):
            fn()
            events[index + 1].record()
        torch.cuda.synchronize()
        sampler.phase = "idle"
        elapsed = 0.0
        for index in range(calls):
            call_ms = events[index].elapsed_time(events[index + 1])
            rows.append({"dtype": dtype, "call": index, "t_s": start + elapsed / 1e3,
                         "since_start_ms": elapsed, "call_ms": call_ms,
                         "tflops": 2 * size**3 / call_ms / 1e9})
            elapsed += call_ms
        del fn
        torch.cuda.empty_cache()
    return rows


def summarise_bursts(bursts, transient):
    for row in bursts:
        if row.get("replay") in (0, BURST_WARMUP, BURST_WARMUP + BURST_RUNS - 1):
            print(f"burst {row['dtype']:9s} {row['m']:6d} x {row['n']:6d} x {row['k']:6d} replay {row['replay']}"
                  f" {row['per_gemm_ms']:9.3f} ms (do_bench {row['do_bench_ms']:9.3f}) {row['tflops']:7.1f} TFLOP/s")
    for dtype in GEMM_BUILDERS:
        calls = [row for row in transient if row["dtype"] == dtype]
        for since_ms in (0, 50, 100, 200, 400, 800, 1600):
            near = [row for row in calls if row["since_start_ms"] >= since_ms][:5]
            if near:
                print(f"transient {dtype:9s} from {since_ms:5d} ms: {sum(r['tflops'] for r in near) / len(near):7.1f} TFLOP/s")


BLOCK_SHAPES = ((2048, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096),
                (4096, 4096, 14336), (16384, 8192, 8192), (1024, 8192, 8192), (256, 8192, 8192))


def blockwise_calls(m, n, k):
    """{variant: callable} of a block-scaled FP8 GEMM (1 x 128 scales on A, 128 x 128 on B) in
    the ways this PyTorch may offer it; each is tried, and the ones that run are timed."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    scale_a = torch.rand(k // 128, m, device="cuda").t()  # (m, k / 128), m-major as cuBLAS asks
    scale_b = torch.rand(n // 128, k // 128, device="cuda").t()  # (k / 128, n / 128)
    scale_b_rows = scale_b.contiguous()
    calls = {"scaled_mm": lambda: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b,
                                                      out_dtype=torch.bfloat16),
             "scaled_mm_b_rows": lambda: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b_rows,
                                                             out_dtype=torch.bfloat16)}
    functional = getattr(F, "scaled_mm", None)
    scaling = getattr(F, "ScalingType", None)
    if functional is not None and scaling is not None:
        calls["functional"] = lambda: functional(a, w.t(), scale_a, scaling.BlockWise1x128, scale_b,
                                                 scaling.BlockWise128x128, output_dtype=torch.bfloat16)
    return calls


def measure_block_fp8():
    """Per-tensor and block-scaled FP8 GEMMs of the same shapes, short bursts (do_bench): the
    block-scaled GEMM's share of the per-tensor one's rate on this GPU's cuBLAS."""
    rows = []
    for m, n, k in BLOCK_SHAPES:
        base = {"m": m, "n": n, "k": k, "flop": 2 * m * n * k}
        per_tensor = median_ms(fp8_operands(m, n, k))
        rows.append(base | {"variant": "per_tensor", "latency_ms": per_tensor})
        for variant, fn in blockwise_calls(m, n, k).items():
            try:
                fn()
                torch.cuda.synchronize()
                rows.append(base | {"variant": variant, "latency_ms": median_ms(fn)})
            except Exception as error:  # this PyTorch or cuBLAS may refuse a layout
                rows.append(base | {"variant": variant, "error": str(error).splitlines()[0][:160]})
        torch.cuda.empty_cache()
    for row in rows:
        if "latency_ms" in row:
            print(f"block_fp8 {row['variant']:10s} {row['m']:6d} x {row['n']:6d} x {row['k']:6d}"
                  f" {row['latency_ms']:8.3f} ms {row['flop'] / row['latency_ms'] / 1e9:7.1f} TFLOP/s")
        else:
            print(f"block_fp8 {row['variant']:10s} {row['m']:6d} x {row['n']:6d} x {row['k']:6d} refused: {row['error']}")
    return rows


LAYER_SHAPES = {  # name: (hidden, heads, ffn, tp, seq): one tensor-parallel rank's share of a layer
    "gpt3-175b-tp4": (12288, 96, 49152, 4, 2048), "llama3-70b-tp4": (8192, 64, 28672, 4, 8192)}
LAYER_MICRO_BATCHES = (1, 2, 4)


def layer_step(hidden, heads, ffn, tp, seq, micro_batch):
    """Forward and backward of one tensor-parallel rank's transformer layer (LayerNorm, QKV,
    causal attention, output projection, LayerNorm, MLP with GELU) in BF16 eager PyTorch, for
    `micro_batch` sequences: the GEMM shapes of a Megatron layer, without its collectives."""
    tokens, local_heads, head_dim = micro_batch * seq, heads // tp, hidden // heads
    make = lambda *shape: torch.nn.Parameter(torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02)
    qkv, proj = make(3 * hidden // tp, hidden), make(hidden, hidden // tp)
    fc1, fc2 = make(ffn // tp, hidden), make(hidden, ffn // tp)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)

    def step():
        h = F.layer_norm(x, (hidden,))
        q, k, v = F.linear(h, qkv).view(micro_batch, seq, 3, local_heads, head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(tokens, hidden // tp)
        y = x + F.linear(a, proj)
        y = y + F.linear(F.gelu(F.linear(F.layer_norm(y, (hidden,)), fc1), approximate="tanh"), fc2)
        torch.autograd.grad(y, (x, qkv, proj, fc1, fc2), grad)

    return step, 2 * 3 * tokens * (hidden * (3 * hidden // tp) + hidden * hidden // tp + 2 * hidden * ffn // tp) \
        + 3.5 * 2 * micro_batch * local_heads * seq * seq * head_dim


def measure_layers():
    """Each layer shape at 1, 2 and 4 sequences per micro-batch: time per token, for what a
    larger micro-batch gains on one GPU (cuDNN attention, as Transformer Engine runs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
        for name, shape in LAYER_SHAPES.items():
            for micro_batch in LAYER_MICRO_BATCHES:
                row = {"layer": name, "micro_batch": micro_batch, "tokens": micro_batch * shape[4]}
                try:
                    step, flop = layer_step(*shape, micro_batch)
                    ms = median_ms(step, rep_ms=400)
                    row.update(step_ms=ms, us_per_token=1e3 * ms / row["tokens"], tflops=flop / ms / 1e9)
                except RuntimeError as error:
                    row["error"] = str(error).splitlines()[0][:160]
                rows.append(row)
                print(row, flush=True)
                torch.cuda.empty_cache()
    return rows


def environment():
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sm_count": props.multi_processor_count,
            "memory_bytes": props.total_memory, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "l2_bytes": getattr(props, "L2_cache_size", None)}


def summarise_kernels(gemm, pointwise, attention, launch):
    """The figures a reader wants first; the CSVs hold every row."""
    for row in gemm:
        if row["m"] >= 1024 and "tflops" in row:
            print(f"gemm {row['dtype']:9s} {row['m']:6d} x {row['n']:6d} x {row['k']:6d} {row['tflops']:7.1f} TFLOP/s")
    for row in pointwise:
        if row["elements"] == max(r["elements"] for r in pointwise if r["op"] == row["op"]):
            print(f"pointwise {row['op']:18s} {row['elements']:11d} {row['gbps']:7.0f} GB/s")
    for row in attention:
        if "bwd_tflops" in row:
            print(f"attention {row['backend']:16s} b{row['batch']} s{row['seq']} d{row['head_dim']}"
                  f" fwd {row['fwd_tflops']:6.1f} bwd {row['bwd_tflops']:6.1f} TFLOP/s")
    for row in launch:
        print(f"launch {row['mode']:16s} {row['per_kernel_us']:6.2f} us per kernel")


def summarise(sustained_rows, clock_rows):
    print("\nphase                       TFLOP/s  GB/s   SM MHz (median)  power W (median)  temp C")
    for phase in dict.fromkeys(row["phase"] for row in sustained_rows):
        windows = [row for row in sustained_rows if row["phase"] == phase][2:]  # skip ramp-up
        samples = [row for row in clock_rows if row["phase"] == phase][10:]
        if not windows or not samples:
            continue
        mid = lambda values: sorted(values)[len(values) // 2]
        print(f"{phase:26s} {mid([w['tflops'] for w in windows]):8.1f} {mid([w['gbps'] for w in windows]):6.0f}"
              f" {mid([s['sm_clock_mhz'] for s in samples]):10d} {mid([s['power_w'] for s in samples]):16.0f}"
              f" {mid([s['temp_c'] for s in samples]):8d}")


def stop_and_summarise(sampler, clocks_path, loops):
    """Stop sampling, write every sample, and print each loop's rate beside its clock and power."""
    sampler.running = False
    sampler.join()
    write_csv(clocks_path, sampler.rows)
    print(f"{len(sampler.rows)} clock samples")
    summarise(loops, sampler.rows)


GRID_COPIES = 6  # weight copies per shape, as the tables' collector replays a layer
GRID_TIMED = 3  # timed passes over the copies, after one warm-up pass
GRID_LARGE_FLOP = 100e9  # shapes this large: every GRID_LARGE_EVERY-th timed, on one copy
GRID_LARGE_EVERY = 4
GRID_AHEAD_CYCLES = 1_000_000  # a GPU spin that lets the host queue a shape's calls ahead of it
GRID_NAME_CHUNK = 1000  # shapes per profiler session when reading the kernels launched
GRID_DTYPES = {"bfloat16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def grid_shapes(table):
    """(dtype, m, n, k, timed) per row of a kernel table's GEMM grid, in the table's order."""
    import pyarrow.parquet as pq

    columns = pq.read_table(table, columns=["gemm_dtype", "m", "n", "k"]).to_pydict()
    shapes, large_seen = [], 0
    for dtype, m, n, k in zip(columns["gemm_dtype"], columns["m"], columns["n"], columns["k"]):
        if dtype not in GRID_DTYPES:
            continue
        timed = True
        if 2.0 * m * n * k >= GRID_LARGE_FLOP:
            timed = large_seen % GRID_LARGE_EVERY == 0
            large_seen += 1
        shapes.append((dtype, m, n, k, timed))
    return shapes


def random_buffer(elements, dtype, chunk=2**28):
    """A flat buffer of normal values in `dtype`, filled in chunks (no full-size FP32 copy)."""
    buffer = torch.empty(elements, device="cuda", dtype=dtype)
    for start in range(0, elements, chunk):
        end = min(elements, start + chunk)
        buffer[start:end] = torch.randn(end - start, device="cuda", dtype=torch.bfloat16).to(dtype)
    return buffer


def grid_calls(dtype, inputs, weights, m, n, k, copies):
    """`copies` GEMMs of one input A (m x k) over their own weights (n x k), slices of the buffers."""
    a = inputs[: m * k].view(m, k)
    ws = [weights[i * n * k:(i + 1) * n * k].view(n, k) for i in range(copies)]
    if dtype == "bfloat16":
        return [lambda w=w: torch.mm(a, w.t()) for w in ws]
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return [lambda w=w: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16) for w in ws]


def time_grid_shape(calls):
    """Per-GEMM ms of each timed pass over `calls`: a GPU spin first, so the host queues every
    call before the GPU reaches them and launches leave no gaps, as a CUDA graph's replay."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(GRID_TIMED + 1)]
    torch.cuda._sleep(GRID_AHEAD_CYCLES)
    for call in calls:
        call()
    for index in range(GRID_TIMED):
        events[index].record()
        for call in calls:
            call()
    events[GRID_TIMED].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) / len(calls) for i in range(GRID_TIMED)]


def grid_buffers(dtype, shapes):
    """Input and weight buffers large enough for every shape of `dtype`, each shape a slice."""
    sizes = [(m * k, n * k * (GRID_COPIES if 2.0 * m * n * k < GRID_LARGE_FLOP else 1))
             for shape_dtype, m, n, k, _ in shapes if shape_dtype == dtype]
    return random_buffer(max(s[0] for s in sizes), GRID_DTYPES[dtype]), random_buffer(max(s[1] for s in sizes), GRID_DTYPES[dtype])


def measure_gemm_grid_times(dtype, shapes, inputs, weights):
    """Each timed shape of `dtype`, in the tables' protocol, with the SM clock read after it."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    rows = []
    for shape_dtype, m, n, k, timed in shapes:
        if shape_dtype != dtype or not timed:
            continue
        copies = GRID_COPIES if 2.0 * m * n * k < GRID_LARGE_FLOP else 1
        row = {"dtype": dtype, "m": m, "n": n, "k": k, "copies": copies}
        try:
            passes = sorted(time_grid_shape(grid_calls(dtype, inputs, weights, m, n, k, copies)))
            row.update(per_gemm_ms=passes[len(passes) // 2], min_ms=passes[0],
                       sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        except RuntimeError as error:
            row["error"] = str(error).splitlines()[0][:160]
        rows.append(row)
    return rows


def launched_kernels(trace_path, op_names):
    """The kernels each top-level GEMM op of a profiler trace launched, in launch order: a
    kernel's correlation id names the runtime call that launched it, which lies inside its op."""
    from bisect import bisect_right

    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("name") in op_names),
                 key=lambda e: e["ts"])
    starts = [e["ts"] for e in ops]
    op_of_launch = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            index = bisect_right(starts, e["ts"]) - 1
            if index >= 0 and e["ts"] <= ops[index]["ts"] + ops[index]["dur"]:
                op_of_launch[e["args"]["correlation"]] = index
    names = [[] for _ in ops]
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        index = op_of_launch.get(e.get("args", {}).get("correlation"))
        if index is not None:
            names[index].append(e["name"])
    return names


def measure_gemm_grid_kernels(dtype, shapes, inputs, weights, out):
    """The cuBLAS kernels every shape of `dtype` launches (one eager call each, under the profiler)."""
    from torch.profiler import ProfilerActivity, profile

    rows = []
    ours = [(m, n, k) for shape_dtype, m, n, k, _ in shapes if shape_dtype == dtype]
    for start in range(0, len(ours), GRID_NAME_CHUNK):
        chunk = ours[start:start + GRID_NAME_CHUNK]
        calls = [grid_calls(dtype, inputs, weights, m, n, k, 1)[0] for m, n, k in chunk]
        for call in calls:
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for call in calls:
                call()
            torch.cuda.synchronize()
        trace = out / "grid_trace.json"
        prof.export_chrome_trace(str(trace))
        kernels = launched_kernels(trace, ("aten::mm", "aten::_scaled_mm"))
        trace.unlink()
        if len(kernels) != len(chunk):
            raise RuntimeError(f"{len(kernels)} GEMM ops traced for {len(chunk)} calls")
        rows += [{"dtype": dtype, "m": m, "n": n, "k": k, "kernels": " + ".join(names)}
                 for (m, n, k), names in zip(chunk, kernels)]
    return rows


def measure_gemm_grid(table, out):
    """A kernel table's whole GEMM grid, dtype by dtype: the kernels cuBLAS picks for each shape
    (gemm_grid_kernels_<dtype>.parquet) and the times in the table's protocol (gemm_grid_<dtype>)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shapes = grid_shapes(table)
    print(f"{len(shapes)} shapes, {sum(s[4] for s in shapes)} to time", flush=True)
    for dtype in GRID_DTYPES:
        inputs, weights = grid_buffers(dtype, shapes)
        for name, job, args in ((f"gemm_grid_kernels_{dtype}", measure_gemm_grid_kernels, (out,)),
                                (f"gemm_grid_{dtype}", measure_gemm_grid_times, ())):
            start = time.time()
            try:
                rows = job(dtype, shapes, inputs, weights, *args)
            except Exception:
                print(f"[{name}] FAILED after {time.time() - start:.1f} s")
                traceback.print_exc()
                continue
            pq.write_table(pa.Table.from_pylist(rows), out / f"{name}.parquet", compression="zstd")
            print(f"[{name}] {len(rows)} rows in {time.time() - start:.1f} s", flush=True)
        del inputs, weights
        torch.cuda.empty_cache()


# Modes that run one measurement section and write it as <name>.csv: (--help text, the section).
SINGLE_SECTION_MODES = {
    "block_fp8": ("per-tensor against block-scaled FP8 GEMMs of the same shapes", measure_block_fp8),
    "layers": ("a tensor-parallel rank's transformer layer, forward and backward, at 1-4 sequences", measure_layers),
    "graph_floor": ("chains of small kernels from a CUDA graph and eagerly, time per kernel", measure_graph_floor),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="fewer shapes and shorter loads")
    parser.add_argument("--sustain-s", type=float, default=20.0)
    parser.add_argument("--curve", action="store_true",
                        help="instead: the clock curve (graded loads) and attention over sequence and batch")
    parser.add_argument("--stream", action="store_true",
                        help="instead: decode-like GEMMs streaming their weights from HBM, with clocks and power")
    parser.add_argument("--bursts", action="store_true",
                        help="instead: long GEMMs timed as the kernel tables were, and the clock's fall after idle")
    for name, (help_text, _) in SINGLE_SECTION_MODES.items():
        parser.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=f"instead: {help_text}")
    parser.add_argument("--gemm-grid", type=Path, metavar="TABLE",
                        help="instead: every BF16 and FP8 shape of a kernel table's GEMM grid (its gemm_perf.parquet),"
                             " timed as the table was, and the cuBLAS kernels each launches")
    parser.add_argument("--sample-period-s", type=float, default=SAMPLE_PERIOD_S)
    parser.add_argument("--tiles", action="store_true",
                        help="instead: attention over sequence and large batch x heads, cuDNN and FlashAttention-2")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    sampler = ClockSampler()
    env = environment() | sampler.limits()
    print(json.dumps(env), flush=True)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1))
    sampler.period_s = args.sample_period_s
    sampler.start()
    if args.gemm_grid:
        measure_gemm_grid(args.gemm_grid, args.out)
        return
    for name, (_, job) in SINGLE_SECTION_MODES.items():
        if getattr(args, name):
            section(name, job, args.out)
            return
    if args.bursts:
        transient = section("transient", measure_transient, args.out, sampler)
        bursts = section("bursts", measure_bursts, args.out, sampler)
        sampler.running = False
        sampler.join()
        write_csv(args.out / "bursts_clocks.csv", sampler.rows)
        summarise_bursts(bursts, transient)
        return
    if args.stream:
        loops = section("stream", measure_weight_streams, args.out, sampler, args.sustain_s)
        stop_and_summarise(sampler, args.out / "stream_clocks.csv", loops)
        return
    if args.tiles:
        for row in section("attention_tiles_large", measure_attention_tiles, args.out, LARGE_TILES, ATTENTION_BACKENDS):
            print(f"{row['backend']:16s} s{row['seq']:5d} bh{row['batch'] * row['heads']:5d}"
                  f" fwd {row['fwd_ms']:8.3f} bwd {row['bwd_ms']:8.3f} ms")
        return
    if args.curve:
        section("attention_tiles", measure_attention_tiles, args.out, SMALL_TILES, ("CUDNN_ATTENTION",))
        loops = section("curve", measure_clock_curve, args.out, sampler, args.sustain_s)
        stop_and_summarise(sampler, args.out / "curve_clocks.csv", loops)
        return
    sampler.phase = "kernels"
    launch = section("launch", measure_launch, args.out, args.quick)
    gemm = section("gemm", measure_gemms, args.out, args.quick)
    pointwise = section("pointwise", measure_pointwise, args.out, args.quick)
    attention = section("attention", measure_attention, args.out, args.quick)
    sustained = section("sustained", measure_sustained, args.out, sampler,
                        args.sustain_s / (4 if args.quick else 1), 3.0)
    summarise_kernels(gemm, pointwise, attention, launch)
    stop_and_summarise(sampler, args.out / "clocks.csv", sustained)


if __name__ == "__main__":
    main()
