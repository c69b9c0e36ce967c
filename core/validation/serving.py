"""The serving suite: measured end-to-end serving runs (../shared/validation/serving, from
AIConfigurator's silicon samples) against the engine simulator (core.serving), TTFT and TPOT
per row, summarised by GPU, model, engine and mode."""
import csv
import math
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from core.errors import SpecError
from core.model.loader import list_presets, load_hardware, load_model, with_dtype
from core.serving.engines import (ENGINES, FAMILY_REQUEST_OVERHEAD_S, SGLANG_FLOOR_RESERVE_BYTES, engine_spec,
                                  on_gpu, release_spec, sglang_fraction_leaving, version_family, with_knobs)
from core.serving.service import (Pool, kv_bytes_per_element, kv_tokens, request_cache_tokens, serve, serve_disagg,
                                  state_tokens)
from core.serving.simulate import Load

from .systems import preset_for_system

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
ROWS = SHARED / "validation" / "serving" / "silicon_visible.csv"
MODELS_DIR = SHARED / "models"
# The rows' Hugging Face names whose config is a preset or a file under another name; any other
# name resolves to its config.json in ../shared/models (org--name.json) or a preset (model_ref).
MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b", "meta-llama/Llama-3.1-70B": "llama3.1-70b"}
# What a checkpoint's name may add to its model's: a tuning, a weight format or a release date
# ("-2507"), not a shape (the rows' gemm_quant_mode and moe_quant_mode say how it was served).
NAME_SUFFIXES = ("-instruct", "-thinking", "-chat", "-base", "-hf", "-fp8", "-fp4", "-nvfp4", "-bf16")
RELEASE_DATE = re.compile(r"-\d{4}$")
# Checkpoints of another model's architecture, by bare name: DeepSeek-R1 and V3.1 are
# DeepSeek-V3's shape post-trained; Llama 3.3 70B is Llama 3.1 70B's.
SAME_ARCHITECTURE = {"deepseek-r1": "deepseek-ai/DeepSeek-V3", "deepseek-v3.1": "deepseek-ai/DeepSeek-V3",
                     "llama-3.3-70b": "meta-llama/Llama-3.1-70B"}
# The rows' columns this suite reads (the silicon-sample format; the prefill_* and decode_*
# layout columns are read where a row is disaggregated)
COLUMNS = ("backend", "backend_version", "model_path", "system", "mode", "isl", "osl", "gemm_quant_mode",
           "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_ep_size",
           "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms")
# GEMM formats of the rows; an empty one (or AIConfigurator's float16) is the checkpoint's BF16.
# Quantized rows keep their KV cache in FP8, as these engines' FP8 and NVFP4 recipes do.
DTYPES = {"": "bf16", "float16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4"}
# fp8_block rows scale FP8 per block (1 x 128 activations, 128 x 128 weights): the block-scaled
# recipe, its share of the FP8 peak and, on Hopper, its k-blocks in turn (gpu.block_scale_step).
RECIPES = {"fp8_block": "block-scaled"}
# The experts' formats a row may name beside its GEMM format: the same family as the GEMMs'
# (an FP8 model's experts in FP8 blocks or per tensor), which the GEMM dtype times, or the
# checkpoint's own narrower experts (CHECKPOINT_EXPERT_FORMATS). Others are counted as not
# simulated, with their name.
MOE_FORMATS = {"bf16": ("", "float16", "bfloat16"), "fp8": ("", "fp8", "fp8_block"), "nvfp4": ("", "nvfp4")}
# AIConfigurator's names for experts served in their checkpoint's weight-only format, and that
# format (ModelSpec.expert_weight_dtype): gpt-oss's MXFP4 experts (with BF16 activations on Hopper,
# MXFP8 ones in TensorRT-LLM on Blackwell, whose math is timed at the row's GEMM format here),
# Kimi-K2.5's INT4 ones. Their GEMMs read the weights as stored (graph.narrower_weight_bytes).
CHECKPOINT_EXPERT_FORMATS = {"w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4", "int4_wo": "int4_group32"}


# How each engine's benchmark client offered its closed loop, fitted with the engine overheads
# (scripts/fit_serving.py), since the engines were measured by different clients:
# - ramp share: its first requests arrive spread over this share of one request's lifetime
#   (0: all at once, so the first wave's prefills queue behind each other), and count;
# - length spread: prompt and output lengths vary within +- this share of the nominal ones
#   (random-dataset generators draw them; network and detokenizer jitter do the same to timing).
#   Without it a closed loop of fixed lengths locks into waves that arrive together and queue
#   their prefills, which the measured TTFTs do not show;
# - requests per slot: requests the client sends in all per request it keeps in flight. The
#   first `concurrency` of them arrive at once and queue for their prefills, so the fewer the
#   client sends, the more that first wave weighs in the mean TTFT (SGLang's rows queue like a
#   run of three waves, TensorRT-LLM's and vLLM's like ten).
# The clients are per benchmark harness: each engine's own campaigns (keyed by engine name), and
# the database's workflow runs ("db-dump" sources: every DeepSeek-V3 row, TensorRT-LLM and
# SGLang, aggregated and disaggregated, with silicon_concurrency recorded), one harness for both
# engines, fitted on those rows (scripts/fit_serving.py --workflow, left-one-engine-out beside).
WORKFLOW = "workflow"
RAMP_SHARE = {"trtllm": 0.0, "vllm": 0.0, "sglang": 0.0, WORKFLOW: 0.0}
LENGTH_SPREAD = {"trtllm": 0.05, "vllm": 0.05, "sglang": 0.02, WORKFLOW: 0.05}
REQUESTS_PER_SLOT = {"trtllm": 10.0, "vllm": 10.0, "sglang": 3.0, WORKFLOW: 5.0}
HARNESSES = tuple(RAMP_SHARE)
# A harness's own time before a request's first token leaves, in place of the engine's request
# overhead: the workflow runs' client reaches both engines through the same front end, and their
# rows name no engine version (or none comparable with the dense campaigns'), fitted with its
# client (scripts/fit_serving.py --workflow). Keyed by the harness, or by (harness, engine,
# version family) for a family of the harness's rows that fits one of its own (20 rows or more;
# the engine's software stack between the front end and the first token differs by release),
# which takes precedence: workflow TTFT mean |err| 38.3 -> 36.7 % (TensorRT-LLM 1.2 30.1 -> 23.3
# %, left out 36.9 %). Unversioned SGLang's rows (compile stalls of 5-9 s, docs/accuracy.md) fit
# the scan's bound: not identified, they keep the harness's.
HARNESS_REQUEST_OVERHEAD_S = {WORKFLOW: 0.160, (WORKFLOW, "sglang", "0.5"): 0.165, (WORKFLOW, "trtllm", ""): 0.205,
                              (WORKFLOW, "trtllm", "0.8"): 0.070, (WORKFLOW, "trtllm", "1.1"): 0.200,
                              (WORKFLOW, "trtllm", "1.2"): 0.115}


# How a campaign launched its engines, where that differs from the engines' defaults. The
# Llama-3.1-70B sweep measured 2025-10-29 (the rows whose source opens with "model="; TensorRT-LLM
# and vLLM, H100/H200/B200, 1k/1k, 1k/8k and 8k/1k tokens, 4 to 128 requests in flight, ten
# per slot) has the shapes of the public InferenceMAX benchmark, whose launch scripts for it
# (benchmarks/70b_fp8_h200_trt_slurm.sh, 70b_fp4_b200_trt_slurm.sh) start trtllm-serve with a
# 16,384-token budget and, for 1k/1k on fewer than 8 GPUs only, TensorRT-LLM's batch waiting
# (batch_wait_timeout_iters 20, batch_wait_max_tokens_ratio 0.9). Those rows alone show it: at
# 4 requests in flight their TTFT exceeds the same engine's at 1k/8k by about 20 decode steps
# (B200 FP8 on 1 GPU 279 ms, 20 x 14.6 ms; on 4 GPUs 134 ms, 20 x 6.6 ms), on 8 GPUs and in
# the sweep's vLLM rows by nothing.
SWEEP_SOURCE = "model="
SWEEP_TRTLLM_MAX_NUM_TOKENS = 16384
SWEEP_BATCH_WAIT = {"batch_wait_iters": 20, "batch_wait_tokens_ratio": 0.9}


def launched(row: dict, engine):
    """`engine` as the campaign that measured `row` launched it (the notes above)."""
    if row["backend"] != "trtllm" or not row["silicon_data_source"].startswith(SWEEP_SOURCE):
        return engine
    engine = with_knobs(engine, max_num_tokens=SWEEP_TRTLLM_MAX_NUM_TOKENS)
    if (row["isl"], row["osl"]) == ("1024", "1024") and row_count(row["tp_size"]) < 8:
        engine = replace(engine, **SWEEP_BATCH_WAIT)
    return engine


# SGLang's default mem_fraction_static (core.serving.engines.sglang_memory_fraction) can leave the KV
# cache no room for a request: DeepSeek-V3 in FP8 on four B200s (0.856 of 180 GiB, 154 GiB, for
# about 160 GiB of weights). A campaign that ran such a layout set the fraction by hand, to a value
# its rows do not record; those rows take the fraction that leaves SGLang's runtime only its floor
# reserve (10 GiB): any fraction that holds their requests times them alike.
def memory_raised(engine, model, hw, pools: tuple, kv_dtype: str, tokens: int):
    """`engine` with its memory fraction raised by hand where its own leaves a pool's KV cache
    fewer than `tokens` (one request's), as a launch that ran must have; else `engine`."""
    if engine.kv_budget != "static" or "kv_memory_fraction" in engine.knobs_set:
        return engine
    kv_bytes = kv_bytes_per_element(hw, kv_dtype)
    if all(kv_tokens(model, hw, pool, placed, kv_bytes)
           >= request_cache_tokens(placed, tokens, state_tokens(model, pool, placed, kv_bytes))
           for pool in pools for placed in (on_gpu(engine, hw.gpu, pool.tp, pool.pp, pool.attention_dp),)):
        return engine
    fraction = sglang_fraction_leaving(hw.gpu.hbm.capacity_bytes, SGLANG_FLOOR_RESERVE_BYTES)
    return with_knobs(engine, kv_memory_fraction=fraction)


def harness(row: dict) -> str:
    """The benchmark harness that measured a row: the workflow runs', else its engine's own."""
    return WORKFLOW if row["silicon_data_source"].startswith("db-dump") else row["backend"]


MODES = ("agg", "disagg")
MEASURED = ("isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms")  # positive numbers in every row
# layout counts, empty where a row has none (the prefill_ and decode_ ones of disaggregated rows)
LAYOUT = ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_ep_size", "num_workers")
LINE = "line"  # the key rows() adds: the row's line in its file (the header is line 1)


def rows(path=ROWS) -> list:
    """The measured rows of a CSV in AIConfigurator's silicon-sample format (default: the visible
    rows beside the repository), each with its LINE; a file that is not there, lacks a column
    this suite reads, or holds a value it cannot read, is refused naming it (and the line)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise SpecError(str(path), "columns", ", ".join(missing),
                                "missing, which every CSV in AIConfigurator's silicon-sample format has")
            out = [{**row, LINE: line} for line, row in enumerate(reader, start=2)]
    except OSError as exc:
        raise SpecError(str(path), "serving rows", str(path), f"cannot be read ({exc.strerror})") from None
    for row in out:
        _check(row, f"{path}: line {row[LINE]}")
    return out


def _check(row: dict, source: str) -> None:
    if row["mode"] not in MODES:
        raise SpecError(source, "mode", row["mode"], f"expected one of {', '.join(MODES)}")
    for field in MEASURED:
        if not _number(row[field]) > 0:
            raise SpecError(source, field, row[field], "expected a positive number")
    for field in (prefix + key for prefix in ("", "prefill_", "decode_") for key in LAYOUT):
        if row.get(field) and not _number(row[field]) >= 0:
            raise SpecError(source, field, row[field], "expected a count (a number >= 0) or nothing")
    for part in row["silicon_data_source"].split(";"):
        key, _, value = part.strip().partition("=")
        if key == "silicon_concurrency" and not _number(value) > 0:
            raise SpecError(source, "silicon_data_source", part.strip(), "expected silicon_concurrency=<a positive number>")


def _number(text: str) -> float:
    """`text` as a number; NaN (which no comparison passes) where it is none."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


@lru_cache(maxsize=None)
def model_ref(model_path: str) -> str:
    """What load_model takes for a row's Hugging Face name: MODELS, else its config.json in
    ../shared/models (org--name.json, any case), else the preset of its name ("Llama-3.1-405B"
    is llama3.1-405b), else the model whose architecture it has (SAME_ARCHITECTURE), each tried
    without the suffixes of NAME_SUFFIXES and RELEASE_DATE; "" when none is found."""
    if model_path in MODELS:
        return MODELS[model_path]
    org, _, name = model_path.strip().rpartition("/")
    names = [name.lower()]
    while True:
        shorter = RELEASE_DATE.sub("", names[-1])
        shorter = next((shorter.removesuffix(x) for x in NAME_SUFFIXES if shorter.endswith(x)), shorter)
        if shorter == names[-1]:
            break
        names.append(shorter)
    configs = {p.name.lower(): p for p in MODELS_DIR.glob("*.json")} if MODELS_DIR.is_dir() else {}
    presets = set(list_presets()["models"])
    for candidate in names:
        config = configs.get(f"{org.lower()}--{candidate}.json")
        if config is not None:
            return str(config)
        preset = candidate.removeprefix("meta-").replace("llama-", "llama")
        if preset in presets:
            return preset
        if candidate in SAME_ARCHITECTURE:
            return model_ref(SAME_ARCHITECTURE[candidate])
    return ""


def row_count(value, default=1) -> int:
    """A count field of a measured row as an integer ("8.0" -> 8), `default` where it is empty."""
    return int(float(value)) if value not in ("", None) else default


def _pool(row: dict, prefix: str = "") -> Pool:
    get = lambda key: row.get(prefix + key, "")  # noqa: E731
    adp = row_count(get("attention_dp_size"))
    # the rows' tp_size is each attention rank's tensor parallelism: an engine spans tp x adp GPUs.
    # A decode pool's batch_size caps each rank's requests (the rows' concurrency is that cap
    # times the ranks); a prefill pool's is 1 in every row, the configurator's estimation unit,
    # not a cap we can tell the engines ran with, so a prefill engine batches prompts as its
    # own defaults allow (its token budget)
    batch = row_count(get("batch_size"), 0) if prefix == "decode_" else 0
    return Pool(workers=row_count(get("num_workers")) if prefix else 1, tp=row_count(get("tp_size")) * adp,
                pp=row_count(get("pp_size")), ep=max(1, row_count(get("moe_ep_size"))), attention_dp=adp, batch=batch)


def concurrency(row: dict) -> int:
    for part in row["silicon_data_source"].split(";"):
        key, _, value = part.strip().partition("=")
        if key == "silicon_concurrency":
            return int(float(value))
    return row_count(row["batch_size"], 0)  # 0: not recorded (disaggregated rows without silicon_concurrency)


def predict(row: dict, engines: dict | None = None, clients: tuple | None = None,
            families: dict | None = None, harnesses: dict | None = None) -> dict:
    """The simulator's record for one measured row; `engines` overrides the engine specs,
    `clients` the (ramp shares, length spreads, requests per slot) of the clients, per harness
    (harness()), `families` the request overheads per (engine, version family), `harnesses`
    those per harness or (harness, engine, version family) (HARNESS_REQUEST_OVERHEAD_S)."""
    engine = launched(row, release_spec((engines or ENGINES)[row["backend"]], row["backend_version"]))
    family = (row["backend"], version_family(row["backend_version"]))
    overheads = FAMILY_REQUEST_OVERHEAD_S if families is None else families
    own = HARNESS_REQUEST_OVERHEAD_S if harnesses is None else harnesses
    client = harness(row)
    mine = next((own[key] for key in ((client, *family), client) if key in own), None)
    if mine is not None:
        engine = replace(engine, request_overhead_s=mine)
    elif family in overheads:
        engine = replace(engine, request_overhead_s=overheads[family])
    model, hw = served_model(row), served_hardware(row)
    kv = "fp8" if hw.dtype != "bf16" else ""
    users = concurrency(row)
    ramps, spreads, slots = clients or (RAMP_SHARE, LENGTH_SPREAD, REQUESTS_PER_SLOT)
    load = Load(int(row["isl"]), int(row["osl"]), concurrency=users,
                requests=max(users, round(slots[client] * users)),
                ramp_share=ramps[client], length_spread=spreads[client])
    pools = (_pool(row, "prefill_"), _pool(row, "decode_")) if row["mode"] == "disagg" else (_pool(row),)
    engine = memory_raised(engine, model, hw, pools, kv, load.isl + load.osl)
    if row["mode"] == "disagg":
        return serve_disagg(model, hw, engine, load, *pools, kv)
    return serve(model, hw, engine, load, *pools, kv)


def served_hardware(row: dict):
    """The row's GPU preset computing in its GEMM format (and recipe)."""
    return with_dtype(load_hardware(preset_for_system(row["system"])), DTYPES[row["gemm_quant_mode"]],
                      "serving row", "dtype", RECIPES.get(row["gemm_quant_mode"], ""))


def served_model(row: dict):
    """The row's model with its experts as the row served them: the checkpoint's own weight-only
    format where the row names it (CHECKPOINT_EXPERT_FORMATS), else the GEMMs' family (a
    Kimi-K2 FP8 row is not served from Kimi-K2.5's INT4 experts, nor a gpt-oss row naming BF16
    experts from MXFP4 ones)."""
    model = load_model(model_ref(row["model_path"]))
    if row["moe_quant_mode"] in CHECKPOINT_EXPERT_FORMATS or not model.expert_weight_dtype:
        return model
    return replace(model, expert_weight_dtype="")


def skip_reason(row: dict) -> str:
    """Why a row cannot be predicted yet ('' when it can)."""
    if row["backend"] not in ENGINES:
        return f"engine {row['backend']} not modelled"
    if not preset_for_system(row["system"]):
        return f"system {row['system']} has no GPU preset"
    if not concurrency(row):
        # a disaggregated prefill pool queues the client's whole first wave: without the
        # requests in flight its TTFT is anyone's guess
        return "requests in flight not recorded (no silicon_concurrency, no batch_size)"
    gemm_format, moe_format = row["gemm_quant_mode"], row["moe_quant_mode"]
    if gemm_format not in DTYPES:
        return f"GEMM format {gemm_format} not modelled"
    ref = model_ref(row["model_path"])
    if not ref:
        return "no config for the model (../shared/models/<org>--<name>.json or a preset)"
    try:
        model = load_model(ref)
        served_hardware(row)
    except SpecError as err:
        return f"not loadable ({err.field}: {err.allowed})"
    own = CHECKPOINT_EXPERT_FORMATS.get(moe_format)
    if moe_format not in MOE_FORMATS[DTYPES[gemm_format]] and not (own and model.expert_format == own):
        return f"MoE format {moe_format} beside GEMM format {gemm_format or 'bf16'} not modelled"
    return ""


def group_key(row: dict) -> tuple:
    return (row["system"], row["model_path"].split("/")[-1], row["backend"], row["mode"])


def cases(engines: dict | None = None, selected=None, clients: tuple | None = None,
          families: dict | None = None, harnesses: dict | None = None) -> tuple:
    """([(row, predicted ttft_s, predicted tpot_s)], [(row, reason)]) over the measured rows
    (predict's overrides)."""
    done, skipped = [], []
    for row in selected if selected is not None else rows():
        reason = skip_reason(row)
        if reason:
            skipped.append((row, reason))
            continue
        try:
            record = predict(row, engines, clients, families, harnesses)
        except SpecError as exc:  # a layout the simulator does not take yet (e.g. attention-DP beyond tp)
            skipped.append((row, f"layout not modelled: {exc.field} {exc.value}: {exc.allowed}"))
            continue
        if not record["feasible"]:
            skipped.append((row, "KV cache does not fit one request"))
            continue
        done.append((row, record["ttft_s"], record["tpot_s"]))
    return done, skipped


def errors(done: list) -> tuple:
    """(TTFT errors, TPOT errors) in percent, predicted / measured - 1."""
    ttft = [100 * (t / (float(r["silicon_ttft_ms"]) / 1e3) - 1) for r, t, _ in done]
    tpot = [100 * (p / (float(r["silicon_tpot_ms"]) / 1e3) - 1) for r, _, p in done]
    return ttft, tpot


def figures(values: list) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(values), "median_error_pct": ordered[len(ordered) // 2],
            "mean_abs_error_pct": sum(abs(v) for v in values) / len(values),
            "within_20_pct": 100 * sum(abs(v) <= 20 for v in values) / len(values)}


def row_record(row: dict, ttft_s: float = math.nan, tpot_s: float = math.nan, reason: str = "") -> dict:
    """One measured row as `rapid validate --json` lists it: its line in the file, what ran, the
    measured and predicted TTFT and TPOT (seconds) and their errors (%), or why it was not
    simulated."""
    keys = ("tp_size", "pp_size", "attention_dp_size", "moe_ep_size")
    if row["mode"] == "disagg":
        keys = tuple(f"{side}_{key}" for side in ("prefill", "decode")
                     for key in ("num_workers", "tp_size", "attention_dp_size", "moe_ep_size"))
    layout = {key: row_count(row.get(key, ""), 0) for key in keys}  # 0: not given
    record = {"line": row.get(LINE, 0), "id": row.get("id", ""), "gpu": row["system"], "model": row["model_path"],
              "engine": row["backend"], "version": row["backend_version"], "mode": row["mode"],
              "isl": row_count(row["isl"]), "osl": row_count(row["osl"]), "concurrency": concurrency(row),
              "gemm_format": row["gemm_quant_mode"], "moe_format": row["moe_quant_mode"], **layout}
    if reason:
        return {**record, "not_simulated": reason}
    measured_ttft, measured_tpot = float(row["silicon_ttft_ms"]) * 1e-3, float(row["silicon_tpot_ms"]) * 1e-3
    return {**record, "ttft_s": measured_ttft, "predicted_ttft_s": ttft_s,
            "ttft_error_pct": 100 * (ttft_s / measured_ttft - 1), "tpot_s": measured_tpot,
            "predicted_tpot_s": tpot_s, "tpot_error_pct": 100 * (tpot_s / measured_tpot - 1)}


def serving_groups(engines: dict | None = None, path=ROWS) -> tuple:
    """(records per group and overall, skipped rows counted by reason, every row's row_record)
    for `rapid validate`, over the rows of `path` (rows())."""
    done, skipped = cases(engines, rows(path))
    per_row = sorted([row_record(*item) for item in done] + [row_record(row, reason=reason) for row, reason in skipped],
                     key=lambda record: record["line"])
    groups = {}
    for item in done:
        groups.setdefault(group_key(item[0]), []).append(item)
    records = []
    for key, items in sorted(groups.items()) + [(("all", "all", "all", "all"), done)]:
        ttft, tpot = errors(items)
        records.append({"gpu": key[0], "model": key[1], "engine": key[2], "mode": key[3],
                        "ttft": figures(ttft), "tpot": figures(tpot)})
    reasons = {}
    for row, reason in skipped:
        reasons[(row["model_path"], reason)] = reasons.get((row["model_path"], reason), 0) + 1
    return records, [{"model": m, "reason": r, "rows": n} for (m, r), n in sorted(reasons.items())], per_row


# Issue 24's targets over every simulated row: (metric, mean |error| bound %, share within
# +-20 % bound %).
TARGETS = (("ttft", 25.0, 70.0), ("tpot", 15.0, 70.0))


def target_summary(records: list) -> list:
    """Per metric of TARGETS: the overall record's mean |error| and share within +-20 %, each
    against its bound, and whether both are met."""
    overall = next((r for r in records if r["gpu"] == "all"), None)
    if overall is None:
        return []
    out = []
    for metric, mean_bound, within_bound in TARGETS:
        f = overall[metric]
        out.append({"metric": metric, "mean_abs_error_pct": f["mean_abs_error_pct"], "mean_bound_pct": mean_bound,
                    "within_20_pct": f["within_20_pct"], "within_bound_pct": within_bound,
                    "met": f["mean_abs_error_pct"] <= mean_bound and f["within_20_pct"] >= within_bound})
    return out


def with_overheads(iteration_s: dict, request_s: dict) -> dict:
    """The engine specs with the given overheads (seconds per engine name)."""
    return {name: replace(spec, iteration_overhead_s=iteration_s.get(name, spec.iteration_overhead_s),
                          request_overhead_s=request_s.get(name, spec.request_overhead_s))
            for name, spec in ENGINES.items()}


__all__ = ["cases", "engine_spec", "errors", "figures", "math", "serving_groups", "target_summary", "with_overheads"]
