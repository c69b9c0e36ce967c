"""`rapid validate --suite kernels`: our GEMM, attention and NCCL models against the measured
kernel tables of NVIDIA AIConfigurator (../shared/validation/kernels, beside the repository; its
README says what a row is). Errors (predicted / measured - 1) are summarised per GPU, framework,
kernel, dtype and size bucket: the measuring stick for calibration, never fitted here.

Each row is timed by the functions `rapid run` uses: ops.gemm, ops.flash_attention (prefill),
ops.decode_attention (one decode step), and collectives.collective_time over one node's NVLink
dimension. What the tables hold that we do not model (fp8_block, nvfp4 and weight-only GEMMs,
FP8 attention, sliding windows, GPUs without a preset) is counted as skipped, with the reason."""
import functools
from dataclasses import replace
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from core.errors import SpecError
from core.model import ops
from core.model.ops import kernels_alone
from core.model.collectives import collective_time, engine_all_reduce_s
from core.model.ops.mla import mla_decode, mla_prefill
from core.model.layout import group_spans
from core.model.loader import list_presets, load_hardware, with_dtype
from core.model.memory import GiB, MiB
from core.model.specs import ModelSpec, Parallelism, quantized_bytes
from core.serving.engines import ENGINES
from core.serving.moe import table_row_s

from .systems import PRESET_BY_GPU

KERNELS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "validation" / "kernels"
SUITE = "kernels"
MS = 1e-3  # the tables' latency is in milliseconds
# The tables' GEMM dtypes: ours and its recipe (fp8 is per-tensor scaled; fp8_block DeepSeek's
# 1 x 128 activation and 128 x 128 weight blocks, our block-scaled FP8 recipe).
GEMM_DTYPES = {"bfloat16": ("bf16", ""), "fp8": ("fp8", ""), "fp8_block": ("fp8", "block-scaled"),
               "nvfp4": ("nvfp4", "")}
ATTENTION_DTYPES = {"bfloat16": "bf16"}
KV_BYTES = {"bfloat16": 2, "fp8": 1}
NCCL_BYTES = {"half": 2, "int8": 1}
NCCL_DTYPES = {"half": "fp16", "int8": "int8"}
NCCL_KINDS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
              "alltoall": "all_to_all"}
ATTENTION_KERNEL = ModelSpec.__dataclass_fields__["attention_kernel"].default  # what `rapid run` times


class Skip(str):
    """Why a row is not compared (counted, not silently dropped)."""


BUCKETS = ("<1 GFLOP", "1-100 GFLOP", ">=100 GFLOP", "<16 MiB KV", "16 MiB-1 GiB KV", ">=1 GiB KV",
           "<1 MiB", ">=1 MiB")  # small to large, the order records are listed in


def flop_bucket(flops: float) -> str:
    return "<1 GFLOP" if flops < 1e9 else "1-100 GFLOP" if flops < 100e9 else ">=100 GFLOP"


def kv_bucket(bytes_: float) -> str:
    return "<16 MiB KV" if bytes_ < 16 * MiB else "16 MiB-1 GiB KV" if bytes_ < GiB else ">=1 GiB KV"


def message_bucket(bytes_: float) -> str:
    return "<1 MiB" if bytes_ < MiB else ">=1 MiB"


# How each engine quantizes a low-precision GEMM's BF16 input: TensorRT-LLM's torch flow takes
# the tensor's amax in one pass, then casts to per-tensor FP8 (ops.fp8_cast, current scaling);
# vLLM's layer, with the static input scale AIConfigurator's collector sets, casts to FP8 with
# one thread block per token row (ops.row_cast), and to NVFP4 (FlashInfer's quantization, the
# global scale static, each 16-element block's scale computed in the pass) in one pass that
# also takes the tensor a row at a time (ops.row_cast, its NVFP4 row and element times);
# TensorRT-LLM's block-scaled FP8 takes each 1 x 128 group's scale in its one cast pass
# (fp8_quantize_1x128, _trtllm_block_quant), launched with its GEMM inside one op: the table's
# smallest rows (m <= 16, n and k <= 256) take 4.65 us on H100 against 2.70 for the BF16 GEMM
# alone, what a pass replayed from a CUDA graph adds (in_graph), not a whole launch. The other
# engines' quantizations keep their launches: timed in_graph their small rows come out 18-50 %
# fast (TensorRT-LLM's per-tensor FP8 rows
# take 12.4 us at the smallest, more kernels than the three ours counts). vLLM's
# block-scaled FP8 rows (DeepGEMM, CUTLASS, FlashInfer) were timed without CUDA graphs, so their
# host's launches set them (60-190 us at a few tokens): not compared (_gemm says so).
INPUT_QUANT = {
    ("trtllm", "fp8"): lambda hw, m, k: ops.fp8_cast(replace(hw, dtype="fp8", fp8_recipe="current"), m * k),
    ("trtllm", "fp8_block"): lambda hw, m, k: _trtllm_block_quant(in_graph(hw), m * k),
    ("vllm", "fp8"): lambda hw, m, k: ops.row_cast(hw, m, k),
    ("vllm", "nvfp4"): lambda hw, m, k: ops.row_cast(hw, m, k, "nvfp4")}


@functools.lru_cache(maxsize=None)
def in_graph(hw):
    """The hardware as a kernel replayed from a CUDA graph behind another runs (the collector
    captures each row in a graph): an elementwise kernel pays gpu.graph_launch_overhead of its launch."""
    return replace(hw, gpu=replace(hw.gpu, launch_overhead_s=hw.gpu.graph_launch_overhead_s))


# TensorRT-LLM's 1 x 128 FP8 quantization runs through the SMs, not at the HBM rate: on its
# block-scaled GEMM tables' rows of few outputs and many rows (n <= 256, m >= 4,096), where the
# cast outlasts the GEMM, what a row leaves after the GEMM and the launch is 0.219 ns of one SM
# per element on H100 and 0.222 on H200 (median; scripts/fit_gemm.py), the same time on both
# though H200's HBM is 1.43 times H100's: 1.8 TB/s of reads and writes, 0.54 of H100's HBM rate.
TRTLLM_BLOCK_QUANT_SM_S = 0.22e-9


def _trtllm_block_quant(hw, elements: int):
    """TensorRT-LLM's cast of BF16 elements to block-scaled FP8, each 1 x 128 group's scale
    computed in passing: the slower of its bytes over HBM and its elements through the SMs
    (TRTLLM_BLOCK_QUANT_SM_S), the groups shared evenly."""
    moved = elements * (hw.act_bytes + quantized_bytes("fp8", "block-scaled"))
    busy_s = max(moved / ops.mixed_bandwidth_bps(hw), elements * TRTLLM_BLOCK_QUANT_SM_S / hw.gpu.sm_count)
    return ops.KernelTime(busy_s + ops.launch_s(hw), 0.0, moved)


# The presets' FP8 share (fp8_efficiency) is cuBLAS's scaled GEMM, which TensorRT-LLM and
# Transformer Engine call; vLLM's per-tensor FP8 layer runs CUTLASS's, with the tiles it
# dispatches (vllm_fp8_tiles, their tile rows in whole clusters), which on the GPUs whose tables
# hold both (H100 1.070, H200 0.934) reaches 1 / 1.002 of cuBLAS's share on GEMMs of 100 GFLOP
# and more (scripts/fit_gemm.py), its input cast timed a pass of 2,048 elements at a time, the
# busiest SM's rows in turn (ops.row_cast; with the cast timed per element 1.028, without it
# 1.174, with the tiles' rows not rounded to whole clusters 1.049). One ratio for every GPU: a
# property of the two libraries' kernels.
CUBLAS_OVER_CUTLASS_FP8 = 1.002
# The presets' block-scaled FP8 share (fp8_block_efficiency) is cuBLAS's, measured on our own
# H100 (scripts/measure_gpu_kernels.py --block-fp8), as Transformer Engine calls it;
# TensorRT-LLM's own block-scaled GEMM reaches 1.026 of it (scripts/fit_gemm.py on its table:
# H100 1.013, H200 1.039; its epilogue in series, LIBRARY_EPILOGUE_IN_SERIES, and its input's
# cast through the SMs, _trtllm_block_quant).
TRTLLM_FP8_BLOCK_OVER_CUBLAS = 1.026
# (engine, the table's GEMM dtype) -> (the calibration share its library changes, by how much)
# vLLM's NVFP4 GEMM (FlashInfer's CuTe DSL kernel) is the only NVFP4 GEMM measured; the presets'
# NVFP4 share is cuBLAS's as Transformer Engine calls it, taken as that kernel's times the same
# lead cuBLAS holds over vLLM's FP8 kernel where both are measured (an assumption, as for
# Blackwell's FP8 share).
LIBRARY_SHARE = {("vllm", "fp8"): ("fp8_efficiency", 1.0 / CUBLAS_OVER_CUTLASS_FP8),
                 ("vllm", "nvfp4"): ("nvfp4_efficiency", 1.0 / CUBLAS_OVER_CUTLASS_FP8),
                 ("trtllm", "fp8_block"): ("fp8_block_efficiency", TRTLLM_FP8_BLOCK_OVER_CUBLAS)}
# FlashInfer's NVFP4 kernel writes its BF16 output at 0.742 of the rate cuBLAS's BF16 GEMMs do
# (the presets' store_efficiency): the median over each Blackwell table's short-k GEMMs of 64 MB
# and more of output, its input quantization taken out, 0.74-0.76 on B200, B300, GB200 and
# GB300 alike (scripts/fit_gemm.py). vLLM's FP8 GEMM, CUTLASS's, read the same way: 0.503 on
# Blackwell (SM100's kernel; 0.48-0.52 on the four), 0.907 on Hopper (SM90's; H100 1.00, H200
# 0.81). (engine, the table's GEMM dtype, CUTLASS's architecture) -> that factor.
VLLM_NVFP4_STORE_OVER_CUBLAS = 0.742
VLLM_FP8_STORE_OVER_CUBLAS = {"sm90": 0.907, "sm100": 0.503}
LIBRARY_STORE = {("vllm", "nvfp4", "sm100"): VLLM_NVFP4_STORE_OVER_CUBLAS,
                 **{("vllm", "fp8", arch): factor for arch, factor in VLLM_FP8_STORE_OVER_CUBLAS.items()}}
# The kernel tables' smallest GEMMs, at most (m, n, k): what they take beyond the tile model's
# time is a kernel's start and finish (the Blackwell presets' launch_overhead is read off the
# BF16 ones by scripts/blackwell_from_kernels.py, LIBRARY_PROLOGUE_S below by scripts/fit_gemm.py).
SMALLEST_GEMM = (64, 4096, 256)
# On Blackwell vLLM's FP8 GEMM (CUTLASS's SM100 kernel) and NVFP4 GEMM (FlashInfer's CuTe DSL
# kernel) start later than cuBLAS's BF16 one, whose start is the presets' launch_overhead: their
# tables' smallest rows (SMALLEST_GEMM), input quantization included, take 0.6-1.0
# and 2.5-3.0 us more than the model gives them (B200, B300, GB200, GB300; scripts/fit_gemm.py
# prints each, and the mean over the four set here). On Hopper the same reading of vLLM's FP8
# rows comes out negative (-1.8 us on H100 and H200): no kernel's late start, so nothing is
# added there. (engine, the table's GEMM dtype, CUTLASS's architecture) -> seconds.
LIBRARY_PROLOGUE_S = {("vllm", "fp8", "sm100"): 0.8e-6, ("vllm", "nvfp4", "sm100"): 2.8e-6}
# TensorRT-LLM's block-scaled FP8 GEMM on Hopper is DeepGEMM's kernel, whose math warpgroups
# write each output tile themselves after its last MMA (no second warpgroup's MMAs cover it, as
# cuBLAS's ping-pong tiles do): its table's short-k rows take the BF16 GEMM's time plus a second
# write of the output (m = 4,096, n = 16,384, k = 128: 93 us against 60), its mid-k rows about
# compute plus output written. (engine, the table's GEMM dtype) of such kernels.
LIBRARY_EPILOGUE_IN_SERIES = {("trtllm", "fp8_block")}


def cutlass_arch(hw) -> str:
    """Whose kernels a GPU's GEMM libraries run: SM100's on the GPUs with an NVFP4 peak
    (Blackwell), SM90's on the others (Hopper: A100's tables run no FP8 or NVFP4 GEMM)."""
    return "sm100" if "nvfp4" in dict(hw.gpu.peak_flops) else "sm90"


def vllm_fp8_tiles(hw, m: int, n: int, k: int) -> tuple:
    """The one (tile over m, tile over n, tile over k, cluster over m) vLLM's CUTLASS FP8 GEMM
    dispatches for a GEMM of m x n x k (csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm{90,100}_fp8_dispatch.cuh),
    swap-AB configurations written with the tile over m first, as `ops.gemm(tiles=...)` takes it.
    Persistent kernels: no split-K. The cluster is the configuration's thread-block cluster
    extent over m, in tiles (over CUTLASS's n where the configuration swaps A and B): the
    scheduler rounds the tile rows up to whole clusters, so on Hopper's 2 x 1 clusters a GEMM one
    row past a whole number of 256 rows runs its last cluster's second tile row empty (the
    rounding of tile columns by a cluster's extent over n, Blackwell's 2 x 2 and swapped 4 x 1
    clusters, is not modelled). On Blackwell (the GPU with an NVFP4 peak) CUTLASS's automatic
    schedule pairs two SMs on one MMA when the cluster is even over the MMA's rows and the tile's
    rows are a multiple of 128, each SM taking half the rows: the 256-row tile of m > 256 is 128
    rows an SM, the 128-row tile of 64 < m <= 256 is 64, each pair a cluster of two (timed as
    whole 128-row tiles, those rows came out 22-33 % slow, median, on B200's table; halved, -4
    to +2 %). The swap-AB tiles of m <= 64 are paired too, over n, but their rows read as whole
    tiles on the tables (B200's medians at m <= 16 and 16 < m <= 64 are -14 and -1 % whole, -16
    and -12 % halved, the p90 at m <= 16 33 % whole, 53 % halved), so they stay whole."""
    if cutlass_arch(hw) == "sm100":
        if m <= 16:
            return ((32, 128, 128),)
        if m <= 64:
            return ((64, 64, 128),) if m == 64 and k < 4096 else ((64, 128, 256),)
        return ((64, 128, 128, 2),) if m <= 256 else ((128, 128, 128, 2),)
    if m <= 16:
        return ((16, 64, 256, 2),) if n <= 1280 else ((16, 64, 256),)
    if m <= 64:
        return ((16, 64, 256, 4),) if n <= 1280 else ((64, 64, 256),)
    return ((64, 128, 128, 2),) if m <= 128 else ((128, 128, 128, 2),)


# vLLM's NVFP4 layer runs FlashInfer's CuTe DSL persistent block-scaled GEMM: its autotuner
# gives each shape one of the kernel's tiles, and a persistent kernel never splits k. The
# block-scaled MMA is 128 rows an SM (a 1-SM 128-row or a 2-SM 256-row MMA), 64 to 256 columns,
# 256 FP4 values deep (128 bytes, as the other dtypes' tiles).
VLLM_NVFP4_TILES = ((128, 64, 256), (128, 128, 256), (128, 192, 256), (128, 256, 256))


def _library_tiles(hw, m: int, n: int, k: int, gemm_dtype: str, engine: str) -> tuple:
    """The tiles the engine's GEMM library dispatches for the shape, () where it picks freely
    and may split k (cuBLAS)."""
    if (engine, gemm_dtype) == ("vllm", "fp8"):
        return vllm_fp8_tiles(hw, m, n, k)
    return VLLM_NVFP4_TILES if (engine, gemm_dtype) == ("vllm", "nvfp4") else ()


@functools.lru_cache(maxsize=None)
def _variant(hw, **fields):
    """`hw` with `fields` replaced, once per variant (the memos below key on it)."""
    return replace(hw, **fields)


@functools.lru_cache(maxsize=None)
def engine_hardware(hw, gemm_dtype: str, engine: str):
    """The hardware as the table's engine's GEMM library runs `gemm_dtype`: its share of the
    peak and the rate its epilogue writes the output."""
    if (engine, gemm_dtype) not in LIBRARY_SHARE:
        return hw
    share, factor = LIBRARY_SHARE[engine, gemm_dtype]
    store = hw.calibration.store_efficiency * LIBRARY_STORE.get((engine, gemm_dtype, cutlass_arch(hw)), 1.0)
    return replace(hw, calibration=replace(hw.calibration, store_efficiency=store,
                                           **{share: getattr(hw.calibration, share) * factor}))


def library_gemm_s(hw, m: int, n: int, k: int, gemm_dtype: str, engine: str) -> float:
    """The GEMM alone, as the table's engine's library runs it: its share, its tiles and its late start."""
    dtype, recipe = GEMM_DTYPES[gemm_dtype]
    library = engine_hardware(_variant(hw, fp8_recipe=recipe) if recipe else hw, gemm_dtype, engine)
    return ops.gemm(library, m, n, k, dtype=dtype, tiles=_library_tiles(hw, m, n, k, gemm_dtype, engine),
                    epilogue_in_series=(engine, gemm_dtype) in LIBRARY_EPILOGUE_IN_SERIES).time_s \
        + LIBRARY_PROLOGUE_S.get((engine, gemm_dtype, cutlass_arch(hw)), 0.0)


@functools.lru_cache(maxsize=None)
def _gemm_s(hw, m: int, n: int, k: int, gemm_dtype: str, engine: str) -> float:
    time_s = library_gemm_s(hw, m, n, k, gemm_dtype, engine)
    if GEMM_DTYPES[gemm_dtype][0] != "bf16":
        time_s += INPUT_QUANT[engine, gemm_dtype](hw, m, k).time_s
    return time_s


def _gemm(hw, m, n, k, gemm_dtype, engine=""):
    """One GEMM C[m,n] = A[m,k] B[k,n], B a weight, as the layer graph times a linear layer; an
    FP8 or NVFP4 row also quantizes its BF16 input A as the table's engine does (INPUT_QUANT)."""
    dtype, recipe = GEMM_DTYPES.get(gemm_dtype, ("", ""))
    if (engine, gemm_dtype) == ("vllm", "fp8_block"):
        return Skip("gemm fp8_block in vLLM: timed without CUDA graphs, host-bound")
    if dtype not in dict(hw.gpu.peak_flops) or (dtype != "bf16" and (engine, gemm_dtype) not in INPUT_QUANT):
        return Skip(f"gemm {gemm_dtype}: not modelled")
    label = f"{dtype} block" if recipe else dtype
    return "gemm", label, flop_bucket(2.0 * m * n * k), _gemm_s(hw, m, n, k, gemm_dtype, engine)


# The attention tables name the kernel that ran each row (kernel_source). vLLM's Triton backend,
# its fallback on Blackwell for heads of 192 over an FP8 cache (FlashInfer's TensorRT-LLM kernels
# take no such head), is a kernel no preset describes: at prompts of 8,192 tokens and more it takes
# 21-29 times what the FlashInfer kernels' fit gives such a prompt (B200 to GB300), in decode 1.6
# times on B200. Not modelled; its rows without a sliding window (816 context and 1,114 generation
# rows per Blackwell GPU) are counted as skipped, and the fits leave them out. vLLM gives a prompt of
# one token to its decode kernel (vllm_flashinfer_trtllmdecode in its context tables): timed so.
UNMODELLED_ATTENTION = {"vllm_triton_attn": "vLLM's Triton attention (its Blackwell fallback at head_dim 192 "
                                            "over an FP8 cache)"}
DECODE_KERNELS = ("vllm_flashinfer_trtllmdecode",)


def attention_modelled(kernel_source: str) -> bool:
    """Whether an attention table's row ran a kernel the model times (UNMODELLED_ATTENTION)."""
    return kernel_source not in UNMODELLED_ATTENTION


def ran_prefill_kernel(kernel_source: str) -> bool:
    """Whether a context table's row ran the engine's prefill kernel the fits describe (not a
    kernel the model does not time, nor the decode kernel a one-token prompt goes to)."""
    return attention_modelled(kernel_source) and kernel_source not in DECODE_KERNELS


def _attention_skip(kernel_source: str, window: int) -> Skip | None:
    """Why an attention row is not compared: its sliding window, or a kernel no preset describes."""
    if window:
        return Skip("attention with a sliding window: not modelled")
    if not attention_modelled(kernel_source):
        return Skip(f"attention by {UNMODELLED_ATTENTION[kernel_source]}: not modelled")
    return None


def _context(hw, kernel_source, batch, isl, heads, kv_heads, head_dim, window, attn_dtype, kv_dtype, engine=""):
    """Prefill attention over `batch` causal sequences of `isl` tokens: the table's engine's
    prefill op where the preset describes it (calibration.engine_attention; an FP8 cache runs
    the engines' FP8 kernels), else the fused kernel `rapid run` trains with; the engine's
    decode op where it gave the row to its decode kernel (DECODE_KERNELS)."""
    if skip := _attention_skip(kernel_source, window):
        return skip
    if attn_dtype not in ATTENTION_DTYPES:
        return Skip(f"attention in {attn_dtype}: not modelled")
    dtype = ATTENTION_DTYPES[attn_dtype] + ("" if kv_dtype == attn_dtype else f" kv {kv_dtype}")
    flops = 2.0 * batch * heads * isl * isl * head_dim  # QK^T and PV, causal half
    if kernel_source in DECODE_KERNELS:
        if kv_dtype not in KV_BYTES:
            return Skip(f"decode attention {attn_dtype} kv {kv_dtype}: not modelled")
        time_s = ops.decode_attention(hw, batch, heads, kv_heads, isl, head_dim, KV_BYTES[kv_dtype], engine).time_s
        return "attention.prefill", dtype, flop_bucket(flops), time_s
    kernel = engine if hw.calibration.engine_kernels(engine) else ATTENTION_KERNEL
    time_s = ops.flash_attention(hw, batch * heads, isl, isl, head_dim, max(1, heads // kv_heads), True,
                                 kernel=kernel, kv_bytes_per_element=KV_BYTES.get(kv_dtype, 0)).time_s
    return "attention.prefill", dtype, flop_bucket(flops), time_s


def _generation(hw, kernel_source, batch, heads, kv_heads, head_dim, step, window, attn_dtype, kv_dtype, engine=""):
    """One decode step: each of `batch` requests' new token attends to its `step` cached tokens
    and itself (the collector's `step` is the cached length), by the table's engine's decode
    op where the preset describes it (calibration.engine_attention)."""
    if skip := _attention_skip(kernel_source, window):
        return skip
    if attn_dtype not in ATTENTION_DTYPES or kv_dtype not in KV_BYTES:
        return Skip(f"decode attention {attn_dtype} kv {kv_dtype}: not modelled")
    context = step + 1
    kv_bytes = KV_BYTES[kv_dtype]
    dtype = ATTENTION_DTYPES[attn_dtype] + ("" if kv_dtype == attn_dtype else f" kv {kv_dtype}")
    time_s = ops.decode_attention(hw, batch, heads, kv_heads, context, head_dim, kv_bytes, engine).time_s
    return "attention.decode", dtype, kv_bucket(2.0 * batch * kv_heads * context * head_dim * kv_bytes), time_s


def _nccl(hw, op, gpus, elements, nccl_dtype):
    """One nccl-tests collective inside one node: `elements` of the dtype are the test's size
    (the whole buffer; all-to-all: each rank's send buffer), over the NVLink dimension."""
    kind = NCCL_KINDS.get(op)
    if kind is None or nccl_dtype not in NCCL_BYTES:
        return Skip(f"nccl {op} {nccl_dtype}: not modelled")
    dims = hw.dims_for(gpus)
    if gpus > dims[0].size:
        return Skip(f"nccl over {gpus} GPUs: more than {hw.name}'s first network dimension")
    bytes_ = float(elements * NCCL_BYTES[nccl_dtype])
    span = group_spans(Parallelism(tp=gpus), dims)["tp"]
    time_s = sum(collective_time(hw, dims, kind, bytes_, span, element_bytes=NCCL_BYTES[nccl_dtype]).values())
    return f"nccl.{kind}.{gpus}gpu", NCCL_DTYPES[nccl_dtype], message_bucket(bytes_), time_s


# the custom all-reduce tables' dtypes: (our name, bytes per element)
ALLREDUCE_DTYPES = {"bfloat16": ("bf16", 2), "float16": ("fp16", 2)}
# vLLM's table times its kernel replayed from a CUDA graph, as its decode runs it, and eagerly
VLLM_GRAPH_ALLREDUCE = "vllm_graph"


def _allreduce_skip(hw, gpus, allreduce_dtype, backend, engine):
    """Why a custom all-reduce row is not timed (a Skip), or None: vLLM's eager rows are not how
    its decode runs it."""
    if backend and backend != VLLM_GRAPH_ALLREDUCE:
        return Skip(f"{engine} all-reduce {backend}: timed outside CUDA graphs")
    if allreduce_dtype not in ALLREDUCE_DTYPES:
        return Skip(f"{engine} all-reduce {allreduce_dtype}: not modelled")
    if gpus > hw.dims_for(gpus)[0].size:
        return Skip(f"{engine} all-reduce over {gpus} GPUs: more than {hw.name}'s first network dimension")
    return None


def _custom_allreduce(hw, gpus, elements, allreduce_dtype, backend, engine=""):
    """The engine's own all-reduce inside one NVLink domain (calibration.engine_allreduce, or
    NCCL's ring where faster or the group larger than its kernel takes:
    core.model.collectives.engine_all_reduce_s)."""
    if skip := _allreduce_skip(hw, gpus, allreduce_dtype, backend, engine):
        return skip
    label, element_bytes = ALLREDUCE_DTYPES[allreduce_dtype]
    bytes_ = float(elements * element_bytes)
    dims = hw.dims_for(gpus)
    span = group_spans(Parallelism(tp=gpus), dims)["tp"]
    time_s = sum(engine_all_reduce_s(hw, dims, engine, bytes_, span).values())
    return f"allreduce.{engine}.{gpus}gpu", label, message_bucket(bytes_), time_s


def custom_allreduce_rows(gpu_dir: Path, hw) -> dict:
    """{engine: [(GPUs, bytes, measured seconds)]}: the rows of the GPU's custom all-reduce tables
    that _custom_allreduce times (scripts/fit_engine_allreduce.py fits on them)."""
    out = {}
    for path in sorted(gpu_dir.glob("comm/*/*/custom_allreduce_perf.parquet")):
        engine = path.parent.parent.name
        values, latency_ms = _read(path, ("num_gpus", "message_size", "allreduce_dtype", "backend"), None)
        for (gpus, elements, dtype, backend), ms in zip(zip(*values), latency_ms):
            if not _allreduce_skip(hw, gpus, dtype, backend, engine):
                out.setdefault(engine, []).append((gpus, float(elements * ALLREDUCE_DTYPES[dtype][1]), ms * MS))
    return out


# DeepSeek-V3's MLA widths, which the MLA tables' collector runs (its module rows name the model)
MLA_QK_HEAD_DIM, MLA_V_HEAD_DIM, MLA_KV_LORA_RANK, MLA_ROPE_DIM = 128 + 64, 128, 512, 64


def _mla_context(hw, batch, isl, heads, mla_dtype, kv_dtype, engine=""):
    """MLA prefill attention on one rank (`heads` is the rank's share): causal attention over
    192-wide keys and 128-wide values, as the table's engine runs it where the preset describes
    its kernels (ops.mla.mla_prefill: FP8 kernels over an FP8 cache), else as the layer graph
    times it (the training kernel at their mean width, one KV head per query head)."""
    if mla_dtype not in ATTENTION_DTYPES or kv_dtype not in KV_BYTES:
        return Skip(f"mla in {mla_dtype} kv {kv_dtype}: not modelled")
    dtype = ATTENTION_DTYPES[mla_dtype] + ("" if kv_dtype == mla_dtype else f" kv {kv_dtype}")
    width = (MLA_QK_HEAD_DIM + MLA_V_HEAD_DIM) / 2
    flops = 2.0 * batch * heads * isl * isl * width
    if hw.calibration.engine_kernels(engine):
        time_s = mla_prefill(hw, batch, heads, isl, isl, MLA_QK_HEAD_DIM, MLA_V_HEAD_DIM, MLA_KV_LORA_RANK,
                             MLA_ROPE_DIM, True, engine, KV_BYTES[kv_dtype]).time_s
    else:
        time_s = ops.flash_attention(hw, batch * heads, isl, isl, width, 1, True, kernel=ATTENTION_KERNEL).time_s
    return "mla.prefill", dtype, flop_bucket(flops), time_s


def _mla_generation(hw, batch, heads, step, mla_dtype, kv_dtype, engine=""):
    """One absorbed MLA decode step over `step` cached tokens and the new one (ops.mla.mla_decode,
    by the table's engine's kernel where the preset describes it)."""
    if mla_dtype not in ATTENTION_DTYPES or kv_dtype not in KV_BYTES:
        return Skip(f"mla decode {mla_dtype} kv {kv_dtype}: not modelled")
    context, kv_bytes = step + 1, KV_BYTES[kv_dtype]
    dtype = ATTENTION_DTYPES[mla_dtype] + ("" if kv_dtype == mla_dtype else f" kv {kv_dtype}")
    time_s = mla_decode(hw, batch, heads, context, MLA_KV_LORA_RANK, MLA_ROPE_DIM, kv_bytes, engine).time_s
    return "mla.decode", dtype, kv_bucket(batch * context * (MLA_KV_LORA_RANK + MLA_ROPE_DIM) * kv_bytes), time_s


def _moe(hw, kernel_source, moe_dtype, tokens, hidden, inter, topk, experts, moe_tp, moe_ep, distribution, engine=""):
    """A rank's MoE experts as the table's engine runs them in serving (core.serving.moe.table_row_s):
    its plain batched GEMMs (gate and up unless the kernel is non-gated), the activation and the
    down projection, with the routing chain's launches; an engine running the fused-MoE kernels
    (EngineSpec.grouped_moe: vLLM) takes the grouped kernel's math where it outlasts them."""
    if distribution != "balanced":
        return Skip(f"moe with {distribution} routing: imbalance not modelled")
    dtype, recipe = GEMM_DTYPES.get(moe_dtype, ("", ""))  # the MoE tables name their dtypes as the GEMM tables do
    if dtype not in dict(hw.gpu.peak_flops):
        return Skip(f"moe in {moe_dtype}: not modelled")
    time_s = table_row_s(_variant(hw, dtype=dtype, fp8_recipe=recipe), hidden, inter, experts, topk, tokens, moe_tp,
                         moe_ep, gated="nongated" not in kernel_source, grouped_kernels=ENGINES[engine].grouped_moe)
    flops = 2.0 * tokens * topk * hidden * (inter / moe_tp) * (3 if "nongated" not in kernel_source else 2)
    label = f"{dtype} block" if recipe else dtype
    return "moe.experts", label, flop_bucket(flops), time_s


# the attention tables' columns each row's function takes, in this order
CONTEXT_COLUMNS = ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                   "attn_dtype", "kv_cache_dtype")
GENERATION_COLUMNS = ("kernel_source", "batch_size", "num_heads", "num_key_value_heads", "head_dim", "step",
                      "window_size", "attn_dtype", "kv_cache_dtype")
# (op folder, table, its columns passed to the row's function in this order, the function)
TABLES = (
    ("gemm", "gemm_perf", ("m", "n", "k", "gemm_dtype"), _gemm),
    ("attention", "context_attention_perf", CONTEXT_COLUMNS, _context),
    ("attention", "generation_attention_perf", GENERATION_COLUMNS, _generation),
    ("comm", "nccl_perf", ("op_name", "num_gpus", "message_size", "nccl_dtype"), _nccl),
    ("comm", "custom_allreduce_perf", ("num_gpus", "message_size", "allreduce_dtype", "backend"), _custom_allreduce),
    ("mla", "context_mla_perf", ("batch_size", "isl", "num_heads", "mla_dtype", "kv_cache_dtype"), _mla_context),
    ("mla", "generation_mla_perf", ("batch_size", "num_heads", "step", "mla_dtype", "kv_cache_dtype"), _mla_generation),
    ("moe", "moe_perf", ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                         "moe_tp_size", "moe_ep_size", "distribution"), _moe),
)


def error_summary(predicted_s, measured_s) -> dict:
    """n, median signed error, median, mean and 90th-percentile |error|, in percent, of
    error = predicted / measured - 1."""
    error = np.asarray(predicted_s, dtype=float) / np.asarray(measured_s, dtype=float) - 1.0
    return {"n": int(error.size), "median_error_pct": 100.0 * float(np.median(error)),
            "median_abs_error_pct": 100.0 * float(np.median(np.abs(error))),
            "mean_abs_error_pct": 100.0 * float(np.mean(np.abs(error))),
            "p90_abs_error_pct": 100.0 * float(np.percentile(np.abs(error), 90))}


def _group_order(item) -> tuple:
    kernel, dtype, bucket = item[0]
    return kernel, dtype, BUCKETS.index(bucket)


def _read(path: Path, columns: tuple, max_rows: int | None) -> tuple:
    """The columns of one table as Python lists (window_size is absent from older tables: 0)."""
    import pyarrow.parquet as pq  # only this suite reads Parquet

    names = set(pq.read_schema(path).names)
    table = pq.read_table(path, columns=[c for c in (*columns, "latency") if c in names])
    if max_rows is not None:
        table = table.slice(0, max_rows)
    lists = {c: table.column(c).to_pylist() for c in table.column_names}
    return tuple(lists.get(c, [0] * table.num_rows) for c in columns), lists["latency"]


def kernel_groups(root: Path = KERNELS_DIR, gpus=None, max_rows: int | None = None) -> tuple:
    """(records, skipped): one record per (gpu, framework, kernel, dtype, bucket) with the
    error figures of error_summary; one skipped entry per (gpu, framework, table, reason) with
    its row count. `max_rows` takes the first rows of each table (a quick slice)."""
    root = Path(root)
    if not root.is_dir():
        raise SpecError("rapid validate --suite kernels", "kernel tables", str(root),
                        "missing: the measured kernel tables live in ../shared/validation/kernels "
                        "beside the repository")
    presets = set(list_presets()["gpus"])
    records, skipped = [], []
    for gpu_dir in sorted(p for p in root.iterdir() if p.is_dir() and (gpus is None or p.name in gpus)):
        preset = PRESET_BY_GPU.get(gpu_dir.name)
        for op, table, columns, predict in TABLES:
            for path in sorted(gpu_dir.glob(f"{op}/*/*/{table}.parquet")):
                framework = f"{path.parent.parent.name} {path.parent.name}"
                if preset not in presets:
                    rows = len(_read(path, columns[:1], max_rows)[1])
                    skipped.append({"suite": SUITE, "gpu": gpu_dir.name, "framework": framework, "table": table,
                                    "reason": "no GPU preset", "rows": rows})
                    continue
                hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
                values, latency_ms = _read(path, columns, max_rows)
                groups, reasons = defaultdict(lambda: ([], [])), Counter()
                engine = ({"engine": path.parent.parent.name} if op in ("attention", "gemm", "mla", "moe")
                          or table == "custom_allreduce_perf" else {})
                for row, measured_ms in zip(zip(*values), latency_ms):
                    out = predict(hw, *row, **engine)
                    if isinstance(out, Skip):
                        reasons[str(out)] += 1
                        continue
                    kernel, dtype, bucket, predicted_s = out
                    group = groups[(kernel, dtype, bucket)]
                    group[0].append(predicted_s)
                    group[1].append(measured_ms * MS)
                for (kernel, dtype, bucket), (predicted, measured) in sorted(groups.items(), key=_group_order):
                    records.append({"suite": SUITE, "gpu": gpu_dir.name, "hardware": preset, "framework": framework,
                                    "kernel": kernel, "dtype": dtype, "bucket": bucket,
                                    **error_summary(predicted, measured)})
                skipped += [{"suite": SUITE, "gpu": gpu_dir.name, "framework": framework, "table": table,
                             "reason": reason, "rows": rows} for reason, rows in sorted(reasons.items())]
    return records, skipped


__all__ = ["CUBLAS_OVER_CUTLASS_FP8", "KERNELS_DIR", "TRTLLM_FP8_BLOCK_OVER_CUBLAS", "VLLM_FP8_STORE_OVER_CUBLAS",
           "VLLM_NVFP4_STORE_OVER_CUBLAS", "cutlass_arch",
           "error_summary", "in_graph", "kernel_groups", "kernels_alone", "library_gemm_s", "VLLM_NVFP4_TILES",
           "vllm_fp8_tiles"]
