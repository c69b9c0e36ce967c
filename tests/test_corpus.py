"""The published corpus (core.validation.corpus): every row parsed as written, readings derived by hand."""
import csv
import re
from pathlib import Path

import pytest

from core import SpecError
from core.validation import corpus
from core.validation.corpus import PUBLISHED_DIR, SUITE_FILES, SUITES, published_cases, step_time_from_tokens_per_gpu

GIB = 2**30
PRESETS = Path(corpus.__file__).parents[1] / "model" / "presets" / "gpus"
MODEL_KEYS = {"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "activation", "norm",
              "position_embedding", "tied_embeddings", "max_position", "moe"}
LAYOUT_KEYS = {"dp", "tp", "pp", "cp", "ep", "etp", "virtual_stages", "sp", "zero", "distributed_optimizer",
               "micro_batch", "recompute", "overlap_grad_reduce", "overlap_param_gather", "first_stage_layers",
               "last_stage_layers", "master_weights", "optimizer_dtype",
               "expandable_segments", "overlap_p2p_comm"}


def case(case_id: str):
    return next(c for c in published_cases() if c.case_id == case_id)


def csv_rows(suite: str) -> int:
    with open(PUBLISHED_DIR / SUITE_FILES[suite], newline="") as handle:
        return sum(1 for _ in csv.DictReader(handle))


# --- every row, nothing dropped ---------------------------------------------------------

@pytest.mark.parametrize("suite", SUITES)
def test_every_row_of_each_file_becomes_a_case(suite):
    cases = published_cases(suite)
    assert len(cases) == csv_rows(suite)
    assert {c.suite for c in cases} == {suite}


def test_the_corpus_has_238_rows_with_unique_ids():
    cases = published_cases()
    assert len(cases) == 95 + 52 + 26 + 38 + 27 == 238
    assert len({c.case_id for c in cases}) == 238


def test_row_counts_match_the_published_readme():
    # the published README's table: | `training_h100_dense.csv` | 95 | ...
    readme = (PUBLISHED_DIR / "README.md").read_text()
    stated = dict(re.findall(r"\| `([a-z0-9_]+\.csv)` \| (\d+) \|", readme))
    assert {name: int(count) for name, count in stated.items()} == \
           {name: csv_rows(suite) for suite, name in SUITE_FILES.items()}


def test_unusable_rows_carry_their_reason():
    unusable = [c for c in published_cases() if not c.usable]
    assert unusable
    assert all("not modelled" in c.note or "not a measured layout" in c.note for c in unusable)


def test_usable_cases_name_a_preset_and_a_complete_layout():
    for c in published_cases():
        if not c.usable:
            continue
        assert (PRESETS / f"{c.hardware}.yaml").is_file(), c.case_id
        if c.workload["mode"] == "collective":
            continue
        assert set(c.model) == MODEL_KEYS, c.case_id
        assert set(c.layout) == LAYOUT_KEYS, c.case_id
        lay = c.layout
        assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == c.gpus, c.case_id
        if c.workload["mode"] == "train":
            assert c.workload["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0, c.case_id
            assert (lay["tp"] * lay["cp"] * lay["dp"]) % (lay["ep"] * lay["etp"]) == 0, c.case_id


def test_cross_validation_groups_per_suite():
    groups = {suite: sorted({c.source for c in published_cases(suite)}) for suite in SUITES}
    assert groups == {
        "h100_dense": ["dgxc-24.11", "dgxc-25.05", "megatron-bridge", "nemo-24.07", "nemo-long-sequence"],
        "moe": ["moe-parallel-folding"],
        "trtllm": ["trtllm-a100", "trtllm-h100"],
        "collectives": ["nccl-github-issues", "nccl-tests"],
        "memory_h100": ["dgxc-24.11", "llama3-herd", "megatron-bridge", "moe-parallel-folding"],
    }


# --- h100_dense -------------------------------------------------------------------------

def test_tokens_per_gpu_convert_to_step_time_by_the_readme_formula():
    # README: global_batch * seq_len / (tokens_per_s_per_gpu * gpus).
    # NEMO2407-GPT3-175B-128: 256 * 2048 / (716 * 128) = 524288 / 91648 = 5.72067 s
    assert step_time_from_tokens_per_gpu(256, 2048, 716, 128) == pytest.approx(5.72067, rel=1e-5)
    gpt = case("NEMO2407-GPT3-175B-128")
    assert (gpt.metric, gpt.measured) == ("step_time_s", pytest.approx(5.72067, rel=1e-5))
    assert gpt.extra["tokens_per_s_per_gpu"] == 716
    assert gpt.extra["model_flops_per_s_per_gpu"] == 771e12


def test_gpt3_175b_nemo_row():
    gpt = case("NEMO2407-GPT3-175B-128")
    # GPT2BPE 50257 padded to a multiple of 128 * tp 4 = 512: 99 * 512 = 50688
    assert gpt.model["vocab"] == 50688
    assert (gpt.model["activation"], gpt.model["position_embedding"], gpt.model["tied_embeddings"]) == \
           ("gelu", "learned", True)
    # 128 GPUs / (tp 4 * pp 8 * cp 1) = dp 4; "not stated" sp with tp 4 -> on
    lay = gpt.layout
    assert (lay["dp"], lay["tp"], lay["pp"], lay["virtual_stages"], lay["sp"]) == (4, 4, 8, 6, True)
    assert (lay["zero"], lay["distributed_optimizer"], lay["recompute"]) == (1, True, "none")
    assert gpt.precision == {"compute": "fp8", "fp8_params": False, "fp8_recipe": "delayed", "kv_cache": None}


def test_nemo_1_recipes_read_as_apex_distributed_adam():
    def optimizer(case_id):
        lay = case(case_id).layout
        return lay["master_weights"], lay["optimizer_dtype"]
    # FP32 moments over BF16 weights: store_param_remainders
    assert optimizer("NEMO2407-GPT3-175B-128") == optimizer("NEMO-LS-L2_7B-4K-CP") == ("remainders", "fp32")
    assert optimizer("NEMO2407-Nemotron-340B-128") == ("none", "bf16")  # nemotron_340b.yaml: optim.dtype bf16
    sft = case("NEMO2407-FT-SFT-LLAMA2-70B")  # peft/llama/sft.yaml bf16 state; FP8 weights: BF16 masters
    assert optimizer(sft.case_id) == ("bf16", "bf16") and sft.precision["fp8_params"] is True
    assert optimizer("DGXC2411-L405-FP8-32") == ("fp32", "fp32")  # Megatron-Core's distributed optimizer


def test_dgxc_405b_proxy_keeps_the_rows_shape_not_the_released_model():
    proxy = case("DGXC2411-L405-FP8-32")
    # 7 layers, 16 KV groups and GPT2BPE vocab 50257 padded to 128 * tp 8 = 1024: 50 * 1024 = 51200
    assert (proxy.model["layers"], proxy.model["kv_heads"], proxy.model["vocab"]) == (7, 16, 51200)
    assert (proxy.layout["dp"], proxy.layout["cp"], proxy.layout["virtual_stages"]) == (2, 2, 1)  # 32/(8*1*2)
    assert proxy.precision["fp8_params"] is True
    assert (proxy.metric, proxy.measured) == ("step_time_s", 5.80)
    assert proxy.workload == {"mode": "train", "global_batch": 126, "seq": 8192, "fine_tuning": False}
    assert proxy.extra["mfu"] == pytest.approx(0.4477)


def test_missing_shape_cells_come_from_the_known_shapes():
    llama13 = case("NEMO2407-LLAMA2-13B-16")
    # Llama 2 13B: 40 layers, hidden 5120, 40 heads (MHA), FFN 13824, vocab 32000 (already a multiple of 128)
    assert {k: llama13.model[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")} == \
           {"layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "ffn_hidden": 13824, "vocab": 32000}
    assert "taken from the published llama2-13b shape" in llama13.note
    nemotron = case("NEMO2407-Nemotron-22B-64")
    # NeMo launcher nemotron_22b.yaml: 40 layers, 6144 hidden, 48 heads, FFN 24576; 256000 / (128 * 2) = 1000
    assert (nemotron.model["layers"], nemotron.model["ffn_hidden"], nemotron.model["vocab"]) == (40, 24576, 256000)
    assert nemotron.model["activation"] == "squared_relu"


def test_megatron_bridge_fsdp_and_current_scaling():
    mb = case("MB25.11-LLAMA3_8B-8-FP8-CS")
    assert (mb.layout["zero"], mb.layout["dp"], mb.precision["fp8_recipe"]) == (3, 8, "current")
    # 128 * 8192 / (14451 * 8) = 9.06899 s
    assert mb.measured == pytest.approx(128 * 8192 / (14451 * 8))
    bridge_405b = case("MB26.06-LLAMA3.1_405B-1024-FP8")
    assert "do not divide" in bridge_405b.note  # 126 layers over pp 8 x vp 8
    assert bridge_405b.layout["first_stage_layers"] is None  # the framework's uneven split


def test_long_sequence_rows_keep_tflops_per_gpu():
    longest = case("NEMO-LS-L2_7B-1024K-CP")
    assert longest.workload["seq"] == 1048576  # 1024K with K = 1024
    assert (longest.layout["tp"], longest.layout["cp"], longest.layout["dp"]) == (8, 32, 4)
    assert (longest.metric, longest.measured) == ("model_flops_per_s_per_gpu", 536e12)


def test_lora_and_jax_rows_are_kept_but_not_usable():
    assert not case("NEMO2407-FT-LoRA-LLAMA2-7B").usable
    assert "LoRA" in case("NEMO2407-FT-LoRA-LLAMA2-7B").note
    maxtext = case("DGXC2411-MaxText-L2_70B-FP8-512")
    assert not maxtext.usable
    assert (maxtext.layout["zero"], maxtext.extra["fsdp_group"]) == (3, 128)
    assert case("NEMO2407-FT-SFT-LLAMA2-7B").usable


# --- moe --------------------------------------------------------------------------------

def test_nemo_sft_rows_take_the_launchers_h100_sft_layout():
    # examples/peft/llama/h100/{7b_1node,13b_1node,70b_2node}.sh: vp 10 and 20 on pp 4, FP8 weights
    sft = {size: case(f"NEMO2407-FT-SFT-LLAMA2-{size}") for size in ("7B", "13B", "70B")}
    assert [sft[s].layout["virtual_stages"] for s in ("7B", "13B", "70B")] == [1, 10, 20]
    assert all(c.precision["fp8_params"] for c in sft.values())
    assert (sft["13B"].layout["pp"], sft["13B"].layout["dp"]) == (4, 2)  # 8 / (1 * 4)
    assert not case("NEMO2407-LLAMA2-13B-16").precision["fp8_params"]  # pretraining rows as they read


def test_a_row_from_an_sft_table_is_fine_tuning():
    # Megatron-Bridge's archive lists it under '26.06 NeMo Container' > 'SFT Performance'
    assert case("MB26.06-LLAMA3_70B-32-FP8").workload["fine_tuning"]
    assert case("NEMO2407-FT-SFT-LLAMA2-70B").workload["fine_tuning"]
    assert not case("MB26.04-LLAMA3_70B-64-FP8").workload["fine_tuning"]


def test_qwen2_folded_row():
    qwen = case("PF-T3-qwen2_57b-fold")
    assert (qwen.metric, qwen.measured) == ("mfu", pytest.approx(0.39))
    assert qwen.model["moe"] == {"experts": 64, "top_k": 8, "expert_ffn_hidden": 2560, "shared_experts": 1,
                                 "shared_expert_ffn_hidden": 20480, "capacity_factor": 1.0}
    # 151936 padded to 128 * tp 2 = 256: 594 * 256 = 152064
    assert qwen.model["vocab"] == 152064
    # 64 GPUs / (tp 2 * pp 4) = dp 8; expert dp = tp*cp*dp / (ep*etp) = 16 / 4 = 4
    assert (qwen.layout["dp"], qwen.layout["ep"], qwen.layout["etp"], qwen.extra["expert_dp"]) == (8, 4, 1, 4)


def test_blank_etp_reads_as_tp_without_folding_and_one_with_it():
    assert case("PF-T3-mixtral_8x22b-mcore").layout["etp"] == 2  # tp 2
    folded = case("PF-T4-llama3_8x70b-fold-128")
    # dp 1, tp 8, ep 8: only etp 1 fits in tp*cp*dp = 8
    assert (folded.layout["dp"], folded.layout["etp"], folded.extra["expert_dp"]) == (1, 1, 1)


def test_fp8_moe_rows_keep_model_tflops():
    fp8 = case("PF-T2-fold-FP8")
    assert (fp8.metric, fp8.measured) == ("model_flops_per_s_per_gpu", pytest.approx(631.7e12))
    assert fp8.precision["compute"] == "fp8"


# --- trtllm -----------------------------------------------------------------------------

def test_a100_throughput_is_per_gpu():
    row = case("TRTLLM061-A100-LLaMA70B-b1280-tp4-128-128")
    # 670 tok/s per GPU x 4 GPUs = 2680 tok/s; 1280 requests x 128 tokens / 2680 = 61.134 s per batch
    assert row.extra["throughput_tokens_per_s"] == 2680
    assert (row.metric, row.measured) == ("request_s", pytest.approx(1280 * 128 / 2680))
    assert row.workload == {"mode": "infer", "batch": 1280, "prompt": 128, "decode": 128}
    assert (row.hardware, row.precision["kv_cache"]) == ("a100-sxm4-80gb", "fp16")


def test_h100_throughput_is_over_the_tp_group():
    row = case("TRTLLM05-H100-LLaMA70B-b64-tp4-128-128")
    # 64 x 128 / 3317 = 2.4697 s
    assert row.measured == pytest.approx(64 * 128 / 3317)
    assert (row.precision["compute"], row.precision["kv_cache"], row.layout["tp"]) == ("fp8", "fp8", 4)


def test_gptj_shape_filled_and_not_padded_for_inference():
    gptj = case("TRTLLM061-A100-GPT-J6B-b512-tp1-128-128")
    assert (gptj.model["ffn_hidden"], gptj.model["vocab"], gptj.model["activation"]) == (16384, 50400, "gelu")


# --- collectives ------------------------------------------------------------------------

def test_nccl_sample_rows_are_out_of_place_times():
    one_gib = case("NCCL-DGXH100-1node-AR-1073741824")
    assert (one_gib.metric, one_gib.measured) == ("collective_time_s", pytest.approx(4029.4e-6))
    assert one_gib.workload == {"mode": "collective", "op": "all_reduce", "size_bytes": 2**30, "ranks": 8,
                                "nodes": 1}
    assert one_gib.extra["busbw_bytes_per_s_oop"] == pytest.approx(466.33e9)
    assert one_gib.extra["time_s_ip"] == pytest.approx(4016.4e-6)
    sample = [c for c in published_cases("collectives") if c.source == "nccl-tests"]
    assert len(sample) == 32 and all(c.usable for c in sample)


def test_reported_bandwidths_are_kept_but_not_usable():
    weak = [c for c in published_cases("collectives") if c.source == "nccl-github-issues"]
    assert len(weak) == 6 and not any(c.usable for c in weak)
    assert case("NCCL-A100-3node").measured == pytest.approx(84.8e9)  # "avg 84.8, peak ~96" GB/s
    assert case("NCCL-exp-NDR-perNIC").workload["nodes"] == 2  # ">=2"


# --- memory_h100 ------------------------------------------------------------------------

def test_peak_memory_gb_is_decimal_and_gib_binary():
    pp8 = case("MEM-L70B-SFT-PP8")
    assert (pp8.metric, pp8.measured) == ("first_iteration_peak_bytes", pytest.approx(53.2e9))  # 53.2 GB
    assert (pp8.layout["dp"], pp8.layout["pp"], pp8.layout["virtual_stages"]) == (1, 8, 5)  # 32 / (4 * 8)
    vpp = case("MEM-VPP-note")
    assert (vpp.measured, vpp.layout["virtual_stages"], vpp.workload["global_batch"]) == \
           (pytest.approx(60.2e9), 10, 32)
    assert case("MEM-Q30B-canon").measured == pytest.approx(62.166 * GIB)  # the one row in GiB


def test_memory_verdicts():
    assert case("MEM-L70B-SFT-base-expseg").measured == "fits"
    oom = case("OOM-PF-Llama3-8x70B-TPEPDP")
    assert (oom.usable, oom.metric, oom.measured) == (True, "memory_verdict", "oom")
    assert (oom.layout["dp"], oom.layout["ep"], oom.model["moe"]["experts"]) == (32, 8, 8)  # 256 / 8
    llama = case("FIT-L3-405B-8K-noAC")
    assert (llama.measured, llama.gpus, llama.layout["dp"], llama.layout["zero"]) == ("fits", 16384, 128, 2)
    assert (llama.layout["first_stage_layers"], llama.layout["last_stage_layers"]) == (7, 7)
    assert llama.model["vocab"] == 128256  # not Megatron: no padding


def test_models_we_cannot_express_are_not_usable():
    for case_id in ("MEM-Moonlight16B-none", "MEM-NemotronNano-moe", "MEM-Q30B-canon", "MINFIT-dgxc-405B"):
        assert not case(case_id).usable, case_id


# --- bad input --------------------------------------------------------------------------

def test_an_unknown_suite_is_one_clear_line():
    with pytest.raises(SpecError, match="field 'suite' = nope: one of h100_dense, moe"):
        published_cases("nope")


def test_a_row_that_contradicts_itself_names_file_row_and_field(monkeypatch):
    with open(PUBLISHED_DIR / "training_h100_dense.csv", newline="") as handle:
        row = dict(next(csv.DictReader(handle)))
    row["num_gpus"], row["tp"] = "60", "8"  # 60 GPUs cannot hold tp 8 x pp 1 x cp 1 replicas
    monkeypatch.setattr(corpus, "_read", lambda name: [row])
    with pytest.raises(SpecError) as err:
        published_cases("h100_dense")
    assert str(err.value) == ("training_h100_dense.csv row NEMO2407-GPT3-5B-64: field 'num_gpus' = 60: "
                              "a multiple of tp*pp*cp = 8")


def test_the_validation_readme_counts_agree_with_the_parser():
    # core/validation/data/README.md: | `h100_dense` | `training_h100_dense.csv` | 95 | 77 | ...
    readme = (PUBLISHED_DIR.parent / "README.md").read_text()
    table = re.findall(r"\| `([a-z0-9_]+)` \| `[a-z0-9_]+\.csv` \| (\d+) \| (\d+) \|", readme)
    assert {suite: (int(rows), int(usable)) for suite, rows, usable in table} == \
           {suite: (len(published_cases(suite)), sum(c.usable for c in published_cases(suite))) for suite in SUITES}
