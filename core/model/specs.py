"""Frozen specs: what is modelled (ModelSpec), on what (HardwareSpec), how it is split
(Parallelism) and what is run (TrainWorkload / InferWorkload). All sizes in bytes,
bandwidths in bytes/s, times in seconds, throughput in FLOP/s."""
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache

ACTIVATIONS = ("gelu", "swiglu", "squared_relu")  # only SwiGLU is gated (three matrices)
NORMS = ("layernorm", "rmsnorm")
# flash: a fused kernel using the GPU's newest MMA path (FlashAttention-3, cuDNN); flash2:
# FlashAttention-2, which issues the pre-Hopper mma.sync; flash1: FlashAttention 1.x (2022) and
# the Triton kernels derived from it; standard: unfused matmuls and softmax.
ATTENTION_KERNELS = ("flash", "flash2", "flash1", "standard")
POSITION_EMBEDDINGS = ("rotary", "learned")
RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe", "interleaved")
TOPOLOGIES = ("switch", "ring", "ring-uni", "fully-connected", "mesh", "mesh2d", "torus2d",
              "kingmesh2d", "hypercube", "fattree")
PARALLEL_AXES = ("tp", "cp", "ep", "dp", "pp")
# mxfp8 and nvfp4 are Blackwell's block-scaled formats (OCP MX: an E8M0 scale per 32 FP8
# elements; NVIDIA's NVFP4: an E4M3 scale per 16 FP4 elements); their element bytes here leave
# the scales out.
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "mxfp8": 1, "nvfp4": 0.5}
# Checkpoint weight formats a quantization_config names, bytes per weight with their block
# scales: DeepSeek's FP8 with an FP32 scale per 128 x 128 block, OCP MXFP4 (an E8M0 scale per 32
# FP4 values, gpt-oss's experts), NVFP4 (an E4M3 scale per 16; the per-tensor scale left out).
WEIGHT_FORMAT_BYTES = {"fp8_block": 1 + 4 / (128 * 128), "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16,
                       "int4_group32": 0.5 + 2 / 32}  # compressed-tensors INT4, a BF16 scale per 32
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
LOW_PRECISION_DTYPES = ("fp8", "mxfp8", "nvfp4")  # GEMM-only formats: the rest of the step stays in BF16
# How Transformer Engine scales a low-precision tensor. "delayed": one FP32 scale per tensor from
# the amax history of earlier steps (the cast records this step's amax in passing); "current":
# one FP32 scale per tensor from this tensor's own amax, an extra reduction pass before each
# cast; "block-scaled": a scale per small block, computed inside the cast (FP8: TE's
# Float8BlockScaling, an FP32 scale per 1x128 tile; MXFP8 and NVFP4 are block-scaled by
# definition).
FP8_RECIPES = ("delayed", "current", "block-scaled")
RECIPES_BY_DTYPE = {"fp8": FP8_RECIPES, "mxfp8": ("block-scaled",), "nvfp4": ("block-scaled",)}
# "none": no scaling recipe, the 16-bit dtypes' one choice, so that a study can cross dtype and
# fp8_recipe and keep its bf16 points (a low-precision dtype refuses it)
NO_RECIPE = "none"
RECIPE_CHOICES = (*FP8_RECIPES, NO_RECIPE)
DEFAULT_RECIPE = {"fp8": "delayed", "mxfp8": "block-scaled", "nvfp4": "block-scaled"}  # Megatron-Core's --fp8-recipe
# (elements per scale, bytes per scale) of a block-scaled tensor: MXFP8's E8M0 byte per 32,
# NVFP4's E4M3 byte per 16 (plus one FP32 scale per tensor, negligible), TE's FP8 blocks an FP32
# scale per 128 (weights: per 128x128, 2D). NVFP4 weights scaled over 16x16 blocks (TE's 2D
# recipe) still store a scale per 16 along k: TE keeps them in its 1D scaling mode, the layout
# the block-scaled GEMMs read (cuBLAS's VEC16 scales), each 2D block's scale in its 16 rows.
BLOCK_SCALES = {"fp8": (128, 4), "mxfp8": (32, 1), "nvfp4": (16, 1)}
WEIGHT_BLOCK_SCALES = {"fp8": (128 * 128, 4), "mxfp8": (32, 1), "nvfp4": (16, 1)}
# Storage formats an inference KV cache can take (tf32 is a tensor-core input mode, not one);
# nvfp4 (TensorRT-LLM's FP4 KV cache, with its per-16 E4M3 scales) needs a GPU with an FP4 peak.
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "nvfp4")
# The largest batch, sequence or token count a workload may name: attention kernels index
# tokens with int32 (FlashAttention's and cuDNN's cu_seqlens), so no run goes past it.
MAX_WORKLOAD_SIZE = 2**31 - 1
WORKLOAD_SIZE_ALLOWED = f"expected a positive integer up to {MAX_WORKLOAD_SIZE:,} (int32, as attention kernels count tokens)"
GRAD_DTYPES = ("fp32", "bf16")
OPTIMIZER_DTYPES = ("fp32", "bf16")  # Adam's first and second moments
# What the optimizer keeps to update the weights in full precision: "fp32" master weights
# (Megatron's optimizers, which also cast 16-bit gradients to FP32 for the step); "bf16"
# master weights (apex DistributedFusedAdam with dtype bf16 beside FP8 weights); "remainders",
# the 16 low bits that with the BF16 weights rebuild FP32 ones (apex store_param_remainders,
# NeMo's choice for FP32 Adam over BF16 weights); "none", the optimizer updating the BF16
# weights themselves (apex with dtype bf16 over BF16 weights).
MASTER_WEIGHTS = ("fp32", "bf16", "remainders", "none")
ZERO_STAGES = (0, 1, 2, 3)


def gathers_parameters(zero):
    """Whether a ZeRO stage (or an array of them) leaves parameter shards to gather, so that
    overlap_param_gather's default is on: the distributed optimizer's updated shards (1, 2) or
    ZeRO-3's per-layer parameters."""
    return zero >= 1


def hash_once(cls):
    """A frozen spec that keys the model's memo caches, hashed once per object instead of on
    every memoized call (a hardware spec hashes ~40 fields). The cached hash is not pickled:
    string hashes differ between processes."""
    names = tuple(f.name for f in fields(cls))

    def __hash__(self):
        try:
            return self._hash
        except AttributeError:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, name) for name in names)))
            return self._hash

    def __getstate__(self):
        return {key: value for key, value in self.__dict__.items() if key != "_hash"}

    cls.__hash__, cls.__getstate__ = __hash__, __getstate__
    return cls


def quantized_bytes(dtype: str, recipe: str, weights: bool = False) -> float:
    """Bytes per element of one quantized copy (rowwise or columnwise) of a tensor: the
    element plus its share of the block scales (per-tensor recipes add none)."""
    if recipe != "block-scaled":
        return DTYPE_BYTES[dtype]
    elements, scale_bytes = (WEIGHT_BLOCK_SCALES if weights else BLOCK_SCALES)[dtype]
    return DTYPE_BYTES[dtype] + scale_bytes / elements


def gemm_recipe(dtype: str, recipe: str) -> str:
    """How a GEMM in `dtype` scales its inputs under the run's `recipe`: that recipe where the
    dtype offers it (FP8's three), else the dtype's own (MXFP8's and NVFP4's blocks, which a
    BF16 run's GEMMs in those dtypes keep too); "" for 16 bits and more."""
    return recipe if recipe in RECIPES_BY_DTYPE.get(dtype, ()) else DEFAULT_RECIPE.get(dtype, "")


def kv_element_bytes(kv_dtype: str) -> float:
    """Bytes per KV-cache element: the element plus, for NVFP4, its block scale."""
    return quantized_bytes(kv_dtype, "block-scaled") if kv_dtype == "nvfp4" else DTYPE_BYTES[kv_dtype]


def activation_dtype(compute_dtype: str) -> str:
    """What activations, attention, norms and weights' working copies are kept in: FP8 (and
    MXFP8, NVFP4) training (Transformer Engine) runs only the GEMMs in the low-precision format
    and keeps the rest in BF16."""
    return "bf16" if compute_dtype in LOW_PRECISION_DTYPES else compute_dtype


@dataclass(frozen=True)
class MoESpec:
    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_expert_ffn_hidden: int = 0  # an always-active expert every token also passes
    capacity_factor: float = 0.0  # token-drop routing: tokens per expert <= factor * fair share; 0 = dropless
    # Group-limited routing (DeepSeek-V3's n_group / topk_group): experts sit in `groups`
    # groups and a token picks its top_k among `groups_per_token` of them; 0 = unlimited.
    groups: int = 0
    groups_per_token: int = 0


# What a layer's sequence mixer is: softmax attention (full, sliding or chunked, MHA/GQA or
# MLA), a linear-attention or state-space recurrence with a fixed state per sequence, or none
# (Nemotron-H's FFN-only blocks).
MIXERS = ("attention", "linear", "mamba", "none")
FFNS = ("dense", "moe", "none")
RECURRENT_KINDS = ("gated_deltanet", "mamba2")


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a low-rank bottleneck,
    keys and values expanded from one latent of kv_lora_rank per token plus a shared RoPE key
    of qk_rope_head_dim, which is all the KV cache keeps. `index_topk` > 0 adds DeepSeek sparse
    attention: a lightweight indexer (index_heads x index_head_dim) scores every earlier token
    and each query attends to its index_topk best only."""
    q_lora_rank: int  # 0: a full-rank query projection
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Elements the KV cache keeps per token and layer: the latent and the RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class RecurrentSpec:
    """A sequence mixer with a fixed-size state per sequence instead of a KV cache: Gated
    DeltaNet (Qwen3-Next / Qwen3.5 linear attention: `key_heads` query/key heads of key_dim,
    `heads` value heads of value_dim, a key_dim x value_dim state per value head) or Mamba-2
    (`heads` SSM heads of value_dim = head_dim, `key_heads` groups sharing B and C of
    key_dim = d_state, a head_dim x d_state state per head). Both run a causal depthwise
    convolution of conv_kernel taps over their projected inputs, whose last taps are state too."""
    kind: str
    heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int = 4

    @property
    def value_width(self) -> int:
        return self.heads * self.value_dim

    @property
    def conv_channels(self) -> int:
        """Channels the convolution runs over: q, k and v (GDN); x, B and C (Mamba-2)."""
        keys = self.key_heads * self.key_dim
        return 2 * keys + self.value_width

    def params(self, hidden: int) -> int:
        """Input projection, convolution, per-head decay/skip terms, output norm and projection."""
        if self.kind == "gated_deltanet":  # q, k, v, output gate z; per-value-head beta and decay a
            in_proj = hidden * (self.conv_channels + self.value_width + 2 * self.heads)
            extra = 2 * self.heads + self.value_dim  # A_log, dt_bias; gated RMSNorm over a head
        else:  # Mamba-2: z, x, B, C, dt
            in_proj = hidden * (self.conv_channels + self.value_width + self.heads)
            extra = 3 * self.heads + self.value_width  # A_log, D, dt_bias; gated RMSNorm
        conv = self.conv_channels * (self.conv_kernel + 1)
        return in_proj + conv + extra + self.value_width * hidden

    def state_elements(self) -> int:
        """State one sequence keeps per layer: the recurrent matrix and the convolution's taps."""
        return self.heads * self.key_dim * self.value_dim + (self.conv_kernel - 1) * self.conv_channels


@dataclass(frozen=True)
class LayerKind:
    """What one layer is, where a model's layers differ: its mixer (MIXERS), a sliding window
    or a chunk its attention keeps to (tokens, 0 = the whole context), and its FFN (FFNS)."""
    mixer: str = "attention"
    window: int = 0
    chunk: int = 0
    ffn: str = "dense"
    # where this kind's attention has a shape of its own (Gemma 4's global layers: wider heads,
    # fewer KV heads, values that are the keys); 0 / False = the model's
    head_dim: int = 0
    kv_heads: int = 0
    value_is_key: bool = False


@hash_once
@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    activation: str = "swiglu"
    norm: str = "rmsnorm"
    tied_embeddings: bool = False
    position_embedding: str = "rotary"
    attention_kernel: str = "flash"
    dropout: bool = False
    max_position: int = 0
    moe: MoESpec | None = None
    attention_head_dim: int = 0  # 0: hidden / heads; set when a model decouples them (Qwen3: 128)
    # Per-layer kinds, one LayerKind per layer, where layers differ (dense and MoE FFNs, sliding
    # and full attention, linear attention or Mamba beside attention); () = every layer is this
    # spec's own kind (mixer, window, chunk, and an MoE FFN when moe is set).
    layer_kinds: tuple = ()
    mixer: str = "attention"
    window: int = 0  # sliding-window attention: tokens each query sees (0 = all before it)
    chunk: int = 0  # chunked local attention (Llama 4): queries see their chunk only (0 = none)
    mla: MLASpec | None = None
    recurrent: RecurrentSpec | None = None
    attention_bias: bool = False  # biases on the q, k, v and output projections (gpt-oss)
    attention_gate: bool = False  # a sigmoid output gate from the query projection (Qwen3.5)
    value_is_key: bool = False  # no value projection: attention's values are its keys (Gemma 4's global layers)
    mtp_layers: int = 0  # multi-token-prediction modules (DeepSeek-V3) trained beside the model
    # The checkpoint's weight formats (WEIGHT_FORMAT_BYTES) from its quantization_config: the
    # layers' weights (DeepSeek's FP8 blocks) and the experts' (gpt-oss's MXFP4); "" = the
    # compute dtype. An inference engine keeps the narrower of each and its compute dtype
    # (memory.stored_weight_bytes).
    weight_dtype: str = ""
    expert_weight_dtype: str = ""

    @property
    def expert_format(self) -> str:
        """The checkpoint's format of the routed experts' weights (its layers' where it names none)."""
        return self.expert_weight_dtype or self.weight_dtype

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one FFN: 3 for SwiGLU (gate, up, down), 2 for GELU."""
        return 3 if self.activation == "swiglu" else 2

    @cached_property
    def uniform(self) -> bool:
        """Every layer alike and nothing beside them: one layer graph serves the whole model."""
        return not self.layer_kinds and not self.mtp_layers

    def kind_spec(self, kind: LayerKind) -> "ModelSpec":
        """The spec of one layer kind of this model: every layer alike, of that kind."""
        return _kind_spec(self, kind)

    def layer_groups(self, start: int = 0, stop: int | None = None) -> tuple:
        """((uniform spec, layer count), ...) of layers start..stop, each kind once, in the
        order they first appear: what a stage or the whole model costs is the sum over these."""
        return _layer_groups(self, start, self.layers if stop is None else stop)

    def trained_groups(self) -> tuple:
        """layer_groups() and the MTP modules' layers (each one of the last layer's kind): the
        layers a training step runs."""
        groups = self.layer_groups()
        if not self.mtp_layers:
            return groups
        last = self.layer_groups(self.layers - 1)[0][0]
        counts = dict(groups)
        counts[last] = counts.get(last, 0) + self.mtp_layers
        return tuple(counts.items())

    def attention_params(self) -> int:
        """The sequence mixer's parameters (attention, MLA, linear attention or Mamba)."""
        h = self.hidden
        if self.mixer == "none":
            return 0
        if self.mixer != "attention":
            return self.recurrent.params(h)
        if self.mla is not None:
            return _mla_params(self.mla, h, self.heads)
        gate = self.q_dim if self.attention_gate else 0
        kv = self.kv_tensors * self.kv_dim
        bias = (self.q_dim + kv + h) if self.attention_bias else 0
        return h * (self.q_dim + gate + kv) + self.q_dim * h + bias

    @property
    def kv_tensors(self) -> int:
        """Tensors attention projects and caches per KV head: keys and values, or keys alone."""
        return 1 if self.value_is_key else 2

    def mlp_params(self) -> int:
        """Dense FFN parameters, or all experts' for MoE (router included)."""
        if self.moe is None:
            return self.mlp_matrices * self.hidden * self.ffn_hidden
        per_expert = self.mlp_matrices * self.hidden * self.moe.expert_ffn_hidden
        return self.moe.experts * per_expert + self.hidden * self.moe.experts + self.shared_expert_params()

    def shared_expert_params(self) -> int:
        return self.mlp_matrices * self.hidden * self.moe.shared_expert_ffn_hidden if self.moe else 0

    def layer_params(self) -> int:
        """One layer of this (uniform) spec: mixer, FFN and a norm before each."""
        blocks = (self.mixer != "none") + (self.moe is not None or self.ffn_hidden > 0)
        norms = blocks * self.hidden * (2 if self.norm == "layernorm" else 1)
        return self.attention_params() + self.mlp_params() + norms

    def embedding_params(self) -> int:
        learned = self.max_position * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + learned

    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def decoder_params(self) -> int:
        """Every transformer layer's parameters."""
        return sum(count * spec.layer_params() for spec, count in self.layer_groups())

    def mtp_params(self) -> int:
        """DeepSeek-V3's MTP modules: each one layer of the last kind, two norms and a
        projection of [hidden, embedding] back to hidden (embedding and head shared)."""
        if not self.mtp_layers:
            return 0
        last = self.layer_groups(self.layers - 1)[0][0]
        return self.mtp_layers * (last.layer_params() + 2 * self.hidden + 2 * self.hidden * self.hidden)

    def total_params(self) -> int:
        """The main model's parameters (MTP modules apart, as published counts leave them out)."""
        return _total_params(self)

    def active_params(self) -> int:
        """Parameters touched per token (MoE counts only top_k experts)."""
        inactive = 0
        for spec, count in self.layer_groups():
            if spec.moe is not None:
                per_expert = spec.mlp_matrices * spec.hidden * spec.moe.expert_ffn_hidden
                inactive += count * (spec.moe.experts - spec.moe.top_k) * per_expert
        return self.total_params() - inactive


def model_with_kinds(base: dict, kinds: list, **fields) -> ModelSpec:
    """A spec whose layers are `kinds` (LayerKind per layer): where every layer is the same
    kind, no per-layer kinds (the fast single-kind path) and that kind on the spec's own fields."""
    layer_kinds = () if len(set(kinds)) <= 1 else tuple(kinds)
    if not layer_kinds and kinds:
        only = kinds[0]
        fields.update(mixer=only.mixer, window=only.window, chunk=only.chunk)
        if only.ffn != "moe":
            fields["moe"] = None
    return ModelSpec(**base, layer_kinds=layer_kinds, **fields)


@lru_cache(maxsize=1024)
def _total_params(model: ModelSpec) -> int:
    return model.decoder_params() + model.embedding_params() + model.lm_head_params()


def _mla_params(mla: MLASpec, hidden: int, heads: int) -> int:
    """MLA's projections: query (through q_lora_rank, with its norm, when set), the joint
    latent-and-RoPE-key down-projection with the latent's norm, the latent's up-projection to
    per-head keys and values, the output projection; and the sparse-attention indexer's query,
    key (with a LayerNorm) and head-weight projections."""
    q_out = heads * mla.qk_head_dim
    query = (hidden * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * q_out) if mla.q_lora_rank else hidden * q_out
    latent = hidden * mla.latent_dim + mla.kv_lora_rank
    up = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    out = heads * mla.v_head_dim * hidden
    indexer = 0
    if mla.index_topk:
        q_in = mla.q_lora_rank or hidden
        indexer = (q_in * mla.index_heads * mla.index_head_dim + hidden * mla.index_head_dim
                   + 2 * mla.index_head_dim + hidden * mla.index_heads)
    return query + latent + up + out + indexer


@lru_cache(maxsize=1024)
def _kind_spec(model: ModelSpec, kind: LayerKind) -> ModelSpec:
    moe = model.moe if kind.ffn == "moe" else None
    shape = {}
    if kind.head_dim:
        shape["attention_head_dim"] = kind.head_dim
    if kind.kv_heads:
        shape["kv_heads"] = kind.kv_heads
    return replace(model, layer_kinds=(), mtp_layers=0, mixer=kind.mixer, window=kind.window, chunk=kind.chunk,
                   moe=moe, ffn_hidden=0 if kind.ffn == "none" else model.ffn_hidden,
                   value_is_key=kind.value_is_key, **shape)


@lru_cache(maxsize=8192)
def _layer_groups(model: ModelSpec, start: int, stop: int) -> tuple:
    if not model.layer_kinds:
        alike = replace(model, mtp_layers=0) if model.mtp_layers else model
        return ((alike, stop - start),) if stop > start else ()
    counts = {}
    for kind in model.layer_kinds[start:stop]:
        counts[kind] = counts.get(kind, 0) + 1
    return tuple((model.kind_spec(kind), count) for kind, count in counts.items())


@dataclass(frozen=True)
class MemoryLevel:
    capacity_bytes: float
    bandwidth_bps: float


POWER_CLOCKS = ("relative", "absolute")


@dataclass(frozen=True)
class PowerSpec:
    """What one GPU board draws (core/model/power.py): a static floor, SM activity while a
    kernel runs, an energy per tensor-core FLOP per dtype and per byte of HBM and link
    traffic, all at the boost clock; and the power limit that holds the clock back."""
    tdp_w: float  # the board's default power limit, the one the calibration was fitted under
    limit_w: float  # the limit the GPU runs at (sweepable: hardware.gpu.power_limit)
    idle_w: float  # clocks up, memory allocated, nothing running (leakage, HBM refresh, board)
    active_w: float  # SM clock tree, schedulers, L2 while any kernel runs, at the boost clock
    flop_energy_j: tuple  # ((dtype, joules per FLOP), ...) at the boost clock and voltage
    hbm_energy_j_per_byte: float
    link_energy_j_per_byte: float  # NVLink / NIC traffic, the GPU's side of it
    # relative: the limit's clock over the default limit's scales calibration.sustained_clock;
    # absolute: the power model's clock is the whole-step clock (sustained_clock left at 1)
    clock: str = "relative"
    voltage_floor: float = 0.0  # voltage share the V-f line reaches at zero clock (0: V ~ f)
    node_overhead_w: float = 0.0  # per GPU: host CPUs, NICs, switches, fans (facility figures)
    pue: float = 1.0  # facility power over IT power

    def flop_energy(self, dtype: str) -> float:
        return dict(self.flop_energy_j)[dtype]


# The special-function units' exponentials per SM per clock (CUDA C programming guide,
# arithmetic instruction throughput: 16 on compute capability 7.0 to 10.0).
SFU_EXP_PER_SM_PER_CLOCK = 16.0


@hash_once
@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: tuple  # ((dtype, FLOP/s), ...) so the spec stays hashable
    sm_count: int
    clock_hz: float
    register_bytes_per_sm: float
    sram: MemoryLevel  # shared memory / L1, capacity per SM, aggregate bandwidth
    l2: MemoryLevel
    hbm: MemoryLevel
    launch_overhead_s: float
    # What an elementwise kernel replayed from a CUDA graph still pays of its launch: the GPU's
    # grid launch and drain between dependent kernels, which no graph removes. A GEMM's or an
    # attention kernel's time keeps all of launch_overhead_s in a graph (its prologue and
    # epilogue): our cuBLAS GEMMs of decode size replayed from a graph took what the model gives
    # them with it (scripts/measure_gpu_kernels.py --graph-floor).
    graph_launch_overhead_s: float = 1e-6
    # Share of the tensor-core rate a kernel issuing the pre-Hopper mma.sync reaches
    # (FlashAttention-2 on Hopper, which lacks warpgroup MMA and TMA); 1 before Hopper.
    mma_sync_share: float = 1.0
    # CTAs of a thread-block cluster that share each operand tile loaded from L2 (TMA multicast,
    # Hopper on): a GEMM's L2 traffic over this; 1 before Hopper.
    operand_multicast: int = 1
    # Its GEMM library deals the k-iterations of a grid that leaves a last wave partly empty out
    # evenly over the SMs (stream-K), summing a tile shared by several SMs through L2, rather
    # than running the last wave on the SMs it fills (data-parallel tiles alone).
    stream_k: bool = False
    # Its GEMM library sizes the token side of a tile (over m) to the batch in steps of this
    # many rows, splitting m into a few tiles of little padding (Hopper's cuBLAS nvjet kernels:
    # the warpgroup MMA's N, 8 to 256 in steps of 8); 0: the fixed tiles of ops.gemm.GEMM_TILES.
    token_tile_step: int = 0
    # Its GEMM library also offers tiles of 128 rows (ops.gemm.WIDE_TILE_M) whose width over n
    # runs between 128 and 256 columns in steps of this many (Blackwell's tcgen05 MMA: N in steps
    # of 16), so a grid of output columns that 128 or 256 divides badly takes fewer, fuller
    # waves; 0: the fixed tiles of ops.gemm.GEMM_TILES.
    wide_tile_step: int = 0
    # Block-scaled FP8 on an MMA without block scales (Hopper): each 128-deep k-block's partial
    # sums are waited for and rescaled in registers before the next, so an output tile's k-loop
    # takes at least this per k-block, however small the tile, and the kernels do not split k.
    # 0: the MMA applies the scales itself (Blackwell), or no FP8 at all.
    block_scale_step_s: float = 0.0
    # Exponentials the special-function units return per SM per clock (attention's softmax):
    # 16 on every architecture since Volta, doubled on Blackwell Ultra (B300, GB300).
    exp_per_sm_per_clock: float = SFU_EXP_PER_SM_PER_CLOCK
    # 32-bit columns of each SM's tensor memory (Blackwell: 512 x 128 lanes, 256 KiB), which
    # holds the MMA accumulators: its fused attention kernels keep each 128-row query tile's
    # FP32 scores and output there, and run two tiles per CTA, their softmaxes taking turns on
    # the tensor-core pipe, where both fit (ops.attention.cta_rows); 0: none (registers).
    tensor_memory_columns: int = 0
    power: PowerSpec | None = None  # None: the hardware file gives no power figures

    def flops(self, dtype: str) -> float:
        return dict(self.peak_flops)[dtype]


@hash_once
@dataclass(frozen=True)
class NetworkDim:
    """One network dimension, innermost first: `size` NPUs per group on this level."""
    name: str
    topology: str
    size: int  # 0 means "whatever remains of the GPU count"
    link_bandwidth_bps: float
    latency_s: float
    efficiency: float = 1.0  # achievable fraction of link bandwidth for bulk transfers
    oversubscription: float = 1.0
    # In-switch reduction (NVLink SHARP on NVSwitch gen 3): the share of the link bandwidth an
    # all-reduce reduced inside the switch sustains; 0 = the switch only forwards.
    switch_reduction: float = 0.0
    # Ceiling on one GPU's bus bandwidth under NCCL's LL protocol, whose 8-byte flag-and-data
    # stores the GPU issues at a bounded rate whatever the link (NCCL's llMaxBw); 0 = none.
    ll_bandwidth_bps: float = 0.0
    # NCCL's pipeline fill on this dimension, in per-rank chunks: a ring pass (all-gather,
    # reduce-scatter, ring all-reduce) takes as long as `ring_fill_chunks` more chunk transfers
    # than its n-1 (2(n-1)) steps, an all-to-all `all_to_all_fill_chunks` more than its n-1
    # peers' chunks. Few ranks feel it most (2 ranks: 1 step). Fitted on NCCL's tables by
    # scripts/fit_nccl.py; 0 = none.
    ring_fill_chunks: float = 0.0
    all_to_all_fill_chunks: float = 0.0
    # The further fill of a ring that sums 1-byte elements (int8): NCCL's byte-wise sums run
    # slower than its 16-bit ones, so its first chunks' reductions stay exposed longer. Fitted on
    # NCCL's int8 tables by scripts/fit_nccl.py; 0 = none.
    byte_reduce_fill_chunks: float = 0.0


@dataclass(frozen=True)
class LinkFault:
    """A degraded (0 < factor < 1) or failed (factor 0) link between two network nodes
    (NPUs 0..N-1, then the switches); simulated by the astra backends only."""
    src: int
    dst: int
    factor: float
    extra_latency_s: float = 0.0


# The inference engines whose own kernels a preset may describe (calibration.engine_attention,
# engine_allreduce): the measured kernel tables' frameworks, each with its own prefill and decode
# kernels per GPU family (TensorRT-LLM: its FMHA and XQA; vLLM: FlashAttention-3 on Hopper,
# FlashInfer's TensorRT-LLM kernels on Blackwell, FlashAttention-2 before) and all-reduce.
KERNEL_ENGINES = ("trtllm", "vllm")


@dataclass(frozen=True)
class MlaDecode:
    """An engine's MLA decode kernel (TensorRT-LLM's, weights absorbed: every query head over
    the latent cache), fitted on its measured MLA generation table (scripts/fit_mla_decode.py):
    `floor_s` for the op, `sequence_s` per (sequence, 64-head tile) spread over the SMs (its
    query load, split-KV merge and write-out), and the larger of the latent cache's sweep at
    `bandwidth_share` of HBM and the absorbed matmuls at `tensor_share` of the BF16 peak (over
    an FP8 cache, where the GPU has FP8 kernels: the sweep at `fp8_bandwidth_share`, the
    matmuls at `fp8_tensor_share` of the FP8 peak; the tables sweep an FP8 cache at a larger
    share of HBM than a BF16 one on Blackwell, a smaller one on H200)."""
    floor_s: float
    sequence_s: float
    bandwidth_share: float
    tensor_share: float
    fp8_tensor_share: float
    fp8_bandwidth_share: float


@dataclass(frozen=True)
class MlaPrefill:
    """An engine's MLA context kernel (TensorRT-LLM's: every head's decompressed 192-wide keys and
    128-wide values), fitted on its measured MLA context table (scripts/fit_mla_prefill.py): its
    share of the BF16 peak (`tensor_share`) and of the FP8 peak over an FP8 cache
    (`fp8_tensor_share`) and its cost per 128-row query tile (`tile_s`), in place of the engine's
    GQA prefill kernel's; its floor and loads are that kernel's."""
    tensor_share: float
    fp8_tensor_share: float
    tile_s: float


@dataclass(frozen=True)
class EngineAttention:
    """One inference engine's attention kernels on a GPU, fitted on its measured kernel table
    (scripts/fit_engine_attention.py). Each is timed as the engine runs the op: its own kernels
    (QKV preprocessing, KV-cache write, attention), replayed without host launches.
    Prefill: FlashAttention-style work (core.model.ops.attention) at `prefill_tensor_share` of
    the dtype's peak (absolute, not relative to the GEMMs' efficiency; with an FP8 cache the
    engines' FP8 kernels, `prefill_fp8_tensor_share` of the FP8 peak), its compulsory loads
    added, `prefill_tile_s` per 128-row query tile, `prefill_floor_s` for the op, and its
    preprocessing: RoPE over the new queries at the elementwise rate, the new keys and values
    read and written into the paged cache at `prefill_cache_share` of HBM bandwidth.
    Decode: `decode_floor_s` for the op, `decode_pair_s` per (sequence, KV head) pair spread
    over the SMs (loading its queries, merging split-KV partials, writing out; `decode_group_pair_s`
    in its place where the block serves a group of query heads over a BF16 cache, the grouped
    kernel: TensorRT-LLM's on Hopper costs 3.5 times its one-head kernel; None: the same;
    `decode_fp8_group_floor_s` in place of `decode_floor_s` where it serves a group over an FP8
    cache: TensorRT-LLM's Hopper XQA kernel for FP8 caches, warpgroup MMAs over the group padded
    to 8 query heads, starts sooner than its one-head path; None: the same), and the cache
    swept at `decode_bandwidth_share` of HBM (`decode_fp8_bandwidth_share` for an FP8 cache)
    times n / (1 + n), n the split-KV chunks in flight per `decode_saturation` per SM: each
    pair's cache split in chunks of `decode_split_tokens`, at most `decode_max_splits`; plus
    `decode_score_s` per query-head score per SM (softmax, the exponential). A kernel that widens
    an FP8 cache to BF16 on its SMs sweeps it no faster than `decode_fp8_widen_s` per cached
    element per SM (0: HBM alone bounds it; at the sweep's occupancy), except the grouped kernel
    of an engine whose `decode_fp8_group_native` says it runs its MMAs in FP8 (TensorRT-LLM's
    Hopper XQA). Groups of more
    than `decode_max_group` query heads per KV head (0: no limit) run a kernel that reads the
    cache once per query head, through L2. `mla_decode`: its MLA decode kernel where fitted
    (None: the generic absorbed-MLA model, core.model.ops.mla); `mla_prefill`: its MLA context
    kernel's shares where fitted (None: the GQA prefill kernel's). `prefill_fp8_query_cast`: with
    an FP8 cache the engine casts the new queries to FP8 in a kernel of its own before its FP8
    prefill kernel (vLLM's FlashAttention-3 and FlashInfer paths; TensorRT-LLM's preprocessing
    kernel writes them in FP8 itself). `prefill_softmax_exposed`: the share of the shorter of
    its prefill's tensor-core and softmax times (the exponential and the FP32 score work) that
    the other does not hide, on GPUs whose kernels overlap the two (0: fully hidden)."""
    prefill_tensor_share: float
    prefill_fp8_tensor_share: float
    prefill_cache_share: float
    prefill_tile_s: float
    prefill_floor_s: float
    decode_floor_s: float
    decode_pair_s: float
    decode_bandwidth_share: float
    decode_fp8_bandwidth_share: float
    decode_split_tokens: float
    decode_max_splits: float
    decode_saturation: float
    decode_score_s: float
    decode_max_group: int = 0
    decode_group_pair_s: float | None = None
    decode_fp8_group_floor_s: float | None = None
    decode_fp8_widen_s: float = 0.0
    decode_fp8_group_native: bool = False
    mla_decode: MlaDecode | None = None
    mla_prefill: MlaPrefill | None = None
    prefill_fp8_query_cast: bool = False
    prefill_softmax_exposed: float = 0.0


@dataclass(frozen=True)
class EngineAllReduce:
    """An inference engine's own all-reduce inside one NVLink domain (TensorRT-LLM's and vLLM's
    custom kernels, replayed from CUDA graphs), fitted on its measured table
    (scripts/fit_engine_allreduce.py). One-shot: every GPU reads its peers' whole buffers,
    `floor_s` plus `per_peer_s` a peer to start, then (gpus - 1) x the message at `bandwidth_bps`;
    two-shot: a reduce-scatter and an all-gather, twice the start and 2 (gpus - 1) / gpus of the
    message at that rate. The engine takes the faster, or NCCL's ring where that is faster still
    or the group has more than `max_gpus` GPUs (vLLM's and SGLang's kernels run on up to 8; the
    largest group its table measures otherwise) (core.model.collectives.engine_all_reduce_s)."""
    floor_s: float
    per_peer_s: float
    bandwidth_bps: float
    max_gpus: int = 8


@dataclass(frozen=True)
class Calibration:
    """The few factors fitted per GPU preset; see the preset file for what and on which rows."""
    # Share of the boost clock a GPU holds through a whole training step or serving run (power
    # and thermal limits); it scales every kernel's compute-bound time. Kernels timed alone, as
    # the measured kernel tables are, run at 1.
    sustained_clock: float = 1.0
    # GEMMs' share of the BF16 tensor-core peak, and FP8 (per-tensor and MXFP8) and NVFP4
    # GEMMs' shares of their peaks relative to it, as measured kernels reach them alone
    # (scripts/fit_gemm.py on the kernel tables).
    compute_efficiency: float = 1.0
    fp8_efficiency: float = 1.0
    nvfp4_efficiency: float = 1.0
    # Block-scaled FP8 GEMMs' share relative to per-tensor FP8's: Hopper's MMA has no block
    # scales, so the kernel rescales its partial sums every 128 of k on the CUDA cores
    # (Blackwell's MMA takes the scales: 1).
    fp8_block_efficiency: float = 1.0
    # What the GEMMs and attention matmuls of a whole step keep of the kernels' measured rate, in
    # every dtype: the clock a power-limited GPU holds over a step and the framework's gaps
    # between kernels, fitted on end-to-end training rows (scripts/calibrate.py). Kernels timed
    # alone, as the measured tables are, run at 1.
    step_efficiency: float = 1.0
    # Low-precision (FP8, MXFP8, NVFP4) GEMMs' step share relative to that: what an FP8 step
    # loses beyond its kernels' rates (see the H100 preset).
    fp8_step_efficiency: float = 1.0
    attention_efficiency: float = 1.0  # fused attention's tensor-core share, relative to compute_efficiency
    memory_efficiency: float = 1.0  # elementwise and normalization kernels' share of the HBM peak
    # Long read streams' share of the HBM peak: a GEMM's weight matrix and the decode
    # attention's sweep of the KV cache, read in wide vector loads with many bytes in flight and
    # hardly a write between them, reach more of the peak than read-modify-write elementwise kernels.
    stream_efficiency: float = 1.0
    # A GEMM's output stores' share of the HBM peak: the epilogue moves each output tile from
    # registers through shared memory to HBM after the tile's last MMA, and GEMMs whose time is
    # that writing (short k over many tiles) reach less of the peak than any read stream.
    store_efficiency: float = 1.0
    network_efficiency: float = 1.0
    kernel_overhead_s: float = 0.0  # host / framework time per kernel beyond the launch itself
    collective_step_s: float = 0.0  # synchronisation cost per step of a collective algorithm
    # Spread of the ranks' arrival at a blocking collective whose group spans several nodes:
    # the collective waits for the latest of them, sync_skew_s x sqrt(2 ln n) for n nodes (the
    # expected maximum of n normally spread arrivals); fitted on whole training steps, where
    # FP8 delayed scaling's amax all-reduces are such collectives (training.amax_sync).
    sync_skew_s: float = 0.0
    # KV-cache elements the decode attention kernel gets through per SM per clock cycle, each
    # query head reading its KV head's cache (0 = bound by memory bandwidth alone)
    decode_attention_rate: float = 0.0
    # Fused attention beyond its matmuls (scripts/fit_attention.py): whether the kernels overlap
    # the softmax with the matmuls (FlashAttention-3 style, on GPUs with warpgroup MMA), whether
    # the backward's memory-bound passes are costed, a kernel's fixed time beyond the launch,
    # each 128-row query tile's own cost in the forward (loading Q, the epilogue's rescale and
    # store), the backward's tensor-core rate relative to the forward's, and each query tile's
    # cost in the backward.
    attention_softmax_overlap: bool = False
    attention_backward_passes: bool = False
    attention_floor_s: float = 0.0
    attention_tile_s: float = 0.0
    attention_backward_share: float = 1.0
    attention_backward_tile_s: float = 0.0
    # A serving engine's grouped MoE expert GEMMs (core/serving/moe.py, scripts/fit_moe_gemm.py):
    # their share of the dtype's peak with wide experts and the FFN columns per expert slice at
    # which it halves, for the block-scaled kernels (FP8, NVFP4) and, apart, the BF16 ones;
    # efficiency 0 = not fitted (the layer graph's plain GEMMs; per-tensor FP8's always).
    moe_gemm_efficiency: float = 0.0
    moe_half_ffn: float = 0.0
    moe_bf16_gemm_efficiency: float = 0.0
    moe_bf16_half_ffn: float = 0.0
    # Each inference engine's own attention kernels: ((engine, EngineAttention), ...), sorted by
    # engine; an engine not listed runs the fused kernel above (prefill) and decode_attention's
    # bandwidth model.
    engine_attention: tuple = ()
    # Each inference engine's own all-reduce: ((engine, EngineAllReduce), ...), sorted by engine;
    # an engine not listed all-reduces with NCCL's ring.
    engine_allreduce: tuple = ()

    def engine_kernels(self, engine: str):
        """The EngineAttention of `engine`, or None when the preset has none for it."""
        return next((k for name, k in self.engine_attention if name == engine), None)

    def allreduce_of(self, engine: str):
        """The EngineAllReduce of `engine`, or None when the preset has none for it."""
        return next((k for name, k in self.engine_allreduce if name == engine), None)

    def with_engine(self, block: str, engine: str, value) -> "Calibration":
        """This calibration with `engine`'s entry of a per-engine block (engine_attention,
        engine_allreduce) set to `value` (the fit scripts' trial figures)."""
        entries = dict(getattr(self, block))
        entries[engine] = value
        return replace(self, **{block: tuple(sorted(entries.items()))})


@hash_once
@dataclass(frozen=True)
class HardwareSpec:
    name: str
    gpu: GpuSpec
    network: tuple  # of NetworkDim, innermost first
    calibration: Calibration = field(default_factory=Calibration)
    dtype: str = "bf16"
    source: str = ""
    faults: tuple = ()  # of LinkFault
    fp8_recipe: str = ""  # one of RECIPES_BY_DTYPE[dtype] (NO_RECIPE for 16 bits); "" = the dtype's default (DEFAULT_RECIPE)

    @cached_property
    def recipe(self) -> str:
        """How the low-precision GEMMs' inputs are scaled; "" when the GEMMs run in 16 bits or more."""
        return "" if self.fp8_recipe == NO_RECIPE else self.fp8_recipe or DEFAULT_RECIPE.get(self.dtype, "")

    @cached_property
    def act_dtype(self) -> str:
        return activation_dtype(self.dtype)

    @cached_property
    def act_bytes(self) -> int:
        """Bytes per element of activations and of the weights' working copy."""
        return DTYPE_BYTES[self.act_dtype]

    def dims_for(self, gpus: int) -> tuple:
        """Network dimensions sized for `gpus` GPUs: an `auto` (0) size takes the remainder."""
        return _sized_dims(self.network, gpus)


@lru_cache(maxsize=1024)
def _sized_dims(network: tuple, gpus: int) -> tuple:
    sized, covered = [], 1
    for dim in network:
        size = dim.size
        if size == 0:
            size = max(1, -(-gpus // covered))
        sized.append(dim if size == dim.size else replace(dim, size=size))
        covered *= size
    return tuple(sized)


@lru_cache(maxsize=1024)
def memory_view(hw: HardwareSpec) -> HardwareSpec:
    """`hw` as the memory model and the layout rules read it: names, dtypes, capacities, network
    sizes and power figures kept, every rate (FLOP/s, bandwidths, clock, latencies, overheads,
    calibration) set to one value, so that hardware variants apart only in rates (a bandwidth or
    FLOP/s what-if) share one memoized memory estimate and layout verdict instead of each
    computing it again (tests/test_memory_view.py holds them to the real hardware's)."""
    gpu = hw.gpu
    gpu = replace(gpu, peak_flops=tuple((dtype, 1.0) for dtype, _ in gpu.peak_flops), clock_hz=1.0,
                  sram=replace(gpu.sram, bandwidth_bps=1.0), l2=replace(gpu.l2, bandwidth_bps=1.0),
                  hbm=replace(gpu.hbm, bandwidth_bps=1.0), launch_overhead_s=0.0, graph_launch_overhead_s=0.0,
                  mma_sync_share=1.0, exp_per_sm_per_clock=1.0)
    network = tuple(replace(dim, link_bandwidth_bps=1.0, latency_s=0.0, efficiency=1.0, oversubscription=1.0,
                            switch_reduction=0.0, ll_bandwidth_bps=0.0, ring_fill_chunks=0.0,
                            all_to_all_fill_chunks=0.0, byte_reduce_fill_chunks=0.0) for dim in hw.network)
    return _one_object(replace(hw, gpu=gpu, network=network, calibration=Calibration()))


@lru_cache(maxsize=1024)
def _one_object(spec):
    """The first of equal specs met: memo keys then match by identity, not field by field."""
    return spec


@hash_once
@dataclass(frozen=True)
class Parallelism:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    # sequence parallelism; None: Megatron-Core's and NeMo's recipes, on whenever tp > 1 in
    # training (training_sp), off in inference (engines keep the whole sequence on each TP rank)
    sp: bool | None = None
    zero: int = 1  # 1: Megatron-Core's distributed optimizer (ZeRO-1 over dp*cp), the recipes' default
    micro_batch: int = 1
    recompute: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = 1
    placement: tuple = ("tp", "cp", "dp", "pp")
    etp: int = 0  # expert tensor parallelism; 0 = tp (Megatron-Core's default)
    first_stage_layers: int = 0  # 0 = Megatron's split; else the first pipeline stage's layer count
    last_stage_layers: int = 0
    # Data-parallel traffic as Megatron-Core runs it: gradients reduced bucket by bucket during
    # the last micro-batch's backward, parameters gathered during the next forward. On by
    # default, as in NeMo's and Megatron-Core's performance recipes; overlap_param_gather None:
    # on whenever there are parameter shards to gather (zero >= 1; under ZeRO-3 / FSDP, the
    # prefetch of each layer's parameters while the layer before runs).
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool | None = None
    grad_dtype: str = "fp32"  # main-gradient buffers and their reduction (fp32, or bf16)
    # Weight gradients added into the main gradients inside the weight-gradient GEMM (Megatron's
    # --gradient-accumulation-fusion, on by default); off, a kernel of its own adds them (PyTorch
    # DDP / FSDP under autocast).
    grad_accumulation_fusion: bool = True
    # A fused cross-entropy kernel (apex's xentropy, flash_attn's CrossEntropyLoss with in-place
    # backward, Megatron-Core's cross_entropy_loss_fusion) reads the 16-bit logits and writes their
    # gradient over them; unfused, autocast's cross-entropy holds FP32 logits and their gradient.
    fused_cross_entropy: bool = False
    # Transformer Engine's userbuffers overlap of the sequence-parallel all-gathers and
    # reduce-scatters with the GEMMs next to them (NeMo's tp_comm_overlap); needs sp.
    overlap_tp_comm: bool = False
    # Megatron-Core's overlap_p2p_comm: under the interleaved schedule, a chunk's activation
    # (or gradient) send runs while the next chunk computes (NeMo turns it on when vp > 1).
    overlap_p2p_comm: bool = False
    fp8_params: bool = False  # weights kept in FP8 (no BF16 working copy)
    master_weights: str = "fp32"  # one of MASTER_WEIGHTS, sharded like the optimizer state
    optimizer_dtype: str = "fp32"  # Adam moments' dtype (apex's `dtype`, TE's precision-aware optimizer)
    # ZeRO-3 / FSDP: free each layer's gathered parameters after its forward (True, FSDP's
    # default) or keep them gathered until the step ends (False, torchtitan's choice under
    # pipeline parallelism): a stage's full weights held, gathered once per step instead of
    # once per micro-batch forward and again for its backward.
    reshard_after_forward: bool = True
    # PyTorch's caching allocator growing its segments in place (PYTORCH_CUDA_ALLOC_CONF=
    # expandable_segments:True, in NeMo's and Megatron-Bridge's launch templates); off, PyTorch's
    # default fixed-size segments, which fragment (memory.FIXED_SEGMENT_FRAGMENTATION).
    expandable_segments: bool = True

    def __post_init__(self):
        if self.overlap_param_gather is None:
            object.__setattr__(self, "overlap_param_gather", gathers_parameters(self.zero))

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def training_sp(self) -> bool:
        """Sequence parallelism in training: as set, else on whenever tp > 1."""
        return self.tp > 1 if self.sp is None else self.sp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp


@hash_once
@dataclass(frozen=True)
class TrainWorkload:
    global_batch: int
    seq: int
    mode: str = "train"
    # Tokens per document when short documents are packed into each sequence (THD format,
    # attention within a document only); 0: one document per sequence.
    document: int = 0
    tokens_total: float = 0.0  # a whole run's training tokens (run_days, run_mwh); 0: not asked


@hash_once
@dataclass(frozen=True)
class InferWorkload:
    batch: int
    prompt: int
    decode: int  # output tokens per sequence; the prefill emits the first, a decode step each further one
    kv_dtype: str = ""  # KV-cache element type; empty = the activation dtype
    mode: str = "infer"  # replicas are the layout's dp: independent copies serving requests

    def kv_bytes(self, hw: HardwareSpec) -> float:
        return kv_element_bytes(self.kv_dtype) if self.kv_dtype else hw.act_bytes


@hash_once
@dataclass(frozen=True)
class ServeWorkload:
    """A serving engine under a stream of requests (core.serving): `isl` prompt and `osl` output
    tokens each, kept `concurrency` in flight (closed loop) or arriving at `request_rate` per
    second (open loop, Poisson), `requests` of them simulated. The layout's dp counts engines
    sharing the load; `max_num_tokens` and `max_batch` are the engine's per-iteration token
    budget and request cap (0: its default)."""
    isl: int
    osl: int
    concurrency: int = 0
    request_rate: float = 0.0
    requests: int = 1000
    engine: str = "trtllm"
    max_num_tokens: int = 0
    max_batch: int = 0
    kv_dtype: str = ""  # KV-cache element type; empty = the activation dtype
    # prompt and output lengths drawn within +- this share of isl and osl: the benchmark clients
    # the engines' overheads were fitted with drew theirs so (core/validation/serving.py), and
    # fixed lengths lock a closed loop into waves that queue their prefills
    length_spread: float = 0.1
    # the layout beyond the Parallelism (core.serving.point.serve_layout_reason has the rules):
    # attention-DP ranks per aggregated engine, or, `disagg`, a prefill pool and a decode pool of
    # `workers` engines of `tp` GPUs each (their `batch` 0: the engine's request cap)
    attention_dp: int = 1
    disagg: bool = False
    prefill_workers: int = 1
    prefill_tp: int = 1
    prefill_ep: int = 1
    prefill_attention_dp: int = 1
    prefill_batch: int = 0
    decode_workers: int = 1
    decode_tp: int = 1
    decode_ep: int = 1
    decode_attention_dp: int = 1
    decode_batch: int = 0
    mode: str = "serve"

    def settled(self) -> "ServeWorkload":
        """This workload as simulated: an aggregated one's pool fields at their defaults, so that
        no pool value a study sweeps for its disaggregated points enters an aggregated point."""
        if self.disagg:
            return self
        return replace(self, **_POOL_DEFAULTS)


# What a disaggregated pool is given, per pool: `prefill_<field>`, `decode_<field>`
SERVE_POOLS = ("prefill", "decode")
POOL_FIELDS = ("workers", "tp", "ep", "attention_dp", "batch")
POOL_KNOBS = tuple(f"{pool}_{name}" for pool in SERVE_POOLS for name in POOL_FIELDS)
# ServeWorkload fields a study may sweep as knobs: the load and engine, which no layout rule reads,
# and the serving layout's own (attention-DP, disaggregated pools, the KV cache's dtype), which
# decide with the Parallelism whether a point can run
SERVE_LOAD_KNOBS = ("concurrency", "request_rate", "isl", "osl", "requests", "engine", "max_num_tokens",
                    "max_batch", "length_spread")
SERVE_LAYOUT_KNOBS = ("attention_dp", "kv_dtype", "disagg", *POOL_KNOBS)
SERVE_KNOBS = SERVE_LOAD_KNOBS + SERVE_LAYOUT_KNOBS
_POOL_DEFAULTS = {knob: ServeWorkload.__dataclass_fields__[knob].default for knob in POOL_KNOBS}
