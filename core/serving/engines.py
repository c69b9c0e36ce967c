"""What distinguishes the serving engines: how they batch prefill with decode, how they hold the
KV cache, which iterations replay as CUDA graphs, and the host time they add. Defaults are the
engines' own (their server arguments), sized for the GPU where the engine sizes them (on_gpu);
the two overheads are fitted (scripts/fit_serving.py)."""
from dataclasses import dataclass, replace
from functools import lru_cache

from core.errors import SpecError
from core.model.memory import GiB, MiB


@dataclass(frozen=True)
class EngineSpec:
    name: str
    # prefill chunks share an iteration with the running decodes (TensorRT-LLM's in-flight
    # batching, vLLM's chunked prefill); False: a prefill iteration stalls decoding (SGLang's
    # default, enable_mixed_chunk off)
    mixed_batches: bool
    chunked_prefill: bool  # a prompt longer than the token budget is split across iterations
    # "reserve": a request is admitted only if the cache holds its whole prompt and output
    # (TensorRT-LLM's GUARANTEED_NO_EVICT); "on_demand": blocks are taken as tokens are made
    # and the newest request is preempted (recomputed later) when the cache runs out
    kv_policy: str
    kv_block_tokens: int
    kv_memory_fraction: float  # the engine's memory knob, of what kv_budget says
    max_num_tokens: int  # token budget of one iteration (prefill chunk plus decodes)
    max_batch: int  # requests in flight per engine
    cuda_graph_max_batch: int  # decode-only iterations up to this batch replay as a CUDA graph
    iteration_overhead_s: float  # host time per iteration (scheduling, sampling, bookkeeping)
    request_overhead_s: float  # per request before its first token leaves (API server, tokenizer)
    # host time per iteration that grows with the work the host does: per sequence sampled in it
    # (scheduling, block tables, sampling and sending on each request's token: Python
    # per sequence in vLLM and SGLang, none measurable in TensorRT-LLM's C++ runtime) and per
    # tensor-parallel rank beyond the first (the step's inputs sent to each worker process; read by
    # host_s, the energy suite's legacy engines, not yet by the serving simulator's iterations)
    sequence_overhead_s: float = 0.0
    rank_overhead_s: float = 0.0
    # what kv_memory_fraction is a share of: "free", the memory the weights and the runtime
    # leave, all of it for the KV cache (TensorRT-LLM's free_gpu_memory_fraction); "utilization",
    # the whole memory, for the weights, the runtime and the KV cache (vLLM's
    # gpu_memory_utilization); "static", the whole memory, for the weights and the KV cache, the
    # runtime's activations and CUDA graphs kept outside it (SGLang's mem_fraction_static, which
    # SGLang sizes from the GPU's memory and its own settings: sglang_memory_fraction)
    kv_budget: str = "free"
    # its MoE experts run the fused-MoE kernels AIConfigurator's MoE tables time (vLLM's own:
    # Triton, FlashInfer CUTLASS and trtllm-gen as vLLM calls them), so the hardware's fitted
    # grouped-GEMM factors time them (core/serving/moe.py). SGLang and TensorRT-LLM run kernels of
    # their own, which the DeepSeek-V3 serving rows show faster than those tables at a prompt's
    # prefill (one 8,192-token prompt on 8 GPUs: SGLang 0.5.9 on H200 447 ms measured, 513 ms
    # with the plain GEMMs, 652 ms with the tables' kernels; TensorRT-LLM 1.2 on B200 348, 353
    # and 417 ms): they keep the layer graph's plain GEMMs.
    grouped_moe: bool = False
    # whose fitted attention kernels (calibration.engine_attention) time its attention, where the
    # GPU's preset has them; "" or an engine the preset lacks: the fused training kernel and the
    # bandwidth-bound decode sweep. SGLang takes vLLM's: both run FlashAttention-3 on Hopper and
    # FlashInfer's TensorRT-LLM-generated kernels on Blackwell (SGLang's default backends there,
    # vLLM's per KERNEL_ENGINES); no SGLang kernel table exists to fit its own.
    attention_kernels: str = ""
    # whose own all-reduce kernel (calibration.engine_allreduce) its tensor-parallel all-reduces
    # run inside an NVLink domain, where the GPU's preset has it ("": NCCL's ring). SGLang takes
    # vLLM's: its custom all-reduce is vLLM's one-shot/two-shot kernel (no SGLang table exists).
    allreduce_kernels: str = ""
    # the client sees a request's first token only when its first decode step ends (with the
    # second): its TTFT then includes what the engine runs between the two
    first_token_with_decode: bool = False
    # TensorRT-LLM's batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio; off
    # by default): while decodes run, the prompts the scheduler picked are held back, up to this
    # many iterations in all, until they and the decodes fill this share of max_num_tokens, so
    # that prompts prefill together; every held prompt's TTFT waits out the hold
    batch_wait_iters: int = 0
    batch_wait_tokens_ratio: float = 0.0
    # the knobs set by hand (engine_spec, with_knobs), which the engine's own sizing for the GPU
    # (on_gpu) leaves as set
    knobs_set: frozenset = frozenset()
    # the engine release whose defaults it takes (release(); (): the current), set by release_spec
    release: tuple = ()

    def host_s(self, sequences: int, tp: int) -> float:
        """Host seconds of one decode iteration of `sequences` running sequences on `tp` ranks."""
        return self.iteration_overhead_s + self.sequence_overhead_s * sequences + self.rank_overhead_s * (tp - 1)


# The knobs an engine sizes for its GPU (GPU_SIZED_KNOBS, on_gpu) are given here as it sizes them
# on a GPU of 80 to 160 GB in an engine of fewer than 4 tensor-parallel ranks.
# Overheads: fitted by scripts/fit_serving.py --every 2 on ../shared/validation/serving (dense rows,
# with each engine's client ramp and length spread, core/validation/serving); rerun it when kernel
# times move. sequence_overhead_s: scanned after them by its --sequence, the rest held (dense rows,
# every second: vLLM 25 us, SGLang 15 us, TensorRT-LLM 0; TPOT mean |err| 7.3 -> 6.4, 11.3 -> 8.6
# and 9.7 %; left-one-engine-out 7.0, 10.1 and 10.2 %; no engine's TTFT moves by 0.1 point).
ENGINES = {
    # TensorRT-LLM's PyTorch flow captures decode CUDA graphs up to 128 requests unless told
    # otherwise (its LLM API's CudaGraphConfig: max_batch_size 0 takes 128)
    "trtllm": EngineSpec("trtllm", mixed_batches=True, chunked_prefill=False, kv_policy="reserve",
                         kv_block_tokens=32, kv_memory_fraction=0.9, max_num_tokens=8192, max_batch=2048,
                         cuda_graph_max_batch=128, iteration_overhead_s=0.0010, request_overhead_s=0.055,
                         attention_kernels="trtllm", allreduce_kernels="trtllm"),
    "vllm": EngineSpec("vllm", mixed_batches=True, chunked_prefill=True, kv_policy="on_demand",
                       kv_block_tokens=16, kv_memory_fraction=0.9, max_num_tokens=8192, max_batch=1024,
                       cuda_graph_max_batch=512, iteration_overhead_s=0.0020, request_overhead_s=0.040,
                       sequence_overhead_s=25e-6, kv_budget="utilization", grouped_moe=True,
                       attention_kernels="vllm", allreduce_kernels="vllm"),
    # SGLang runs at most max_total_num_tokens // 2 requests and its request pool's size, 2,048 to
    # 4,096 (the scheduler's max_running_requests): 2,048, the pool's floor
    # (its kv_memory_fraction, 0.88, is SGLang's where it cannot read the GPU's memory; on_gpu sizes it)
    "sglang": EngineSpec("sglang", mixed_batches=False, chunked_prefill=True, kv_policy="on_demand",
                         kv_block_tokens=1, kv_memory_fraction=0.88, max_num_tokens=8192, max_batch=2048,
                         cuda_graph_max_batch=256, iteration_overhead_s=0.0005, request_overhead_s=0.130,
                         sequence_overhead_s=15e-6, kv_budget="static", attention_kernels="vllm",
                         allreduce_kernels="vllm"),
}
# Request overheads of engine version families (a version's major.minor; "" for the measured rows
# that record none, one benchmark campaign's) where they differ from the engine's own: fitted by
# scripts/fit_serving.py beside it, on the families with enough dense rows; the others keep it.
FAMILY_REQUEST_OVERHEAD_S = {("trtllm", ""): 0.020, ("trtllm", "1.0"): 0.100,
                             ("vllm", ""): 0.025, ("vllm", "0.12"): 0.055}


def release(version: str) -> tuple:
    """An engine version's release numbers ("0.5.1.post1" -> (0, 5, 1); "" -> ())."""
    numbers = []
    for part in version.split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


# SGLang before 0.5.4 ran its overlap scheduler so that a finished batch's outputs were processed
# only after the next batch had launched, which delays first tokens behind a queue of prefills
# (sgl-project/sglang issue 10514: mean TTFT 2.46 s with overlap, 1.68 s without; changed by
# pull requests 10601 and 11856). Its measured rows (0.5.1, Qwen3-32B on H100) time a request's
# first token as if it left with the request's first decode step, after the prefills queued
# ahead of it: TTFT mean |err| 40 -> 11 %, TPOT 20 -> 9 % on them, the 0.5.6 and later rows
# worse with it (80 -> 183 %), so it is this release line's alone.
SGLANG_FIRST_TOKEN_FIX = (0, 5, 4)


def release_spec(spec: EngineSpec, version: str) -> EngineSpec:
    """`spec` as the engine release `version` (major.minor.patch...; "" for the current) schedules
    and sizes itself."""
    spec = replace(spec, release=release(version))
    if spec.name == "sglang" and version and spec.release < SGLANG_FIRST_TOKEN_FIX:
        return replace(spec, first_token_with_decode=True)
    return spec


def version_family(version: str) -> str:
    """An engine version's family: its major.minor ("1.0.0rc3" -> "1.0"; "" stays "")."""
    return ".".join(version.split(".")[:2])


# Engine versions measured only end to end (not serving-simulator engines): vLLM 0.5.4, the engine
# of ML.ENERGY v2.0, ran its scheduler, sampler and detokenizer in Python between the GPU's
# iterations, without chunked prefill. Host overheads per GPU family (the host machines differ),
# fitted by scripts/fit_vllm_host.py on ../shared/validation/energy; rerun it when kernel times move.
_VLLM_0_5 = EngineSpec("vllm-0.5", mixed_batches=False, chunked_prefill=False, kv_policy="on_demand",
                       kv_block_tokens=16, kv_memory_fraction=0.9, max_num_tokens=8192, max_batch=256,
                       cuda_graph_max_batch=256, iteration_overhead_s=0.0, request_overhead_s=0.0,
                       kv_budget="utilization")
LEGACY_ENGINES = {
    ("vllm-0.5", "a100"): replace(_VLLM_0_5, iteration_overhead_s=0.005293, sequence_overhead_s=0.000389,
                                  rank_overhead_s=0.009442),
    ("vllm-0.5", "h100"): replace(_VLLM_0_5, iteration_overhead_s=0.006801, sequence_overhead_s=0.000366,
                                  rank_overhead_s=0.011212),
}


def engine_spec(name: str, max_num_tokens: int = 0, max_batch: int = 0, source: str = "") -> EngineSpec:
    """The engine's defaults, with a token budget or batch cap given (0 keeps the default)."""
    if name not in ENGINES:
        raise SpecError(source, "engine", name, f"expected one of {', '.join(ENGINES)}")
    spec = ENGINES[name]
    for field, value in (("max_num_tokens", max_num_tokens), ("max_batch", max_batch)):
        if value < 0:
            raise SpecError(source, field, value, "expected a positive integer (0 = the engine's default)")
        if value:
            spec = with_knobs(spec, **{field: value})
    return spec


def with_knobs(spec: EngineSpec, **knobs) -> EngineSpec:
    """`spec` with knobs set by hand, which its sizing for the GPU (on_gpu) then leaves alone."""
    return replace(spec, knobs_set=spec.knobs_set | frozenset(knobs), **knobs)


# vLLM's API server on a GPU of 70 GiB or more other than an A100 takes an 8,192-token budget and
# 1,024 requests (ENGINES); on the others 2,048 and 256 (vllm EngineArgs.get_batch_defaults: a
# larger budget lowered the A100's throughput, vLLM pull request 17885).
VLLM_LARGE_GPU_BYTES = 70 * GiB
VLLM_SMALL_GPU_KNOBS = {"max_num_tokens": 2048, "max_batch": 256}
# SGLang sizes its prefill chunk and its largest CUDA-graph batch by the GPU's memory
# (ServerArgs._handle_gpu_memory_settings): (memory below this many bytes, chunked_prefill_size,
# cuda_graph_max_bs on fewer than 4 tensor-parallel ranks, on 4 or more).
SGLANG_MEMORY_TIERS = ((20 * GiB, 2048, 8, 8), (35 * GiB, 2048, 24, 80), (60 * GiB, 4096, 32, 160),
                       (160 * GiB, 8192, 256, 512), (float("inf"), 16384, 512, 512))


# SGLang's default mem_fraction_static is what the GPU's memory leaves once SGLang reserves room for
# its runtime (ServerArgs._handle_gpu_memory_settings). From pull request 10975 (merged 2025-09-27,
# first released in 0.5.3) the reserve is 512 MiB, 1.5 MiB per token of the prefill chunk (2,048
# at least), 2 MiB per request of the largest CUDA graph and 1 GiB per 8 ranks (tensor x pipeline),
# plus 4.5 MiB per graph request and attention-DP rank where graphs pass 300 requests (3 MiB
# below), and at least 10 GiB on a GPU of more than 60 GiB; before it, a reserve per memory tier:
# see SGLANG_TIER_RESERVES, plus 4 GiB with attention DP.
# Qwen3-32B on one H100 thus holds 13,440 MiB back (a fraction of 0.835; sgl-project/sglang issue
# 29092 reads 0.828 for it) and caches some 22,000 tokens, where a share of the memory the weights
# leave (0.88 of it, this engine's budget before) cached 60,000.
SGLANG_BUFFER_RESERVE_RELEASE = (0, 5, 3)
SGLANG_RESERVE_BASE_MIB = 512
SGLANG_RESERVE_PER_CHUNK_TOKEN_MIB = 1.5
SGLANG_RESERVE_MIN_CHUNK_TOKENS = 2048
SGLANG_RESERVE_PER_GRAPH_REQUEST_MIB = 2
SGLANG_RESERVE_PER_8_RANKS_MIB = 1024
SGLANG_RESERVE_DP_PER_GRAPH_REQUEST_MIB = (3, 4.5)  # per attention-DP rank: up to / past 300 requests
SGLANG_RESERVE_DP_LARGE_GRAPH = 300
SGLANG_FLOOR_ABOVE_BYTES = 60 * GiB  # on GPUs of more memory than this,
SGLANG_FLOOR_RESERVE_BYTES = 10 * GiB  # at least this is held back
# (memory below this many bytes, GiB reserved, GiB more per rank)
SGLANG_TIER_RESERVES = ((35 * GiB, 2.8, 0.1), (90 * GiB, 9.5, 0.5), (160 * GiB, 12.0, 0.5), (float("inf"), 32.0, 0.0))
SGLANG_TIER_DP_RESERVE_BYTES = 4 * GiB


def sglang_memory_fraction(memory_bytes: float, chunk_tokens: int, graph_requests: int, tp: int, pp: int = 1,
                           attention_dp: int = 1, version: tuple = ()) -> float:
    """SGLang's default mem_fraction_static for a GPU of `memory_bytes` in an engine of tp x pp
    ranks (tp counting every attention-DP rank's), from release `version` on (() the current)."""
    ranks = tp * pp
    if version and version < SGLANG_BUFFER_RESERVE_RELEASE:
        _, base_gib, per_rank_gib = next(tier for tier in SGLANG_TIER_RESERVES if memory_bytes < tier[0])
        reserve = (base_gib + per_rank_gib * ranks) * GiB + (SGLANG_TIER_DP_RESERVE_BYTES if attention_dp > 1 else 0)
    else:
        reserve_mib = (SGLANG_RESERVE_BASE_MIB
                       + SGLANG_RESERVE_PER_CHUNK_TOKEN_MIB * max(chunk_tokens, SGLANG_RESERVE_MIN_CHUNK_TOKENS)
                       + SGLANG_RESERVE_PER_GRAPH_REQUEST_MIB * graph_requests
                       + SGLANG_RESERVE_PER_8_RANKS_MIB * ranks / 8)
        if attention_dp > 1:
            per_request = SGLANG_RESERVE_DP_PER_GRAPH_REQUEST_MIB[graph_requests > SGLANG_RESERVE_DP_LARGE_GRAPH]
            reserve_mib += per_request * graph_requests * attention_dp
        reserve = reserve_mib * MiB
        if memory_bytes > SGLANG_FLOOR_ABOVE_BYTES:
            reserve = max(reserve, SGLANG_FLOOR_RESERVE_BYTES)
    return sglang_fraction_leaving(memory_bytes, reserve)


def sglang_fraction_leaving(memory_bytes: float, reserve_bytes: float) -> float:
    """The mem_fraction_static that holds `reserve_bytes` of a GPU's memory back, as SGLang rounds it."""
    return round((memory_bytes - reserve_bytes) / memory_bytes, 3)


def _sglang_knobs(spec: EngineSpec, gpu, tp: int, pp: int, attention_dp: int) -> dict:
    memory = gpu.hbm.capacity_bytes
    _, chunk, graph_small, graph_large = next(tier for tier in SGLANG_MEMORY_TIERS if memory < tier[0])
    knobs = {"max_num_tokens": chunk, "cuda_graph_max_batch": graph_small if tp < 4 else graph_large}
    chunk, graphs = (getattr(spec, name) if name in spec.knobs_set else knobs[name] for name in knobs)
    knobs["kv_memory_fraction"] = sglang_memory_fraction(memory, chunk, graphs, tp, pp, attention_dp, spec.release)
    return knobs


def _vllm_knobs(spec: EngineSpec, gpu, tp: int, pp: int, attention_dp: int) -> dict:
    large = gpu.hbm.capacity_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in gpu.name.lower()
    return {} if large else VLLM_SMALL_GPU_KNOBS


# engine name -> its knobs as it sizes them for (spec, gpu, tp, pp, attention_dp)
GPU_SIZED_KNOBS = {"sglang": _sglang_knobs, "vllm": _vllm_knobs}


@lru_cache(maxsize=4096)
def on_gpu(spec: EngineSpec, gpu, tp: int = 1, pp: int = 1, attention_dp: int = 1) -> EngineSpec:
    """`spec` as its engine sizes itself on `gpu` in an engine of `tp` tensor-parallel ranks (every
    attention-DP rank's) and `pp` stages, the knobs set by hand (knobs_set) kept."""
    rule = GPU_SIZED_KNOBS.get(spec.name)
    if rule is None:
        return spec
    knobs = rule(spec, gpu, tp, pp, attention_dp)
    return replace(spec, **{name: value for name, value in knobs.items() if name not in spec.knobs_set})
