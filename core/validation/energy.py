"""The energy suite: joules per output token against ML.ENERGY Leaderboard v2.0's vLLM runs on
A100-SXM4-40GB and H100-SXM (data/inference_energy_mlenergy_v2.csv, a verbatim copy of
../shared/validation/energy/inference_energy_visible.csv; its README gives the caveats).

Each run is modelled as one batch of the run's maximum batch size (fewer where the KV cache of
that many does not fit, as vLLM's scheduler then admits fewer), all sequences prefilled together
and decoded to the run's mean output length, each decode iteration followed by vLLM 0.5's host
time (core/serving/engines.LEGACY_ENGINES) while the GPUs idle. The source averaged power over its
whole benchmark run, ramps and tail included, so its J/token holds idle time at the ends that a
steady batch has not; the fitted host time absorbs that share of the pace."""
import csv
import functools
import re
from pathlib import Path


from core.evaluation import estimate_memory, evaluate
from core.model.energy import spread_over
from core.model.inference import decode_steps
from core.model.power import energy_j
from core.model.loader import load_hardware, load_model
from core.model.specs import InferWorkload, ModelSpec, MoESpec, Parallelism
from core.serving.engines import LEGACY_ENGINES, EngineSpec

DATA = Path(__file__).parent / "data" / "inference_energy_mlenergy_v2.csv"
# Prompt tokens: not given per row ("dataset-driven"). 220 is an assumption near the mean
# first-turn prompt of ShareGPT as LLM serving benchmarks tokenise it; the code task's prompts
# are not documented, so they get the same.
PROMPT_TOKENS = 220
# The GPU presets the rows run on: the A100 40GB is the 80GB preset with its own HBM.
HARDWARE = {"A100-SXM4-40GB": ("a100-sxm4-80gb", {"gpu.hbm.capacity": "40960 MiB", "gpu.hbm.bandwidth": "1555 GB/s"}),
            "H100-SXM 80GB HBM3": ("h100-sxm5-80gb", {})}
# The GPU family a row's host overheads are fitted for (its host machines differ).
FAMILY = {"A100-SXM4-40GB": "a100", "H100-SXM 80GB HBM3": "h100"}


def _spec(name, layers, hidden, heads, kv_heads, ffn, vocab, head_dim=0, activation="swiglu", norm="rmsnorm",
          tied=False, moe=None) -> ModelSpec:
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn,
                     vocab=vocab, activation=activation, norm=norm, tied_embeddings=tied,
                     attention_head_dim=head_dim, moe=moe)


# Each model's config.json on Hugging Face (num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size, head_dim); Gemma's GeGLU and Phi-3's gated
# MLPs are gated like SwiGLU (three matrices), StarCoder2's is a plain GELU MLP with LayerNorm.
MODELS = {
    "google/gemma-2-2b-it": _spec("gemma-2-2b", 26, 2304, 8, 4, 9216, 256000, 256, tied=True),
    "google/gemma-2-9b-it": _spec("gemma-2-9b", 42, 3584, 16, 8, 14336, 256000, 256, tied=True),
    "google/gemma-2-27b-it": _spec("gemma-2-27b", 46, 4608, 32, 16, 36864, 256000, 128, tied=True),
    "google/codegemma-1.1-2b": _spec("codegemma-2b", 18, 2048, 8, 1, 16384, 256000, 256, tied=True),
    "google/codegemma-7b": _spec("codegemma-7b", 28, 3072, 16, 16, 24576, 256000, 256, tied=True),
    "bigcode/starcoder2-3b": _spec("starcoder2-3b", 30, 3072, 24, 2, 12288, 49152, activation="gelu",
                                   norm="layernorm", tied=True),
    "bigcode/starcoder2-7b": _spec("starcoder2-7b", 32, 4608, 36, 4, 18432, 49152, activation="gelu",
                                   norm="layernorm", tied=True),
    "bigcode/starcoder2-15b": _spec("starcoder2-15b", 40, 6144, 48, 4, 24576, 49152, activation="gelu",
                                    norm="layernorm", tied=True),
    "codellama/CodeLlama-7b-hf": _spec("codellama-7b", 32, 4096, 32, 32, 11008, 32016),
    "codellama/CodeLlama-13b-hf": _spec("codellama-13b", 40, 5120, 40, 40, 13824, 32016),
    "codellama/CodeLlama-34b-hf": _spec("codellama-34b", 48, 8192, 64, 8, 22016, 32000),
    "codellama/CodeLlama-70b-hf": _spec("codellama-70b", 80, 8192, 64, 8, 28672, 32016),
    "microsoft/Phi-3-mini-4k-instruct": _spec("phi-3-mini", 32, 3072, 32, 32, 8192, 32064),
    "microsoft/Phi-3-small-8k-instruct": _spec("phi-3-small", 32, 4096, 32, 8, 14336, 100352),
    "microsoft/Phi-3-medium-4k-instruct": _spec("phi-3-medium", 40, 5120, 40, 10, 17920, 32064),
    "mistralai/Mistral-7B-Instruct-v0.3": _spec("mistral-7b", 32, 4096, 32, 8, 14336, 32768),
    "mistralai/Mistral-Nemo-Instruct-2407": _spec("mistral-nemo-12b", 40, 5120, 32, 8, 14336, 131072, 128),
    "mistralai/Mistral-Large-Instruct-2407": _spec("mistral-large-123b", 88, 12288, 96, 8, 28672, 32768),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": load_model("mixtral-8x7b"),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": _spec("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768,
                                                   moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=16384)),
    "meta-llama/Meta-Llama-3.1-8B-Instruct": load_model("llama3.1-8b"),
    "meta-llama/Meta-Llama-3.1-70B-Instruct": load_model("llama3.1-70b"),
    "meta-llama/Meta-Llama-3.1-405B-Instruct": load_model("llama3.1-405b"),
}


def rows() -> list:
    with open(DATA, newline="") as handle:
        return list(csv.DictReader(handle))


def _number(text: str, key: str) -> float:
    match = re.search(rf"{key}=([0-9.]+)", text)
    return float(match.group(1))


def fitting_batch(model: ModelSpec, hw, par: Parallelism, largest: int, prompt: int, decode: int) -> int:
    """The largest batch up to `largest` whose weights and KV cache fit (vLLM admits no more)."""
    if estimate_memory(model, hw, par, InferWorkload(largest, prompt, decode)).feasible:
        return largest
    low, high = 0, largest
    while high - low > 1:
        mid = (low + high) // 2
        if estimate_memory(model, hw, par, InferWorkload(mid, prompt, decode)).feasible:
            low = mid
        else:
            high = mid
    return low


def engine_for(row: dict) -> EngineSpec:
    """The vLLM 0.5 host model of the row's GPU family."""
    return LEGACY_ENGINES[("vllm-0.5", FAMILY[row["gpu"]])]


def predict(row: dict, engine: EngineSpec = None) -> dict:
    """The modelled record of one row with the batch run: "served_s", the batch's time with the
    engine's host time per decode iteration (`engine`, else the row's fitted vLLM 0.5 entry);
    "served_j" and "at_measured_pace_j", (J per output token, seconds per output token) of the
    modelled work spread over that time and over the run's measured pace."""
    preset, overrides = HARDWARE[row["gpu"]]
    hw = load_hardware(preset, overrides)
    model = MODELS[row["model"]]
    tp, pp = int(row["tp"]), int(_number(row["other_metrics"], "pp"))
    par = Parallelism(tp=tp, pp=pp)
    decode = round(_number(row["output_len"], "mean"))
    batch = fitting_batch(model, hw, par, int(_number(row["batch_or_concurrency"], "max_bs")), PROMPT_TOKENS, decode)
    if batch == 0:
        return {"batch": 0}
    work = InferWorkload(batch, PROMPT_TOKENS, decode)
    record = evaluate(model, hw, par, work, tp * pp)
    host_s = decode_steps(decode) * (engine or engine_for(row)).host_s(batch, tp)
    served_s = record["step_time_s"] + host_s
    measured_s = batch * decode / _number(row["other_metrics"], "token_tput_tok_s")
    return {**record, "batch": batch, "host_s": host_s, "served_s": served_s,
            "served_j": _spread_j(model, hw, par, work, served_s),
            "at_measured_pace_j": _spread_j(model, hw, par, work, measured_s)}


def _spread_j(model: ModelSpec, hw, par: Parallelism, work: InferWorkload, seconds: float) -> tuple:
    """(J per output token, seconds per output token) of the modelled work (busy time, FLOPs,
    bytes at the modelled clock) spread over `seconds`, the GPUs idling in between. Energy is
    linear in the idle power, hence the second figure (scripts/fit_idle_power.py fits the idle
    power on it)."""
    hw_timed, spread = spread_over(model, hw, par, work, par.tp * par.pp, seconds)
    per_token = par.tp * par.pp / (work.batch * work.decode)
    return energy_j(hw_timed.gpu.power, spread) * per_token, spread.time_s * per_token


def measured_j_per_token(row: dict) -> float:
    """The row's energy per request over its mean output length (the source's own J/token)."""
    return float(row["value"]) / _number(row["output_len"], "mean")


@functools.lru_cache(maxsize=1)
def comparisons() -> tuple:
    """((suite, case, measured, predicted, unit, model), ...) and ((case, detail), ...) of the
    rows whose model does not fit its GPUs at all. Suite "energy": J per output token, the
    model's own time (vLLM 0.5's host time included) and power; "energy_at_pace": the power
    model alone, each run's measured throughput given. The model names the leave-one-out group."""
    cases, unfit = [], []
    for row in rows():
        record = predict(row)
        name = (f"{row['model'].split('/')[-1]} {row['gpu'].split('-')[0]}x{row['num_gpus']} "
                f"{row['batch_or_concurrency'].split()[0]}")
        if record["batch"] == 0:
            unfit.append((f"energy {name}", "weights alone do not fit"))
            continue
        measured = measured_j_per_token(row)
        cases.append(("energy", name, measured, record["served_j"][0], "J/token", row["model"]))
        cases.append(("energy_at_pace", name, measured, record["at_measured_pace_j"][0], "J/token", row["model"]))
    return tuple(cases), tuple(unfit)


def grouped_errors(cases) -> dict:
    """{"GPU": [(name, n, mean signed %, mean |err| %)], "model": [...]} of one energy suite's cases."""
    groups = {"GPU": {}, "model": {}}
    for case in cases:
        groups["GPU"].setdefault(case.case.split()[1].split("x")[0], []).append(case.error_pct)
        groups["model"].setdefault(case.source.split("/")[-1], []).append(case.error_pct)
    return {kind: [(name, len(e), sum(e) / len(e), sum(map(abs, e)) / len(e)) for name, e in sorted(found.items())]
            for kind, found in groups.items()}
