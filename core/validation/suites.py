"""Predictions against the published measurements shipped in `data/`
(copied verbatim from the project's shared validation set)."""
import csv
import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from core.evaluation import evaluate
from core.model.loader import load_hardware, load_model
from core.model.memory import GiB
from core.model.specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism, TrainWorkload

from . import energy

DATA_DIR = Path(__file__).parent / "data"
HARDWARE = "a100-sxm4-80gb"

# Layout facts the training and memory tables leave out. Korthikanti et al. ran GPT-3 175B
# and MT-NLG 530B with the interleaved 1F1B schedule; the paper's own memory figures pin
# the chunk count: first-stage activations are 1.2917 = 1 + 7/24 and 1.3238 = 1 + 34/105
# times the non-interleaved value, its interleaving factor 1 + (p-1)/(p*v) with v = 3.
INTERLEAVED_CHUNKS = {"gpt-175b": 3, "gpt-530b": 3}


@dataclass(frozen=True)
class Case:
    suite: str
    case: str
    measured: float
    predicted: float
    unit: str
    source: str = ""  # the leave-one-source-out group

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Verdict:
    case: str
    expected_feasible: bool
    predicted_feasible: bool
    detail: str
    doubt: str = ""  # why the published outcome may not be this layout's (core.validation.corpus); then not counted

    @property
    def disagrees(self) -> bool:
        """A counted verdict whose prediction differs from what happened."""
        return not self.doubt and self.expected_feasible != self.predicted_feasible


def _rows(name: str) -> list:
    with open(DATA_DIR / name, newline="") as handle:
        return list(csv.DictReader(handle))


def _gpt(row: dict):
    overrides = {key: int(row[col]) for key, col in
                 (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("vocab", "vocab"),
                  ("max_position", "seq_len"))}
    return load_model(row["model"], overrides)


def _gpt_layout(row: dict, recompute: str, sp: bool) -> Parallelism:
    chunks = INTERLEAVED_CHUNKS.get(row["model"], 1)
    return Parallelism(dp=int(row.get("dp", 1)), tp=int(row["tp"]), pp=int(row["pp"]), sp=sp,
                       zero=0, overlap_grad_reduce=False, micro_batch=int(row["micro_batch"]), recompute=recompute,
                       schedule="interleaved" if chunks > 1 else "1f1b", virtual_stages=chunks)


def training_cases(hw: HardwareSpec | None = None) -> tuple:
    hw = hw or load_hardware(HARDWARE)
    cases, verdicts = [], []
    for row in _rows("training_a100_korthikanti.csv"):
        par = _gpt_layout(row, row["recompute"], row["sequence_parallel"] == "true")
        work = TrainWorkload(global_batch=int(row["global_batch"]), seq=int(row["seq_len"]))
        record = evaluate(_gpt(row), hw, par, work, int(row["gpus"]), time_infeasible=True)
        name = f"{row['model']} tp{row['tp']} pp{row['pp']} {row['recompute']}"
        cases.append(Case("training", name, float(row["measured_iteration_s"]), record["step_time_s"], "s",
                          "korthikanti2023"))
        verdicts.append(Verdict(f"training {name}", True, record["feasible"], record["infeasible_reason"]))
    return cases, verdicts


# A100 training by frameworks other than Megatron-LM (training_a100_frameworks.csv), read once:
# - throughput is taken as measured (tokens/s), never through the source's MFU, so no FLOP
#   formula enters: FlashAttention's README counts Megatron-LM's hardware FLOPs (Narayanan et
#   al. 2021, section 5.1) times 3/4, llm-foundry's 2 * parameters (embeddings included) plus
#   the full attention score matrix; neither is ours, and the tokens are the same;
# - FlashAttention's GPT configs pad the GPT-2 vocabulary to a multiple of 8
#   (pad_vocab_size_multiple: 8); llm-foundry's MPT yamls state 50368 already;
# - both run data parallelism through PyTorch (DDP, or FSDP FULL_SHARD for MPT: zero 3), whose
#   gradient buckets are reduced while the backward runs (overlap_grad_reduce); FlashAttention's
#   ZeroRedundancyOptimizer all-reduces gradients and broadcasts the updated shards, read as
#   ZeRO-1's reduce-scatter and all-gather (at most twice the bytes, and on one NVLink node
#   under 1 % of these steps either way); and neither fuses the gradient accumulation into the weight-
#   gradient GEMMs as Megatron-LM does: autocast's 16-bit weight gradient is added into the
#   FP32 .grad (DDP) or cast to FP32 for the reduce-scatter and added into the shard (FSDP,
#   mixed precision DEFAULT) by kernels of their own;
# - both compute the loss with a fused cross-entropy that holds no FP32 logits (fused_cross_entropy):
#   FlashAttention's configs/experiment/pile/base.yaml sets loss_fn CrossEntropyLossApex with
#   inplace_backward ("uses less memory than torch.nn.CrossEntropyLoss"), and llm-foundry's
#   ComposerMPTCausalLM defaults loss_fn to fused_crossentropy (flash_attn's CrossEntropyLoss);
# - llm-foundry's A100 table does not state attn_impl: submit_benchmarks.py's default, triton,
#   MosaicML's copy of FlashAttention's Triton kernel, "slightly slower than CUDA forward +
#   backward" of its time (flash_attn_triton.py's docstring): the FlashAttention-1 kernel
#   family, as FlashAttention's own rows of November 2022 ran.
FRAMEWORK_ROWS = "training_a100_frameworks.csv"
VOCAB_MULTIPLE_BY_SOURCE = {"flash-attention-2022": 8}
KERNEL_BY_CELL = {"flash1": "flash1", "triton": "flash1"}


def _framework_model(row: dict) -> ModelSpec:
    """A GPT-2/MPT-style decoder: GELU MLP of 4x hidden, LayerNorm, learned positions."""
    hidden, multiple = int(row["hidden"]), VOCAB_MULTIPLE_BY_SOURCE.get(row["source"], 1)
    return ModelSpec(name=row["model"], layers=int(row["layers"]), hidden=hidden, heads=int(row["heads"]),
                     kv_heads=int(row["heads"]), ffn_hidden=4 * hidden,
                     vocab=-(-int(row["vocab"]) // multiple) * multiple, activation="gelu",
                     norm="layernorm", tied_embeddings=row["tied_embeddings"] == "true",
                     position_embedding="learned", attention_kernel=KERNEL_BY_CELL[row["attention_kernel"]],
                     dropout=row["dropout"] == "true", max_position=int(row["seq_len"]))


def measured_step_s(row: dict) -> float:
    """Seconds per global batch from the row's token throughput ("1310k" over all GPUs, or a
    per-GPU figure)."""
    cell = row["throughput_tokens_per_s"]
    tokens_per_s = float(cell.rstrip("k")) * (1e3 if cell.endswith("k") else 1.0)
    if row["throughput_scope"] == "per GPU":
        tokens_per_s *= int(row["gpus"])
    return int(row["global_batch"]) * int(row["seq_len"]) / tokens_per_s


def framework_training_cases(hw: HardwareSpec | None = None) -> tuple:
    """Seconds per global batch of the FlashAttention and llm-foundry rows, measured and
    predicted, with the verdict that each layout fits (all ran)."""
    hw = hw or load_hardware(HARDWARE)
    cases, verdicts = [], []
    for row in _rows(FRAMEWORK_ROWS):
        # PyTorch FSDP (the ZeRO-3 rows) prefetches each layer's parameters on its own stream;
        # DDP and ZeRO-1 optimizers of these frameworks gather no updated shards behind a forward
        zero = int(row["zero"])
        par = Parallelism(dp=int(row["dp"]), zero=zero, micro_batch=int(row["micro_batch"]),
                          recompute=row["recompute"], overlap_grad_reduce=True, overlap_param_gather=zero >= 3,
                          grad_accumulation_fusion=False,
                          fused_cross_entropy=True)
        work = TrainWorkload(global_batch=int(row["global_batch"]), seq=int(row["seq_len"]))
        record = evaluate(_framework_model(row), hw, par, work, int(row["gpus"]), time_infeasible=True)
        name = f"{row['model']} dp{row['dp']} zero{row['zero']} mb{row['micro_batch']} gb{row['global_batch']} {row['recompute']}"
        cases.append(Case("a100_training", name, measured_step_s(row), record["step_time_s"], "s", row["source"]))
        verdicts.append(Verdict(f"a100_training {name}", True, record["feasible"], record["infeasible_reason"]))
    return cases, verdicts


def inference_cases(hw: HardwareSpec | None = None) -> tuple:
    hw = hw or load_hardware(HARDWARE)
    cases, verdicts = [], []
    for row in _rows("inference_a100_llama2.csv"):
        tp = int(row["tp"])
        work = InferWorkload(batch=int(row["batch"]), prompt=int(row["prompt_tokens"]),
                             decode=int(row["output_tokens"]))
        record = evaluate(load_model(row["model"]), hw, Parallelism(tp=tp), work, tp, time_infeasible=True)
        name = f"{row['model']} tp{tp} b{row['batch']}"
        cases.append(Case("inference", name, float(row["measured_request_s"]), record["step_time_s"], "s",
                          "kundu2024"))
        verdicts.append(Verdict(f"inference {name}", True, record["feasible"], record["infeasible_reason"]))
    one_gpu = evaluate(load_model("llama2-70b"), hw, Parallelism(), InferWorkload(1, 200, 200), 1)
    verdicts.append(Verdict("inference llama2-70b on one GPU", False, one_gpu["feasible"],
                            one_gpu["infeasible_reason"]))
    return cases, verdicts


def memory_cases(hw: HardwareSpec | None = None) -> tuple:
    hw = hw or load_hardware(HARDWARE)
    cases, verdicts = [], []
    for row in _rows("memory_a100_korthikanti.csv"):
        selective = row["setting"] == "selective_sp"
        par = _gpt_layout(row, "selective" if selective else "none", selective)
        work = TrainWorkload(global_batch=int(row["global_batch"]), seq=int(row["seq_len"]))
        record = evaluate(_gpt(row), hw, par, work, int(row["gpus"]), time_infeasible=True)
        mem = record["memory"]
        states = mem["weights_gib"] + mem["gradients_gib"] + mem["optimizer_gib"]
        name = f"{row['model']} {row['setting']}"
        cases.append(Case("memory", f"{name} weights+optimizer", float(row["weights_and_optimizer_gb"]),
                          states, "GiB"))
        cases.append(Case("memory", f"{name} activations", float(row["activations_gb"]),
                          mem["activations_gib"], "GiB"))
        verdicts.append(Verdict(f"memory {name}", selective, record["feasible"],
                                record["infeasible_reason"] or f"{record['memory_peak_gib']:.1f} GiB"))
    return cases, verdicts


def published_cases(suite: str, hw: HardwareSpec | None = None) -> tuple:
    """One suite of the published corpus (core.validation.corpus): a Case per usable row with a
    measured value, a Verdict per row that says whether the layout ran or ran out of memory.
    `hw`, when given, lends its calibration to the rows of its GPU family (each row keeps its
    own GPU's preset: an H200 row its HBM, an H100 row its own)."""
    from . import corpus, published  # the corpus loads on first use only

    cases, verdicts = [], []
    for row in corpus.published_cases(suite):
        if not row.usable:
            continue
        lent = hw is not None and _family(hw.name) == _family(str(row.hardware))
        if suite == "collectives":
            if row.hardware and "h100" in str(row.hardware).lower():
                predicted = published.all_reduce_s(row, hw if lent else None)
                cases.append(Case(suite, row.case_id, row.measured, predicted, "s", row.source))
            continue
        row_hw = dataclasses.replace(published.hardware_for(row), calibration=hw.calibration) if lent else None
        value, feasible, record = published.predict(row, row_hw)
        # A row whose outcome starts with "OOM" did not fit; every other row ran.
        ran = not str(row.extra.get("outcome", "")).lower().startswith("oom")
        if row.metric != "memory_verdict" and row.measured is not None and not math.isnan(row.measured):
            cases.append(Case(suite, row.case_id, row.measured, value, row.metric, row.source))
        verdicts.append(Verdict(f"{suite} {row.case_id}", ran, feasible,
                                record["infeasible_reason"] or f"{record['memory_peak_gib']:.1f} GiB",
                                row.extra.get("verdict_doubt", "")))
    return cases, verdicts


def excluded_rows(suites) -> list:
    """(suite, case id, reason) of the published rows left out of their suite's figures."""
    from . import corpus

    return [(suite, row.case_id, row.excluded) for suite in suites if suite in PUBLISHED_SUITES
            for row in corpus.published_cases(suite) if not row.usable]


def energy_cases(suite: str, hw: HardwareSpec | None = None) -> tuple:
    """ML.ENERGY v2's vLLM runs (core/validation/energy.py); each row names its GPU, so `hw`
    is not used. A row whose weights do not fit is a verdict (it ran, so it fits)."""
    cases, unfit = energy.comparisons()
    verdicts = [Verdict(name, True, False, detail) for name, detail in unfit] if suite == "energy" else []
    return [Case(*case) for case in cases if case[0] == suite], verdicts


def _family(name: str) -> str:
    """GPU family of a preset or published GPU name: H200 rows share H100's factors."""
    name = name.lower()
    return "h100" if "h100" in name or "h200" in name else "a100" if "a100" in name else name


PUBLISHED_SUITES = ("h100_dense", "moe", "trtllm", "collectives", "memory_h100")
SUITES = {"training": training_cases, "a100_training": framework_training_cases, "inference": inference_cases,
          "memory": memory_cases, "energy": functools.partial(energy_cases, "energy"),
          "energy_at_pace": functools.partial(energy_cases, "energy_at_pace"),
          **{name: functools.partial(published_cases, name) for name in PUBLISHED_SUITES}}


# Suites summarised per group of measured kernels or runs, not per case; they run only when
# named (kernels and serving read tables beside the repository, ../shared/validation).
GROUPED_SUITES = ("kernels", "measured", "serving")


def grouped_suite(name: str, serving_rows=None) -> tuple:
    """(records, skipped) of the grouped suite `name`: error figures per group, rows skipped;
    the serving suite's with each row's record third (serving.row_record), over the CSV
    `serving_rows` where given. Each suite's module loads on first use only."""
    if name == "serving":
        from . import serving

        return serving.serving_groups(path=serving_rows or serving.ROWS)
    if name == "measured":
        from . import measured

        return measured.measured_groups()
    from . import kernels

    return kernels.kernel_groups()


def run_all(suites=("training", "inference", "memory")) -> tuple:
    cases, verdicts = [], []
    for suite in suites:
        c, v = SUITES[suite]()
        cases += c
        verdicts += v
    return cases, verdicts


def summary(cases: list) -> dict:
    """Mean and max absolute error per suite, in percent."""
    out = {}
    for suite in dict.fromkeys(c.suite for c in cases):
        errors = [abs(c.error_pct) for c in cases if c.suite == suite]
        out[suite] = {"cases": len(errors), "mean_abs_error_pct": sum(errors) / len(errors),
                      "max_abs_error_pct": max(errors)}
    return out


__all__ = ["Case", "GROUPED_SUITES", "GiB", "Verdict", "excluded_rows", "grouped_suite", "run_all", "summary"]
