"""The published measurements in `data/published/`, read into typed cases.

Each CSV row becomes one `PublishedCase`: what was run (model shape, layout, workload,
precision, hardware preset) and what was measured, in SI units. Cells are parsed as they
are written; where a cell is ambiguous, the reading taken is decided once, here, with a
comment saying which and why, and repeated per row in `note`. Rows we cannot model stay
in with `usable=False` and the reason. Nothing here predicts anything."""
import csv
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.errors import SpecError
from core.model.loader import load_model
from core.model.memory import GiB

PUBLISHED_DIR = Path(__file__).parent / "data" / "published"
SUITE_FILES = {
    "h100_dense": "training_h100_dense.csv",
    "moe": "training_moe.csv",
    "trtllm": "inference_trtllm.csv",
    "collectives": "collectives_nccl.csv",
    "memory_h100": "memory_h100.csv",
}
SUITES = tuple(SUITE_FILES)
H100 = "h100-sxm5-80gb"
A100 = "a100-sxm4-80gb"
H200 = "h200-sxm-141gb"
H100_BF16_PEAK_FLOPS = 989.5e12  # the denominator the MoE paper states for its MFU figures


@dataclass(frozen=True)
class PublishedCase:
    """One published row: what ran, what was measured, and how we read it."""
    case_id: str
    suite: str  # one of SUITES
    source: str  # cross-validation group: one publication or release
    hardware: str  # a preset in core/model/presets/gpus, "" where none fits
    gpus: int
    model: dict  # ModelSpec keyword arguments plus "moe" (None or a dict); {} for collectives
    layout: dict  # dp, tp, pp, cp, ep, etp, virtual_stages, sp, zero, distributed_optimizer,
    #               micro_batch, recompute, overlap_grad_reduce, overlap_param_gather,
    #               first_stage_layers, last_stage_layers, master_weights, optimizer_dtype,
    #               expandable_segments, overlap_p2p_comm; {} for collectives
    workload: dict  # mode train / infer / collective and its sizes
    precision: dict  # compute, fp8_params, fp8_recipe, kv_cache
    metric: str  # what `measured` is, named with its unit
    measured: float | str  # SI units; "oom" / "fits" for memory verdicts
    usable: bool  # False for rows that are not a case we model; `excluded` says why
    note: str  # the row's own uncertainty and the readings taken here
    extra: dict  # other published numbers on the row, kept for reporting
    citation: str  # the row's source and locator cells, verbatim
    excluded: str = ""  # why an unusable row is left out of its suite


def published_cases(suite: str | None = None) -> tuple:
    """Every row of one suite's file (or of all of them) as PublishedCase, in file order."""
    if suite is None:
        return tuple(case for name in SUITES for case in _suite_cases(name))
    if suite not in SUITE_FILES:
        raise SpecError("corpus", "suite", suite, f"one of {', '.join(SUITES)}")
    return _suite_cases(suite)


def _suite_cases(suite: str) -> tuple:
    parse = {"h100_dense": _dense_case, "moe": _moe_case, "trtllm": _trtllm_case,
             "collectives": _collective_case, "memory_h100": _memory_case}[suite]
    return tuple(parse(_Row(row, SUITE_FILES[suite])) for row in _read(SUITE_FILES[suite]))


def _read(name: str) -> list:
    with open(PUBLISHED_DIR / name, newline="") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------------------------------
# Cells

_LEADING_NUMBER = re.compile(r"^\s*~?\s*(\d[\d,]*(?:\.\d+)?)")


class _Row:
    """One CSV row with typed accessors; a cell that cannot be read raises one SpecError line."""

    def __init__(self, cells: dict, file: str):
        self.cells = cells
        self.file = file
        self.case_id = cells["case_id"]

    def text(self, column: str) -> str:
        return (self.cells.get(column) or "").strip()

    def number(self, column: str) -> float | None:
        """The number a cell starts with ("4096 (derived: ...)" -> 4096, "~59" -> 59); None if blank."""
        match = _LEADING_NUMBER.match(self.text(column))
        return float(match.group(1).replace(",", "")) if match else None

    def integer(self, column: str, default: int | None = None) -> int | None:
        value = self.number(column)
        if value is None:
            return default
        if value != int(value):
            self.fail(column, "a whole number")
        return int(value)

    def require(self, column: str) -> int:
        value = self.integer(column)
        if value is None:
            self.fail(column, "a number")
        return value

    def fail(self, column: str, allowed: str):
        raise SpecError(f"{self.file} row {self.case_id}", column, self.text(column), allowed)

    def citation(self) -> str:
        return f"{self.text('source')}; {self.text('locator')}"


def _percent(text: str) -> float | None:
    match = re.search(r"(\d+(?:\.\d+)?)\s*%", text)
    return float(match.group(1)) / 100.0 if match else None


def _first_number(text: str) -> float:
    """The first number anywhere in a cell ("avg 84.8, peak ~96" -> 84.8, ">=2" -> 2)."""
    return float(re.search(r"\d+(?:\.\d+)?", text).group())


def _other_metrics(text: str) -> dict:
    """Numbers named in an other_metrics cell, in SI units; the cell itself is kept too."""
    out = {"other_metrics": text} if text else {}
    patterns = (("model_flops_per_s_per_gpu", r"TFLOP/s/GPU\s+(\d+(?:\.\d+)?)", 1e12),
                ("model_flops_per_s_per_gpu", r"implied\s+(\d+(?:\.\d+)?)\s+TFLOP/s/GPU", 1e12),
                ("tokens_per_s_total", r"tokens/s total\s+(\d+(?:\.\d+)?)", 1.0))
    for key, pattern, scale in patterns:
        match = re.search(pattern, text)
        if match:
            out[key] = float(match.group(1)) * scale
    mfu = _percent(text.split("MFU", 1)[1]) if "MFU" in text else None
    if mfu is not None:
        out["mfu"] = mfu
    return out


def _hardware(row: _Row, column: str) -> str:
    """GPU cell -> preset. Every H100 in these files is an SXM5 80 GB part (DGX H100, DGX Cloud
    or Eos nodes). TensorRT-LLM's "A100 (80GB implied)" is read as the SXM4 80 GB part of the
    DGX A100 the project's A100 rows use; the cell says the 40/80 GB variant is not stated."""
    text = row.text(column)
    if "H200" in text:
        return H200
    if "H100" in text:
        return H100
    if "A100" in text and "40GB" not in text:
        return A100
    return ""


# ---------------------------------------------------------------------------------------
# Model shapes the rows name but do not (fully) write out. Cells on a row win; this table
# fills blank cells and what no CSV carries (activation, norm, positions, tied embeddings).
# `vocab` is the tokenizer's size; training rows are padded as Megatron does (see _pad_vocab).

_LLAMA = {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rotary",
          "tied_embeddings": False}
# GPT-3 as NeMo builds it: GELU MLP at 4x hidden, LayerNorm, learned absolute positions,
# embeddings shared with the output layer, GPT-2 BPE tokenizer (50,257 tokens).
_GPT3 = {"activation": "gelu", "norm": "layernorm", "position_embedding": "learned",
         "tied_embeddings": True, "vocab": 50257}
# Nemotron (3 and 4): squared-ReLU MLP (not gated), LayerNorm ("layernorm1p"), rotary
# positions, untied embeddings, 256,000-token SentencePiece.
_NEMOTRON = {"activation": "squared_relu", "norm": "layernorm", "position_embedding": "rotary",
             "tied_embeddings": False, "vocab": 256000}

SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", *_LLAMA)


def _preset_shape(name: str) -> dict:
    """A model preset's shape in this table's fields: the presets already carry the released shapes."""
    spec = load_model(name)
    return {field: getattr(spec, field) for field in SHAPE_FIELDS}


KNOWN_SHAPES = {
    # NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/5b.yaml and 20b.yaml
    "gpt3-5b": {**_GPT3, "layers": 24, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 16384},
    "gpt3-20b": {**_GPT3, "layers": 44, "hidden": 6144, "heads": 48, "kv_heads": 48, "ffn_hidden": 24576},
    # Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, d_ff = 4 d_model)
    "gpt3-175b": {**_GPT3, "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn_hidden": 49152},
    # Llama 2 and Llama 3(.1): the shapes of the model presets (their sources are cited there).
    # Llama 3's vocabulary is 128,256 as in the released config.json: the paper's "128K" counts
    # 128,000 tokens plus 256 reserved special ones, and the frameworks embed all 128,256 rows.
    "llama2-7b": _preset_shape("llama2-7b"),
    "llama2-13b": _preset_shape("llama2-13b"),
    "llama2-70b": _preset_shape("llama2-70b"),
    "llama3-8b": _preset_shape("llama3.1-8b"),
    "llama3-70b": _preset_shape("llama3.1-70b"),
    "llama3-405b": _preset_shape("llama3.1-405b"),
    # NeMo-Framework-Launcher conf/training/nemotron/nemotron_8b.yaml and nemotron_22b.yaml
    # (multi-head attention: num_query_groups null)
    "nemotron3-8b": {**_NEMOTRON, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 16384},
    "nemotron3-22b": {**_NEMOTRON, "layers": 40, "hidden": 6144, "heads": 48, "kv_heads": 48, "ffn_hidden": 24576},
    # Nemotron-4 15B (arXiv 2402.16819) and 340B (arXiv 2406.11704) technical reports
    "nemotron4-15b": {**_NEMOTRON, "layers": 32, "hidden": 6144, "heads": 48, "kv_heads": 8, "ffn_hidden": 24576},
    "nemotron4-340b": {**_NEMOTRON, "layers": 96, "hidden": 18432, "heads": 96, "kv_heads": 8,
                       "ffn_hidden": 73728},
    # Mixtral 8x22B config.json (mistralai): 8 experts, top-2, expert FFN 16384
    "mixtral-8x22b": {**_LLAMA, "layers": 56, "hidden": 6144, "heads": 48, "kv_heads": 8, "ffn_hidden": 16384,
                      "vocab": 32000, "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 16384}},
    # MoE Parallel Folding (arXiv 2504.14960): Mixtral 8x22B with each expert split 8 ways
    "mixtral-8x22b-g8t8": {**_LLAMA, "layers": 56, "hidden": 6144, "heads": 48, "kv_heads": 8,
                           "ffn_hidden": 2048, "vocab": 32000,
                           "moe": {"experts": 64, "top_k": 8, "expert_ffn_hidden": 2048}},
    # Qwen2-57B-A14B config.json: 64 routed experts (top 8, FFN 2560) plus one shared expert (20480)
    "qwen2-57b-a14b": {**_LLAMA, "layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4, "ffn_hidden": 2560,
                       "vocab": 151936, "moe": {"experts": 64, "top_k": 8, "expert_ffn_hidden": 2560,
                                                "shared_experts": 1, "shared_expert_ffn_hidden": 20480}},
    # MoE Parallel Folding: Llama 3 70B upcycled to 8 experts of its own FFN
    "llama3-8x70b": {**_preset_shape("llama3.1-70b"), "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 28672}},
    # EleutherAI gpt-j-6b config.json: GELU MLP (n_inner 16384), LayerNorm, rotary, separate LM head
    "gpt-j-6b": {"layers": 28, "hidden": 4096, "heads": 16, "kv_heads": 16, "ffn_hidden": 16384, "vocab": 50400,
                 "activation": "gelu", "norm": "layernorm", "position_embedding": "rotary",
                 "tied_embeddings": False},
    # tiiuae/falcon-180B config.json: 232 heads, 8 KV heads, FFN 4 x hidden, GELU, LayerNorm,
    # rotary; FalconForCausalLM ties the LM head to the embedding
    "falcon-180b": {"layers": 80, "hidden": 14848, "heads": 232, "kv_heads": 8, "ffn_hidden": 59392,
                    "vocab": 65024, "activation": "gelu", "norm": "layernorm", "position_embedding": "rotary",
                    "tied_embeddings": True},
}

# The row's model cell -> KNOWN_SHAPES key; first match wins (more specific patterns first).
_MODEL_NAMES = (
    (r"8x22b-g8t8", "mixtral-8x22b-g8t8"), (r"mixtral 8x22b", "mixtral-8x22b"),
    (r"qwen2-57b", "qwen2-57b-a14b"), (r"llama ?3-8x70b", "llama3-8x70b"),
    (r"gpt-?3[ -]?5b", "gpt3-5b"), (r"gpt-?3[ -]?20b", "gpt3-20b"), (r"gpt-?3[ -]?175b", "gpt3-175b"),
    (r"llama-?2-?7b|llama 2 7b", "llama2-7b"), (r"llama-?2-?13b|llama 2 13b", "llama2-13b"),
    (r"llama-?2-?70b|llama 2 70b", "llama2-70b"),
    (r"llama ?3(\(\.1\)|\.1)?[ -]?8b", "llama3-8b"), (r"llama ?3(\(\.1\)|\.1)?[ -]?70b", "llama3-70b"),
    (r"llama ?3(\(\.1\)|\.1)?[ -]?405b", "llama3-405b"),
    (r"nemotron-4 15b", "nemotron4-15b"), (r"nemotron(-4)?[ -]340b", "nemotron4-340b"),
    (r"nemotron-8b", "nemotron3-8b"), (r"nemotron-22b", "nemotron3-22b"),
    (r"gpt-j", "gpt-j-6b"), (r"falcon 180b", "falcon-180b"),
)

_ROW_SHAPE_COLUMNS = (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"),
                      ("kv_heads", "kv_heads"), ("ffn_hidden", "ffn"))


def _model_key(row: _Row, column: str = "model") -> str | None:
    name = row.text(column).lower()
    return next((key for pattern, key in _MODEL_NAMES if re.search(pattern, name)), None)


def _tokenizer_vocab(text: str) -> int | None:
    """Tokenizer size from a vocab cell. "128000 (paper Table 3; HF 128256)" and the Llama 3
    tokenizer cells: 128,256, the rows the frameworks' embedding has (see KNOWN_SHAPES).
    "GPT2BPE ..." cells: 50,257 (the GPT-2 BPE tokenizer), also for the dgxc 405B variant,
    whose yaml loads GPT2BPETokenizer: its README's 128256 is only used in a FLOP note.
    "256k SentencePiece": 256,000. Otherwise the number the cell starts with; None if none."""
    if "GPT2BPE" in text:
        return 50257
    if "128256" in text.replace(",", ""):
        return 128256
    if text.startswith("256k"):
        return 256000
    match = _LEADING_NUMBER.match(text)
    return int(match.group(1).replace(",", "")) if match else None


def _pad_vocab(tokens: int, tp: int) -> int:
    """Megatron (and NeMo, Megatron-Bridge) pad the embedding to a multiple of
    make_vocab_size_divisible_by (128 in every recipe these rows come from) times tp."""
    multiple = 128 * tp
    return math.ceil(tokens / multiple) * multiple


def _model(row: _Row, key: str, *, seq: int, pad_tp: int | None, notes: list, moe: dict | None = None) -> dict:
    """ModelSpec keyword arguments: the row's shape cells over the known shape of `key`."""
    shape = dict(KNOWN_SHAPES[key])
    filled = []
    for field_, column in _ROW_SHAPE_COLUMNS:
        value = row.integer(column) if column in row.cells else None
        if value is None:
            filled.append(field_)
        else:
            shape[field_] = value
    tokens = _tokenizer_vocab(row.text("vocab")) if "vocab" in row.cells else None
    if tokens is None:
        filled.append("vocab")
    else:
        shape["vocab"] = tokens
    if filled:
        notes.append(f"{', '.join(filled)} not on the row: taken from the published {key} shape")
    if pad_tp is not None and _pad_vocab(shape["vocab"], pad_tp) != shape["vocab"]:
        padded = _pad_vocab(shape["vocab"], pad_tp)
        notes.append(f"vocab {shape['vocab']} padded to {padded} (multiple of 128 x tp, as Megatron does)")
        shape["vocab"] = padded
    moe = moe if moe is not None else shape.get("moe")
    if moe is not None:
        moe = {"shared_experts": 0, "shared_expert_ffn_hidden": 0, "capacity_factor": None, **moe}
    return {"name": key, **{k: v for k, v in shape.items() if k != "moe"}, "max_position": seq, "moe": moe}


def _layout(*, dp: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, etp: int | None = None,
            virtual_stages: int = 1, sp: bool | None = None, zero: int = 0, distributed_optimizer: bool = False,
            micro_batch: int = 1, recompute: str = "none", overlap_grad_reduce: bool = False,
            overlap_param_gather: bool = False, first_stage_layers: int | None = None,
            last_stage_layers: int | None = None, master_weights: str = "fp32",
            optimizer_dtype: str = "fp32", expandable_segments: bool = True,
            overlap_p2p_comm: bool | None = None) -> dict:
    """A layout dict with the contract's keys. etp defaults to tp (Megatron-Core's default);
    sp defaults to on when tp > 1 and is always off at tp 1, where it does nothing;
    expandable_segments (PyTorch's allocator setting) defaults to on, as the launch templates of
    NeMo and Megatron-Bridge set it, unless a row says it ran without; overlap_p2p_comm None:
    the framework's default (on under virtual stages), False where the row's recipe turns it off."""
    return {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": tp if etp is None else etp,
            "virtual_stages": virtual_stages, "sp": (tp > 1 if sp is None else sp) and tp > 1,
            "zero": zero, "distributed_optimizer": distributed_optimizer, "micro_batch": micro_batch,
            "recompute": recompute, "overlap_grad_reduce": overlap_grad_reduce,
            "overlap_param_gather": overlap_param_gather, "first_stage_layers": first_stage_layers,
            "last_stage_layers": last_stage_layers, "master_weights": master_weights,
            "optimizer_dtype": optimizer_dtype, "expandable_segments": expandable_segments,
            "overlap_p2p_comm": overlap_p2p_comm}


# Megatron's distributed optimizer (fp32 main weights and Adam state sharded over dp, ZeRO-1)
# with gradient reduce-scatter and parameter all-gather overlapped with compute: what the
# NeMo launcher recipes (distributed_fused_adam, overlap_grad_sync/overlap_param_sync true),
# the dgxc yamls and the Megatron-Bridge performance recipes run. Rows that do not state it
# are read this way too and say so.
_MEGATRON_OPTIMIZER = {"zero": 1, "distributed_optimizer": True, "overlap_grad_reduce": True,
                       "overlap_param_gather": True}
# FSDP (ZeRO-3: parameters, gradients and optimizer state sharded), prefetching parameters
# and reducing gradients while computing.
_FSDP = {"zero": 3, "distributed_optimizer": False, "overlap_grad_reduce": True, "overlap_param_gather": True}


# NeMo 1.x (the 24.03 and 24.07 containers) ran NeMo-Framework-Launcher recipes, whose optimizer
# is apex's DistributedFusedAdam (optim.name distributed_fused_adam in the launcher's 2024
# training and SFT yamls), sharded over dp x cp like Megatron's distributed optimizer but with
# its own state: Adam moments in the recipe's optim.dtype (default fp32), which
# conf/training/nemotron/nemotron_340b.yaml (@7c842fcd, June 2024) and conf/peft/llama/sft.yaml
# (@6a76374e, July 2024) set to bf16.
_NEMO1_SOURCES = ("nemo-24.07", "nemo-long-sequence")
_NEMO1_BF16_OPTIMIZER = ("nemotron4-340b",)


def _nemo1_optimizer(key: str, sft: bool, fp8_params: bool, notes: list) -> dict:
    """Master weights and moment dtype as NeMo 1.x's MegatronBaseModel.setup_optimization
    configures apex's optimizer (NeMo @f2e3232003, the 24.07 code): with FP8 weights it stores
    master weights in the optimizer dtype (store_params); with that dtype equal to the BF16
    model's, none (the BF16 weights are updated in place); with FP32 state over BF16 weights,
    the 16 low bits of each FP32 weight (store_param_remainders)."""
    dtype = "bf16" if sft or key in _NEMO1_BF16_OPTIMIZER else "fp32"
    master = dtype if fp8_params else "none" if dtype == "bf16" else "remainders"
    notes.append(f"NeMo 1.x recipe optimizer: apex distributed Adam, {dtype} moments, master weights {master}")
    return {"master_weights": master, "optimizer_dtype": dtype}


def _derived_dp(row: _Row, gpus: int, tp: int, pp: int, cp: int, notes: list) -> int:
    """dp = gpus / (tp * pp * cp), checked against the row's dp cell where it has one."""
    if gpus % (tp * pp * cp):
        row.fail("num_gpus", f"a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    stated = row.integer("dp") if "dp" in row.cells else None
    if stated is None:
        notes.append(f"dp not on the row: derived as gpus/(tp*pp*cp) = {dp}")
    elif stated != dp:
        notes.append(f"dp cell {stated} differs from gpus/(tp*pp*cp) = {dp}: derived value taken")
    return dp


def _check_accumulation(row: _Row, dp: int, micro_batch: int, global_batch: int, notes: list):
    """global_batch = dp * micro_batch * grad_accum; a row that contradicts itself is an error."""
    if global_batch % (dp * micro_batch):
        row.fail("gbs", f"a multiple of dp*mbs = {dp * micro_batch}")
    stated = row.integer("grad_accum") if "grad_accum" in row.cells else None
    if stated is not None and stated != global_batch // (dp * micro_batch):
        row.fail("grad_accum", f"gbs/(dp*mbs) = {global_batch // (dp * micro_batch)}")


def _precision(text: str, notes: list) -> dict:
    """Training dtype cell. Any FP8 row runs Transformer Engine's FP8 GEMMs with attention, norms
    and optimizer in BF16/FP32. Recipe: "CS" / "current scaling" -> per-tensor current scaling;
    "hybrid", "delayed" or plain "FP8" -> delayed scaling, Transformer Engine's default recipe
    (E4M3 forward, E5M2 gradients) in every framework version these rows name. FP8 weights
    ("fp8 params") only where the row says so."""
    if "FP8" not in text.upper():
        return {"compute": "fp16" if "FP16" in text.upper() else "bf16", "fp8_params": False,
                "fp8_recipe": None, "kv_cache": None}
    current = "CS" in text or "current" in text.lower()
    if not current and "hybrid" not in text and "delayed" not in text:
        notes.append("FP8 recipe not stated: delayed scaling (Transformer Engine default) taken")
    return {"compute": "fp8", "fp8_params": "fp8 params" in text, "fp8_recipe": "current" if current else "delayed",
            "kv_cache": None}


def _note(row: _Row, notes: list) -> str:
    published = row.text("uncertainty")
    parts = ([f"published: {published}"] if published else []) + ([f"read: {'; '.join(notes)}"] if notes else [])
    return " | ".join(parts)


# ---------------------------------------------------------------------------------------
# h100_dense: training_h100_dense.csv

_DENSE_SOURCES = (("performance_summary.md", "nemo-24.07"), ("performance_long_sequence", "nemo-long-sequence"),
                  ("release v24.11.1", "dgxc-24.11"), ("release v25.05.01", "dgxc-25.05"),
                  ("Megatron-Bridge", "megatron-bridge"))

# Recompute where a row says "not stated" or leaves it blank: Megatron's default (none), which
# is also what the NeMo launcher's gpt3/5b, nemotron_8b/22b and Llama yamls set, except:
_RECOMPUTE_WHEN_NOT_STATED = {
    "gpt3-20b": "selective",  # NeMo launcher gpt3/20b.yaml: activations_checkpoint_granularity selective
    "nemotron4-340b": "selective",  # dgxc v24.11.1 nemotron4-340b yaml, same tp8 pp8 vp12 mbs1 layout
}


# Pipeline sends not overlapped with compute where a row's own recipe says so: the DGX Cloud
# v24.11.1 Nemotron-4 340B yaml (nemotron/nemotron4-340b-synth.yaml @35a9aecc, the recipe its
# rows cite) sets overlap_p2p_comm False and batch_p2p_comm True under its 12 virtual stages,
# as NeMo-Framework-Launcher's conf/training/nemotron/nemotron_340b.yaml does; the other
# dgxc v24.11.1 yamls with virtual stages (gpt3_175b_hydra.yaml, llama3.1_70b/405b.yaml) keep
# Megatron's overlap on.
_P2P_NOT_OVERLAPPED = {("dgxc-24.11", "nemotron4-340b")}


# NeMo 24.07's 'Finetuning' rows leave VP blank and do not say whether weights are kept in FP8.
# NeMo-Framework-Launcher's H100 SFT examples of that period run the rows' layouts (same GPUs,
# GBS 32, TP and PP, SQuAD packed to 4096; examples/peft/llama/h100/7b_1node.sh, 13b_1node.sh,
# 70b_2node.sh): they interleave 13B over pp 4 in 10 virtual stages and 70B in 20 (p2p overlapped,
# batch_p2p_comm false), set fp8_params=true on all three and, on 70B, ub_tp_comm_overlap=true.
_NEMO2407_SFT_VIRTUAL_STAGES = {"llama2-13b": 10, "llama2-70b": 20}


def _fine_tuning(row: _Row) -> bool:
    """A full-parameter SFT run: said so by the row's model cell or id, or by the table its
    locator names (Megatron-Bridge's 'SFT Performance')."""
    return any("SFT" in row.text(column) for column in ("model", "case_id", "locator"))


def _nemo2407_sft(row: _Row, source: str) -> bool:
    return source == "nemo-24.07" and _fine_tuning(row)


def _source(row: _Row, table: tuple) -> str:
    text = row.text("source")
    for needle, group in table:
        if needle in text:
            return group
    row.fail("source", "a publication this loader knows (see core/corpus.py)")


def _recompute(row: _Row, key: str, notes: list) -> str:
    text = row.text("recompute").lower()
    for policy in ("none", "selective", "full"):
        if text.startswith(policy):
            return policy
    policy = _RECOMPUTE_WHEN_NOT_STATED.get(key, "none")
    notes.append(f"recompute not stated: {policy} taken")
    return policy


def _dense_optimizer(row: _Row, notes: list) -> dict:
    """fsdp_or_zero cell -> zero / distributed optimizer / overlap. "FSDP=0" and the absent 26.06
    column: Megatron-Bridge's distributed optimizer (the 26.06 rows repeat the earlier layouts).
    "FSDP=N" (N > 0) or "FSDP+DP": ZeRO-3 over dp (the FSDP group size, where smaller than dp,
    is kept in extra)."""
    text = row.text("fsdp_or_zero")
    fsdp = re.search(r"FSDP=(\d+)", text)
    if (fsdp and int(fsdp.group(1)) > 0) or "FSDP+DP" in text:
        return dict(_FSDP)
    if "overlap" not in text:
        notes.append("distributed optimizer with overlapped grad reduce / param gather taken "
                     f"(cell: {text or 'blank'})")
    return dict(_MEGATRON_OPTIMIZER)


def _dense_case(row: _Row) -> PublishedCase:
    notes, extra = [], {"framework": row.text("framework"), **_other_metrics(row.text("other_metrics"))}
    key = _model_key(row)
    if key is None:
        row.fail("model", "a model named in core.validation.corpus.KNOWN_SHAPES")
    gpus = row.require("num_gpus")
    tp, pp, cp = row.require("tp"), row.require("pp"), row.require("cp")
    dp = _derived_dp(row, gpus, tp, pp, cp, notes)
    seq = row.require("seq_len")
    if "derived" in row.text("seq_len"):
        notes.append("sequence length derived by the row's compiler from tokens/s x step / GBS")
    source = _source(row, _DENSE_SOURCES)
    if source == "nemo-long-sequence":
        notes.append("long-sequence table: 'K' = 1024 tokens (4K = 4096 ... 1024K = 1048576), as the row reads it")
    micro_batch = row.integer("mbs")
    if micro_batch is None:
        micro_batch = 1
        notes.append("micro batch not stated: 1 taken")
    global_batch = row.require("gbs")
    _check_accumulation(row, dp, micro_batch, global_batch, notes)
    sp_text = row.text("seq_parallel").lower()
    sp = True if sp_text.startswith("true") else False if sp_text.startswith("false") else None
    if sp is None and tp > 1:
        notes.append("sequence parallelism not stated: on (NeMo/Megatron-Core recipes enable it when tp > 1)")
    sft = _nemo2407_sft(row, source)
    vp = row.integer("vp")
    if vp is None:
        vp = _NEMO2407_SFT_VIRTUAL_STAGES.get(key, 1) if sft else 1
        if vp > 1:
            notes.append(f"vp not on the row: {vp} taken (the NeMo launcher's H100 SFT example of this layout)")
    precision = _precision(row.text("dtype"), notes)
    if sft and precision["compute"] == "fp8":
        # NeMo-Framework-Launcher examples/peft/llama/h100/{7b_1node,13b_1node,70b_2node}.sh, the
        # table's SFT layouts (GBS 32, MBS 1, packed 4096), run FP8 with ++peft.model.fp8_params=true.
        precision["fp8_params"] = True
        notes.append("FP8 weights (fp8_params) taken from the launcher's H100 SFT examples")
    optimizer = _dense_optimizer(row, notes)
    if source in _NEMO1_SOURCES:
        optimizer.update(_nemo1_optimizer(key, sft, precision["fp8_params"], notes))
    fsdp = re.search(r"FSDP=(\d+)", row.text("fsdp_or_zero"))
    if optimizer["zero"] == 3 and fsdp and int(fsdp.group(1)) < dp:
        extra["fsdp_group"] = int(fsdp.group(1))
    overlap_p2p = None
    if (source, key) in _P2P_NOT_OVERLAPPED and vp > 1:
        overlap_p2p = False
        notes.append("pipeline sends not overlapped with compute (the recipe yaml's overlap_p2p_comm False)")
    layout = _layout(dp=dp, tp=tp, pp=pp, cp=cp, virtual_stages=vp, sp=sp, micro_batch=micro_batch,
                     recompute=_recompute(row, key, notes), overlap_p2p_comm=overlap_p2p, **optimizer)
    model = _model(row, key, seq=seq, pad_tp=tp, notes=notes)
    if model["layers"] % (pp * vp):
        notes.append(f"{model['layers']} layers over pp {pp} x vp {vp} do not divide: the framework's "
                     "uneven split (fewer layers on the first and last stage) applies")
    metric, measured = _dense_measurement(row, gpus, global_batch, seq, extra)
    usable, why = _dense_usable(row)
    if why:
        notes.insert(0, why)
    fine_tuning = _fine_tuning(row)
    if fine_tuning:
        notes.append(f"full-parameter SFT on SQuAD examples packed to {seq} tokens: a training step at seq {seq}, "
                     "attention within each packed example (core.validation.published.SQUAD_DOCUMENT_TOKENS)")
    return PublishedCase(
        case_id=row.case_id, suite="h100_dense", source=source,
        hardware=_hardware(row, "gpu"), gpus=gpus, model=model, layout=layout,
        workload={"mode": "train", "global_batch": global_batch, "seq": seq, "fine_tuning": fine_tuning},
        precision=precision,
        metric=metric, measured=measured, usable=usable, note=_note(row, notes), extra=extra,
        citation=row.citation(), excluded=why)


def step_time_from_tokens_per_gpu(global_batch: int, seq: int, tokens_per_s_per_gpu: float, gpus: int) -> float:
    """Seconds per step from a tokens/s/GPU figure: global_batch * seq / (tokens_per_s_per_gpu * gpus),
    the conversion the published README gives."""
    return global_batch * seq / (tokens_per_s_per_gpu * gpus)


def _dense_measurement(row: _Row, gpus: int, global_batch: int, seq: int, extra: dict) -> tuple:
    value, unit = row.number("value"), row.text("unit")
    if value is None:
        row.fail("value", "a number")
    extra["published"] = f"{row.text('value')} {unit}"
    if unit.startswith("s/step"):
        return "step_time_s", value
    if unit == "tokens/s/GPU":
        extra["tokens_per_s_per_gpu"] = value
        return "step_time_s", step_time_from_tokens_per_gpu(global_batch, seq, value, gpus)
    if unit == "TFLOP/s/GPU":
        # NeMo's "model TFLOP/s per GPU": its own FLOP count per step over step time; kept as
        # published, since turning it into seconds needs that FLOP count (a model choice).
        return "model_flops_per_s_per_gpu", value * 1e12
    row.fail("unit", "s/step, tokens/s/GPU or TFLOP/s/GPU")


# Rows whose own figures say they are not full-parameter training of the stated model.
# MB26.06-LLAMA3_70B-8-FP8: 70B parameters on 8 H100s leave 8.8 B per GPU, whose Adam state
# alone (12 bytes each) exceeds 80 GB; its 735 model TFLOP/s at 2643 tokens/s/GPU count
# 278 GFLOP per token, 4 x params (forward + input gradients only), a LoRA-style count.
_NOT_FULL_TRAINING = {"MB26.06-LLAMA3_70B-8-FP8": "70B full training cannot fit 8 H100s and the row's "
                      "model FLOPs per token (4 x params) are a LoRA-style count: not modelled"}


def _dense_usable(row: _Row) -> tuple:
    if row.text("case_id") in _NOT_FULL_TRAINING:
        return False, _NOT_FULL_TRAINING[row.text("case_id")]
    if "LoRA" in row.text("model"):
        return False, "not modelled: LoRA fine-tuning trains adapters on frozen base weights"
    if "JAX" in row.text("framework"):
        return False, ("not modelled: JAX/XLA stack (MaxText, Paxml) with its rematerialisation policy and "
                       "FSDP/DP split not stated; kept for reporting")
    return True, ""


# ---------------------------------------------------------------------------------------
# moe: training_moe.csv (MoE Parallel Folding, arXiv 2504.14960, all on Eos DGX H100)

# Virtual pipeline stages, which the paper does not state: one layer per virtual stage. Its
# authors' reference mappings for Megatron-Core MoE (megatron/core/transformer/moe/README.md,
# "Reference Best Parallel Mapping", MCore v0.8: Mixtral 8x7B PP 4 VP 8, Mixtral 8x22B PP 8
# VP 7, both one layer a chunk, MBS 1) do so, and its best practice enables virtual stages
# whenever PP >= 2. The paper's own tables tell where a run did otherwise: Table 4 keeps
# Table 3's layout at 4x the global batch, so a model and method with both at one GPU count
# give two step times t = a * micro-batches + c (t in proportion to global batch / MFU), and
# with them the per-step overhead c in micro-batches' worth, a model-free figure. A
# non-interleaved 1F1B schedule idles p - 1 of them; one layer per virtual stage, (p - 1) / v.
# Mixtral 8x22B and Qwen2-57B (both methods), Llama3-8x70B MCore and the folded Mixtral-G8T8
# show 1.0-3.6 where 1F1B would idle 3-7; the Mixtral-G8T8 MCore runs show 7.1 at p = 8
# (no expert gradients to reduce there: ep 8 spans its dp 8), read as run without virtual
# stages. The fine-grained model's activations, which the paper says force its mappings
# (Sec. 4.2), are the likely reason: the interleaved schedule keeps more micro-batches in flight.
def _moe_virtual_stages(row: _Row, layers: int) -> int:
    """Virtual stages per pipeline rank: one layer each, unless Tables 3 and 4 show the run's
    layout kept a non-interleaved bubble (1 without pipelining)."""
    pp = row.require("pp")
    if pp == 1 or layers % pp:
        return 1
    virtual = layers // pp
    overhead = _moe_step_overheads().get(_moe_layout_key(row))
    if overhead is not None and abs(overhead - (pp - 1)) < abs(overhead - (pp - 1) / virtual):
        return 1
    return virtual


def _moe_layout_key(row: _Row) -> tuple:
    """A run's model, method and layout: what Table 4 keeps from Table 3."""
    method = "fold" if "fold" in row.case_id.lower() else "mcore"
    return (_model_key(row), method, *(row.text(col) for col in ("tp", "pp", "cp", "ep", "etp")))


@lru_cache(maxsize=1)
def _moe_step_overheads() -> dict:
    """Layout key -> per-step overhead in micro-batches, from a Table 3 row and the Table 4 row
    at its GPU count (see above)."""
    rows = [_Row(cells, SUITE_FILES["moe"]) for cells in _read(SUITE_FILES["moe"])]
    table3 = {(_moe_layout_key(r), r.require("num_gpus")): r for r in rows if r.text("locator").startswith("Table 3")}
    overheads = {}
    for r in rows:
        first = table3.get((_moe_layout_key(r), r.require("num_gpus")))
        if not r.text("locator").startswith("Table 4") or first is None:
            continue
        dp = first.require("num_gpus") // (first.require("tp") * first.require("pp") * first.require("cp"))
        small, large = (run.require("gbs") // dp for run in (first, r))
        ratio = (first.require("gbs") / _percent(first.text("value"))) / (r.require("gbs") / _percent(r.text("value")))
        overheads[_moe_layout_key(r)] = step_overhead_micro_batches(small, large, ratio)
    return overheads


def step_overhead_micro_batches(small: int, large: int, ratio: float) -> float:
    """c / a for step times t = a * m + c measured at m = small and m = large micro-batches,
    given only their ratio t(small) / t(large)."""
    return (ratio * large - small) / (1 - ratio)


# Table 4 cells that cannot have run as printed, with the evidence: their MFU is compared as
# printed (the prediction barely depends on the reading), their memory verdict is shown but not
# counted (core.validation.suites), since the "ran" it would check is not known to be this layout's.
_MOE_DOUBTFUL_GPU_COUNTS = {
    "PF-T4-llama3_8x70b-fold-128": (
        "128 GPUs as printed cannot have run: Table 4 keeps Table 3's layouts (App. 6.4, 'All parallel "
        "configurations are the same'), and Table 3 ran Llama3-8x70B with folding (TP 8, EP 8, PP 16) and "
        "FSDP+EP at 256 GPUs, yet Table 4 lists those two methods at 128/512/1024 and MCore at 256/512/1024, "
        "in a table whose extraction is garbled elsewhere; at 128 GPUs dp is 1, so expert-data-parallel is 1 "
        "and Megatron-Core's distributed optimizer, which shards expert state over that group "
        "(core_v0.10 optimizer/__init__.py: the expert optimizer takes get_expert_data_parallel_group()), "
        "leaves each rank its 3.5 G expert parameters' FP32 master weights and moments (42 GB) beside their "
        "BF16 weights and FP32 gradients (21 GB); the paper states no precision-aware optimizer (core_v0.11+), "
        "offload or recompute, and its 43.7 % MFU matches a run without recompute. Read at 256 GPUs the "
        "layout fits"),
}


def _moe_case(row: _Row) -> PublishedCase:
    notes = ["layout fields the paper does not state: micro batch 1, one layer per virtual pipeline stage "
             "(none where Tables 3 and 4 show a 1F1B bubble), no recompute, distributed optimizer with overlap, sequence parallelism on when tp > 1 "
             "(Megatron-Core MoE recipes)"]
    extra = {"framework": row.text("framework"), **_other_metrics(row.text("other_metrics"))}
    key = _model_key(row)
    if key is None:
        row.fail("model", "a model named in core.validation.corpus.KNOWN_SHAPES")
    gpus = row.require("num_gpus")
    tp, pp, cp, ep = row.require("tp"), row.require("pp"), row.require("cp"), row.require("ep")
    dp = _derived_dp(row, gpus, tp, pp, cp, notes)
    etp = row.integer("etp")
    if etp is None:
        folding = "fold" in row.case_id.lower()
        # The table leaves ETP blank for plain Megatron-Core runs, where the expert tensor
        # parallelism equals tp. Folded runs with a blank ETP are read as ETP 1, what every
        # folded row that states it uses (with tp 8 and ep 8 on dp 1, ETP 1 is the only fit).
        etp = 1 if folding else tp
        notes.append(f"ETP blank: {etp} taken ({'folded run' if folding else 'ETP = TP without folding'})")
    if (tp * cp * dp) % (ep * etp):
        row.fail("ep", f"ep*etp dividing tp*cp*dp = {tp * cp * dp}")
    extra["expert_dp"] = tp * cp * dp // (ep * etp)
    if row.case_id in _MOE_DOUBTFUL_GPU_COUNTS:
        extra["verdict_doubt"] = _MOE_DOUBTFUL_GPU_COUNTS[row.case_id]
        notes.append(extra["verdict_doubt"])
    capacity = re.search(r"capacity factor\s+(\d+(?:\.\d+)?)", row.text("dispatcher_or_routing"))
    shared_ffn = row.integer("shared_expert_ffn", 0)
    moe = {"experts": row.require("num_experts"), "top_k": row.require("topk"),
           "expert_ffn_hidden": row.require("moe_ffn"), "shared_experts": 1 if shared_ffn else 0,
           "shared_expert_ffn_hidden": shared_ffn,
           "capacity_factor": float(capacity.group(1)) if capacity else None}
    seq = row.require("seq_len")
    global_batch = row.require("gbs")
    _check_accumulation(row, dp, 1, global_batch, notes)
    model = _model(row, key, seq=seq, pad_tp=tp, notes=notes, moe=moe)
    layout = _layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp,
                     virtual_stages=_moe_virtual_stages(row, model["layers"]), **_MEGATRON_OPTIMIZER)
    metric, measured = _moe_measurement(row, extra)
    return PublishedCase(
        case_id=row.case_id, suite="moe", source="moe-parallel-folding", hardware=_hardware(row, "gpu"),
        gpus=gpus, model=model, layout=layout, workload={"mode": "train", "global_batch": global_batch, "seq": seq},
        precision=_precision(row.text("dtype"), notes), metric=metric, measured=measured, usable=True,
        note=_note(row, notes), extra=extra, citation=row.citation())


def _moe_measurement(row: _Row, extra: dict) -> tuple:
    """MFU as a fraction of the H100 BF16 dense peak (989.5 TFLOP/s, the paper's denominator, also
    for its FP8 rows), or the paper's model TFLOP/s per GPU, in FLOP/s."""
    extra["published"] = f"{row.text('value')} {row.text('unit')}"
    if row.text("metric") == "MFU":
        extra["mfu_peak_flops"] = H100_BF16_PEAK_FLOPS
        return "mfu", _percent(row.text("value"))
    return "model_flops_per_s_per_gpu", row.number("value") * 1e12


# ---------------------------------------------------------------------------------------
# trtllm: inference_trtllm.csv (static batching, one TP group, no pipeline)

def _trtllm_case(row: _Row) -> PublishedCase:
    notes = ["measured as request_s: seconds for the whole static batch, prefill included "
             "(TensorRT-LLM's benchmark divides batch x output tokens by that latency)"]
    key = _model_key(row)
    if key is None:
        row.fail("model", "a model named in core.validation.corpus.KNOWN_SHAPES")
    gpus, tp = row.require("num_gpus"), row.require("tp")
    batch, prompt, decode = row.require("batch"), row.require("input_len"), row.require("output_len")
    throughput = row.number("value")
    fp8 = "FP8" in row.text("dtype")
    if fp8:
        # Published H100 v0.5 table: "out tok/s" over the TP group; a per-GPU reading would need
        # Llama-2-70B on 4 H100s to decode faster than its FP8 weights can be read from HBM.
        total = throughput
        notes.append("throughput read as total over the TP group (v0.5 header)")
        # KV cache dtype is not on the row; TensorRT-LLM's FP8 builds of that period pair FP8
        # GEMMs with an FP8 KV cache. Taken, not verified for v0.5.
        kv_cache = "fp8"
        notes.append("KV cache dtype not stated: fp8 taken (TensorRT-LLM FP8 builds of the period)")
    else:
        # v0.6.1 A100 table: the header lacks "/GPU", but the same document's H100 table is per GPU,
        # and a total reading would put Llama-2-70B at batch 1280 on 4 A100s at about 15 % of the
        # FP16 peak. Read as per GPU: total = value x gpus.
        total = throughput * gpus
        notes.append("throughput read as per GPU (total = value x gpus)")
        kv_cache = "fp16"
    model = _model(row, key, seq=prompt + decode, pad_tp=None, notes=notes)
    return PublishedCase(
        case_id=row.case_id, suite="trtllm", source="trtllm-h100" if fp8 else "trtllm-a100",
        hardware=_hardware(row, "gpu"), gpus=gpus, model=model, layout=_layout(dp=gpus // tp, tp=tp, sp=False),
        workload={"mode": "infer", "batch": batch, "prompt": prompt, "decode": decode},
        precision={"compute": "fp8" if fp8 else "fp16", "fp8_params": fp8, "fp8_recipe": None,
                   "kv_cache": kv_cache},
        metric="request_s", measured=batch * decode / total, usable=True, note=_note(row, notes),
        extra={"published": f"{row.text('value')} {row.text('unit')}", "throughput_tokens_per_s": total},
        citation=row.citation())


# ---------------------------------------------------------------------------------------
# collectives: collectives_nccl.csv

def _collective_case(row: _Row) -> PublishedCase:
    notes = []
    sample = row.text("locator") == "nccl/README.md sample all_reduce table"
    nodes = int(_first_number(row.text("num_nodes")))
    ranks = row.integer("total_ranks") or nodes * (row.integer("gpus_per_node") or 8)
    if row.text("num_nodes").startswith(">="):
        notes.append(f"'{row.text('num_nodes')}' nodes: the minimum, {nodes}, taken")
    hardware = _hardware(row, "gpu_system")
    extra = {"interconnect": row.text("interconnect"), "notes": row.text("notes")}
    for column in ("time_us_ip", "algbw_GBps_oop", "busbw_GBps_oop", "algbw_GBps_ip", "busbw_GBps_ip"):
        value = row.number(column)
        if value is not None:
            scale = 1e-6 if column.startswith("time") else 1e9  # nccl-tests prints us and GB/s (1e9 B/s)
            extra[column.replace("_us_", "_s_").replace("GBps", "bytes_per_s")] = value * scale
    if sample:
        # nccl-tests prints an out-of-place and an in-place time per size; the out-of-place one
        # is taken (its row is the one the tests' busbw summary leads with); in-place is in extra.
        metric, measured = "collective_time_s", row.number("time_us_oop") * 1e-6
        notes.append("out-of-place time taken; size_bytes is the buffer each rank reduces")
        usable, why = True, ""
    else:
        metric, measured = "bus_bandwidth_bytes_per_s", _first_number(row.text("busbw_GBps_oop")) * 1e9
        notes.append(f"bus bandwidth: the first figure of '{row.text('busbw_GBps_oop')}' GB/s taken")
        usable, why = False, ("not modelled: a maintainer's expectation or a user report over a range of "
                              "sizes, not a timed size")
        if not hardware:
            why += "; GPU has no preset"
    if why:
        notes.insert(0, why)
    return PublishedCase(
        case_id=row.case_id, suite="collectives", source="nccl-tests" if sample else "nccl-github-issues",
        hardware=hardware, gpus=ranks, model={}, layout={},
        workload={"mode": "collective", "op": "all_reduce", "size_bytes": row.integer("size_bytes"),
                  "ranks": ranks, "nodes": nodes},
        precision={"compute": "fp32" if row.text("dtype").startswith("float") else None, "fp8_params": False,
                   "fp8_recipe": None, "kv_cache": None},
        metric=metric, measured=measured, usable=usable, note=_note(row, notes), extra=extra,
        citation=row.citation(), excluded=why)


# ---------------------------------------------------------------------------------------
# memory_h100: memory_h100.csv

_MEMORY_SOURCES = (("Megatron-Bridge", "megatron-bridge"), ("2504.14960", "moe-parallel-folding"),
                   ("2407.21783", "llama3-herd"), ("dgxc-benchmarking", "dgxc-24.11"))

# Rows whose model or statement we cannot model, with the reason.
_MEMORY_NOT_MODELLED = (
    ("Moonlight", "not modelled: multi-head latent attention (MLA) and a dense first layer are not "
                  "expressible in ModelSpec; shape not on the row"),
    ("Nemotron 3 Nano", "not modelled: hybrid Mamba/attention MoE (state-space layers)"),
    ("LoRA", "not modelled: LoRA fine-tuning on frozen base weights; GPU count and batch not stated"),
    ("Qwen3-30B-A3B", "not modelled yet: ModelSpec expresses its attention now (32 heads x 128 on hidden "
                      "2048, as the Hugging Face loader reads it), but the corpus carries no shape for it, and "
                      "the runs' HybridEP buffers and CUDA-graph memory pools are not modelled"),
)

# Layout cells the MEM-VPP-note row leaves blank: the same SKILL.md table's base row
# (MEM-L70B-SFT-base) with only the virtual stages changed, as the note compares them.
_VPP_NOTE_FILLS = {"dp": "2", "cp": "1", "ep": "1", "mbs": "1", "gbs": "32"}


def _memory_case(row: _Row) -> PublishedCase:
    published = " ".join(part for part in (row.text("value"), row.text("unit")) if part)
    notes, extra = [], {"outcome": row.text("outcome"), "other_config": row.text("other_config"),
                        "published": f"{row.text('metric')}: {published}" if published else ""}
    if row.case_id == "MEM-VPP-note":
        row.cells.update({k: v for k, v in _VPP_NOTE_FILLS.items() if not row.text(k)})
        notes.append("blank layout cells taken from MEM-L70B-SFT-base (same table, vp 10 instead of 5)")
    metric, measured = _memory_measurement(row, notes)
    why = _memory_unusable(row)
    if why:
        return PublishedCase(
            case_id=row.case_id, suite="memory_h100", source=_source(row, _MEMORY_SOURCES),
            hardware=_hardware(row, "gpu"), gpus=row.integer("num_gpus", 0), model={}, layout={}, workload={},
            precision=_precision(row.text("dtype"), notes), metric=metric, measured=measured, usable=False,
            note=_note(row, [why, *notes]), extra=extra, citation=row.citation(), excluded=why)
    key = _model_key(row)
    tp, pp, cp = row.integer("tp", 1), row.integer("pp", 1), row.integer("cp", 1)
    if row.case_id == "FIT-L3-405B-8K-noAC":
        gpus, layout_extra = _llama3_herd_layout(notes)
        pad_tp = None  # Meta's own training stack, not Megatron: the tokenizer's 128,256 rows
    else:
        gpus, layout_extra, pad_tp = row.require("num_gpus"), dict(_MEGATRON_OPTIMIZER), tp
        notes.append("distributed optimizer (ZeRO-1) with overlap taken (not stated on the row)")
    dp = _derived_dp(row, gpus, tp, pp, cp, notes)
    micro_batch = row.integer("mbs", 1)
    global_batch = layout_extra.pop("global_batch", None) or row.require("gbs")
    seq = row.require("seq_len")
    recompute = row.text("recompute") or "none"
    if not row.text("recompute"):
        notes.append("recompute not stated: none taken")
    if "without expandable_segments" in row.text("outcome"):
        layout_extra["expandable_segments"] = False
        notes.append("ran without expandable segments (PyTorch's default allocator), as its outcome says")
    layout = _layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=row.integer("ep", 1), virtual_stages=row.integer("vp", 1),
                     micro_batch=micro_batch, recompute=recompute.split()[0], **layout_extra)
    source = _source(row, _MEMORY_SOURCES)
    moe = KNOWN_SHAPES[key].get("moe")
    if moe is not None and source == "moe-parallel-folding":
        moe = {**moe, "capacity_factor": 1.0}  # the paper's token-drop routing, as in training_moe
    model = _model(row, key, seq=seq, pad_tp=pad_tp, notes=notes, moe=moe)
    return PublishedCase(
        case_id=row.case_id, suite="memory_h100", source=source,
        hardware=_hardware(row, "gpu"), gpus=gpus, model=model, layout=layout,
        workload={"mode": "train", "global_batch": global_batch, "seq": seq, "fine_tuning": _fine_tuning(row)},
        precision=_precision(row.text("dtype"), notes), metric=metric, measured=measured, usable=True,
        note=_note(row, notes), extra=extra, citation=row.citation())


def _memory_unusable(row: _Row) -> str:
    name = row.text("model")
    for needle, why in _MEMORY_NOT_MODELLED:
        if needle in name:
            if needle == "Qwen3-30B-A3B" and not row.text("tp"):
                why += "; layout not stated"
            return why
    if row.case_id.startswith("MINFIT"):
        return ("not a measured layout: a vendor's minimum-GPU statement without batch or sequence; "
                "the layouts that ran are rows of training_h100_dense")
    if "misaligned" in row.text("uncertainty"):
        return "not modelled: the row's layout columns may be misaligned (tp 8 and cp 8 'as printed')"
    if _model_key(row) is None:
        return "not modelled: model not in KNOWN_SHAPES"
    return ""


def _memory_measurement(row: _Row, notes: list) -> tuple:
    """A peak figure where the row publishes an exact one, otherwise the verdict its outcome
    states. "GB" is 1e9 bytes: Megatron-Bridge's report_memory (training/utils/train_utils.py)
    divides torch.cuda.memory_stats() bytes by 1.0e9 for its "mem-*-gigabytes" figures; "GiB"
    (one row) is 2^30 bytes. The two differ by 7.4 %, which matters for a 10 % comparison.
    The "Peak Mem (GB)" of the SKILL.md tables (with TFLOP/s against a golden value: the
    scripts/performance harness) is the first iteration's: at @0026ec187, the commit that added
    those tables, the harness keeps the first "mem-max-allocated-gigabytes" in the log
    (utils/evaluate.py get_metrics_from_logfiles), training_log prints memory once, after the
    first logged iteration (log_interval 1 in scripts/performance), and only the later #3169
    (2026-04-09) added a second-iteration report "to better reflect actual peak", as the fused
    Adam allocates its moments in the first step. Which rank's line comes first is not known;
    up to the first step's end the stages differ little (the step's peak dominates)."""
    value, outcome = row.text("value"), row.text("outcome")
    if "peak" in row.text("metric").lower() and _LEADING_NUMBER.match(value) and not value.startswith("~"):
        unit = {"GB": 1e9, "GiB": GiB}.get(row.text("unit"))
        if unit is None:
            row.fail("unit", "GB or GiB")
        if row.text("metric") == "Peak memory" and "Megatron-Bridge" in row.text("source"):
            notes.append("peak read as the first iteration's max allocated (the performance harness's first "
                         "mem-max-allocated line), before Adam's moments exist")
            return "first_iteration_peak_bytes", row.number("value") * unit
        return "peak_memory_bytes", row.number("value") * unit
    # "At least N GPUs ...": the vendor's minimum layout fits (and fewer GPUs would not).
    if "fit" in outcome or "passed" in outcome or outcome.startswith(("ran", "'At least", "H100: 'At least")):
        return "memory_verdict", "fits"
    if "OOM" in outcome:
        return "memory_verdict", "oom"
    row.fail("outcome", "a peak figure, or an outcome saying it fits, ran, passed or went OOM")


def _llama3_herd_layout(notes: list) -> tuple:
    """Llama 3 405B at 8K without activation checkpointing (Llama 3 paper, Sec. 3.3): the row gives
    8,192 or 16,384 GPUs with dp 64 or 128; the 16,384-GPU layout (dp 128) is taken. FSDP that shards
    optimizer state and gradients but keeps parameters (ZeRO-2); first and last stage one layer
    fewer (126 layers over 16 stages of 8: 7 + 14 x 8 + 7); 16M-token batches = 2,048 sequences;
    the interleaving degree is not published, 1 virtual stage taken."""
    notes.append("16,384 GPUs with dp 128 taken; ZeRO-2; stages 7 + 14 x 8 + 7 layers; global batch 2048 "
                 "(16M tokens / 8192); micro batch 1 and no interleaving taken (not published)")
    return 16384, {"zero": 2, "distributed_optimizer": False, "overlap_grad_reduce": True,
                   "overlap_param_gather": False, "first_stage_layers": 7, "last_stage_layers": 7,
                   "global_batch": 2048}
