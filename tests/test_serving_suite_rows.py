"""The serving suite reads any CSV of measured runs in AIConfigurator's silicon-sample format:
each row's system, model and formats resolved, or counted as not simulated with the reason."""
import csv
import json

import pytest

from core.errors import SpecError
from core.model.loader import load_hardware, load_model, with_dtype
from core.serving.engines import engine_spec, release_spec
from core.serving.service import Pool
from core.validation import serving
from core.validation.systems import preset_for_system

# the visible measured rows and model configs beside the repository (../shared)
pytestmark = pytest.mark.skipif(not serving.ROWS.is_file(), reason="no ../shared/validation/serving")
ROW = next((r for r in serving.rows() if r["backend"] == "vllm" and r["mode"] == "agg"
            and r["model_path"] == "meta-llama/Llama-3.1-70B" and r["system"] == "h200_sxm"),
           {}) if serving.ROWS.is_file() else {}


def test_each_aiconfigurator_system_has_its_preset_with_or_without_the_form_factor():
    assert preset_for_system("h200_sxm") == "h200-sxm-141gb"
    assert preset_for_system("gb200") == preset_for_system("gb200_sxm") == "gb200-nvl72"
    assert preset_for_system("B300") == "b300-sxm-288gb"
    assert preset_for_system("l40s") == ""


@pytest.mark.parametrize("name, ref", [
    ("meta-llama/Llama-3.1-70B", "llama3.1-70b"),  # MODELS: its shared config is under another name
    ("meta-llama/Llama-3.1-405B", "llama3.1-405b"),  # a preset of that name
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),  # a tuning suffix, then the preset
    ("Qwen/Qwen3-14B-FP8", "qwen3-14b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"),  # the same architecture
    ("acme/Unknown-7B", ""),
    ("deepseek-ai/DeepSeek-V3.2", ""),  # sparse attention: not V3's architecture
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", ""),
])
def test_a_rows_model_resolves_to_a_preset_or_nothing(name, ref):
    assert serving.model_ref(name) == ref


def test_a_rows_model_resolves_to_its_shared_config_whatever_its_case_or_format_suffix():
    assert serving.model_ref("Qwen/Qwen3-235B-A22B-FP8") == str(serving.MODELS_DIR / "Qwen--Qwen3-235B-A22B.json")
    assert serving.model_ref("OpenAI/GPT-OSS-120B") == str(serving.MODELS_DIR / "openai--gpt-oss-120b.json")
    deepseek = str(serving.MODELS_DIR / "deepseek-ai--DeepSeek-V3.json")
    assert serving.model_ref("deepseek-ai/DeepSeek-V3-0324") == deepseek  # a release date
    assert serving.model_ref("deepseek-ai/DeepSeek-R1-0528") == serving.model_ref("nvidia/DeepSeek-R1-FP4") == deepseek


@pytest.mark.parametrize("change, reason", [
    ({"system": "l40s"}, "system l40s has no GPU preset"),
    ({"model_path": "acme/Unknown-7B"}, "no config for the model"),
    ({"gemm_quant_mode": "int8_wo"}, "GEMM format int8_wo not modelled"),
    ({"gemm_quant_mode": "fp8", "moe_quant_mode": "w4afp8"}, "MoE format w4afp8 beside GEMM format fp8"),
    ({"gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}, "no nvfp4 peak"),  # H200: no FP4 tensor cores
    ({"backend": "lmdeploy"}, "engine lmdeploy not modelled"),
])
def test_a_row_the_simulator_cannot_take_is_counted_with_its_reason(change, reason):
    assert reason in serving.skip_reason({**ROW, **change})


def test_gpt_oss_rows_serve_their_mxfp4_experts_beside_bf16_layers():
    row = {**ROW, "model_path": "openai/gpt-oss-120b", "gemm_quant_mode": "", "moe_quant_mode": "w4a16_mxfp4"}
    assert serving.skip_reason(row) == ""
    assert serving.predict(row)["feasible"]
    # MXFP4 named for a model whose experts are not MXFP4 is not what was served
    assert "MoE format w4a16_mxfp4" in serving.skip_reason({**row, "model_path": "Qwen/Qwen3-30B-A3B"})


def test_a_row_serves_its_experts_in_the_format_it_names_not_the_checkpoints():
    kimi = {**ROW, "model_path": "moonshotai/Kimi-K2-Instruct", "gemm_quant_mode": "fp8_block"}
    assert serving.served_model({**kimi, "moe_quant_mode": "fp8_block"}).expert_weight_dtype == ""
    assert serving.served_model({**kimi, "moe_quant_mode": "int4_wo"}).expert_weight_dtype == "int4_group32"


@pytest.mark.parametrize("change, field", [
    ({"isl": "abc"}, "isl"), ({"silicon_ttft_ms": ""}, "silicon_ttft_ms"), ({"silicon_tpot_ms": "0"}, "silicon_tpot_ms"),
    ({"tp_size": "x"}, "tp_size"), ({"mode": "static"}, "mode"),
    ({"silicon_data_source": "silicon_concurrency=abc"}, "silicon_data_source"),
])
def test_a_serving_csv_with_a_value_the_suite_cannot_read_is_refused_naming_line_and_field(tmp_path, change, field):
    path = _write(tmp_path / "bad.csv", [ROW, {**ROW, **change}])
    with pytest.raises(SpecError) as err:
        serving.rows(path)
    assert (err.value.source, err.value.field) == (f"{path}: line 3", field)


def test_a_serving_csv_saved_with_a_byte_order_mark_reads_as_any_other(tmp_path):
    path = _write(tmp_path / "plain.csv", [ROW])
    marked = tmp_path / "marked.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert serving.rows(marked) == serving.rows(path)


def _write(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_rapid_validate_runs_the_serving_suite_over_a_csv_of_ones_own(tmp_path, capsys):
    from sweep.cli import main
    path = _write(tmp_path / "mine.csv", [ROW, {**ROW, "system": "l40s"}])
    assert main(["validate", "--serving-rows", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    overall = next(r for r in report["serving"] if r["gpu"] == "all")
    assert overall["ttft"]["n"] == 1 and report["cases"] == []  # the serving suite alone
    assert report["serving_skipped"] == [{"model": ROW["model_path"], "reason": "system l40s has no GPU preset",
                                          "rows": 1}]
    simulated, skipped = report["serving_rows"]  # in file order, the header being line 1
    assert (simulated["line"], simulated["id"], simulated["gpu"]) == (2, ROW["id"], "h200_sxm")
    assert (simulated["tp_size"], simulated["isl"], simulated["moe_format"]) == (
        int(float(ROW["tp_size"])), int(ROW["isl"]), ROW["moe_quant_mode"])
    assert simulated["ttft_s"] == pytest.approx(float(ROW["silicon_ttft_ms"]) / 1e3)
    assert simulated["predicted_ttft_s"] == pytest.approx(serving.predict(ROW)["ttft_s"])
    assert overall["ttft"]["median_error_pct"] == pytest.approx(simulated["ttft_error_pct"])
    assert skipped["line"] == 3 and skipped["not_simulated"] == "system l40s has no GPU preset"
    assert "predicted_ttft_s" not in skipped


def test_a_serving_csv_without_the_columns_is_refused_naming_them(tmp_path):
    path = _write(tmp_path / "short.csv", [{"backend": "vllm", "isl": "1024"}])
    with pytest.raises(SpecError) as err:
        serving.rows(path)
    assert err.value.source == str(path) and "silicon_ttft_ms" in err.value.value
    with pytest.raises(SpecError, match="cannot be read"):
        serving.rows(tmp_path / "absent.csv")


def test_rapid_validate_refuses_a_serving_csv_it_cannot_read_in_one_line(tmp_path, capsys):
    from sweep.cli import main
    try:
        code = main(["validate", "--serving-rows", str(tmp_path / "absent.csv")])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "absent.csv" in err and "cannot be read" in err


def test_a_layout_sglangs_default_memory_cannot_hold_ran_with_the_fraction_raised_by_hand():
    """DeepSeek-V3 in FP8 on four B200s: SGLang's default (0.856 of 180 GiB) holds less than its
    weights, so the campaign raised it; the suite takes the fraction leaving the 10 GiB floor.
    Llama 3.1 8B fits under the default, which stays."""
    hw = with_dtype(load_hardware("b200-sxm-180gb"), "fp8", "test", "dtype")
    sglang = release_spec(engine_spec("sglang"), "0.5.9")
    raised = serving.memory_raised(sglang, load_model("deepseek-v3"), hw, (Pool(tp=4),), "fp8", 9216)
    assert raised.kv_memory_fraction == round((180 - 10) / 180, 3)
    assert serving.memory_raised(sglang, load_model("llama3.1-8b"), hw, (Pool(),), "fp8", 9216) is sglang
