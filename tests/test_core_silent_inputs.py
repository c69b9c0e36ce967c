"""Spec inputs that used to be costed as something else without a word: each is now
modelled or refused in one line naming the field."""
import json
import re
from pathlib import Path

import pytest
import yaml

from core import SpecError
from core.model import loader
from core.model.graph import LayerShape, attended_keys, build_layer
from core.model.loader import PRESET_DIR, load_hardware, load_model, with_dtype
from core.model.memory import inference_memory
from core.model.ops import causal_fraction
from core.model.specs import Parallelism
from sweep.study.loader import load_study
from sweep.study.space import parse_space

H100 = yaml.safe_load((PRESET_DIR / "gpus" / "h100-sxm5-80gb.yaml").read_text())
MISTRAL = {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
           "max_position_embeddings": 32768, "sliding_window": 4096}
QWEN2_MOE = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
             "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60,
             "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 8192,
             "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21}


def write(tmp_path, data, name="spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return path


def refusal(load, path, overrides=None) -> str:
    with pytest.raises(SpecError) as err:
        load(path, overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


def hardware(**changes) -> dict:
    data = yaml.safe_load(yaml.safe_dump(H100))
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


# hardware: calibration, units, dtypes

def test_a_hardware_file_without_calibration_is_refused(tmp_path):
    message = refusal(load_hardware, write(tmp_path, hardware(calibration=None)))
    assert "field 'calibration' = <missing>" in message and "inherits" in message


def test_calibration_inherits_a_gpu_family_and_own_factors_win(tmp_path):
    hw = load_hardware(write(tmp_path, hardware(name="b-like", calibration={"inherits": "h100-sxm5-80gb"})))
    assert hw.calibration == load_hardware("h100-sxm5-80gb").calibration
    own = load_hardware(write(tmp_path, hardware(calibration={"inherits": "a100-sxm4-80gb", "compute_efficiency": 0.5})))
    assert own.calibration.compute_efficiency == 0.5
    assert own.calibration.memory_efficiency == load_hardware("a100-sxm4-80gb").calibration.memory_efficiency == 0.7


def test_an_empty_calibration_states_the_datasheet_alone(tmp_path):
    assert load_hardware(write(tmp_path, hardware(calibration={}))).calibration.compute_efficiency == 1.0


def test_calibration_inherits_only_a_gpu_preset(tmp_path):
    message = refusal(load_hardware, write(tmp_path, hardware(calibration={"inherits": "b200"})))
    assert "'calibration.inherits' = b200" in message and "h100-sxm5-80gb" in message


@pytest.mark.parametrize("value", [3350, 3350.0, "3350", "3.35e12"])
def test_a_bandwidth_without_a_unit_is_refused(tmp_path, value):
    data = hardware()
    data["gpu"]["hbm"]["bandwidth"] = value
    message = refusal(load_hardware, write(tmp_path, data))
    assert "'gpu.hbm.bandwidth'" in message and "a unit is needed" in message and "GB/s" in message


def test_the_gemm_librarys_stream_k_switch_is_true_or_false(tmp_path):
    data = hardware()
    data["gpu"]["stream_k"] = True
    assert load_hardware(write(tmp_path, data)).gpu.stream_k
    data["gpu"]["stream_k"] = "yes"
    message = refusal(load_hardware, write(tmp_path, data))
    assert "'gpu.stream_k' = yes" in message and "expected true or false" in message


def test_the_token_tile_step_is_a_whole_number_of_rows(tmp_path):
    data = hardware()
    data["gpu"]["token_tile_step"] = 8
    assert load_hardware(write(tmp_path, data)).gpu.token_tile_step == 8
    for bad in (-8, 8.5, "8"):
        data["gpu"]["token_tile_step"] = bad
        message = refusal(load_hardware, write(tmp_path, data))
        assert f"'gpu.token_tile_step' = {bad}" in message and "expected an integer >= 0" in message


def test_the_wide_tile_step_is_a_divisor_of_128_below_it(tmp_path):
    data = hardware()
    for good in (16, 64, 1):
        data["gpu"]["wide_tile_step"] = good
        assert load_hardware(write(tmp_path, data)).gpu.wide_tile_step == good
    divisor = "expected 0 or a divisor of 128 below it"
    for bad, allowed in ((-16, "expected an integer >= 0"), (16.5, "expected an integer >= 0"),
                         (128, divisor), (48, divisor), (256, divisor)):
        data["gpu"]["wide_tile_step"] = bad
        message = refusal(load_hardware, write(tmp_path, data))
        assert f"'gpu.wide_tile_step' = {bad}" in message and allowed in message


def test_every_quantity_needs_its_unit_but_zero(tmp_path):
    data = hardware()
    data["network"][0]["latency"] = 5
    assert "'network.0.latency' = 5: a unit is needed" in refusal(load_hardware, write(tmp_path, data))
    data = hardware()
    data["gpu"]["peak_flops"]["bf16"] = 989.5
    assert "'gpu.peak_flops.bf16'" in refusal(load_hardware, write(tmp_path, data))
    data = hardware()
    data["calibration"]["kernel_overhead"] = 0
    assert load_hardware(write(tmp_path, data)).calibration.kernel_overhead_s == 0


def test_an_override_needs_a_unit_whether_written_as_an_integer_or_a_float():
    assert load_hardware("h100-sxm5-80gb", {"gpu.hbm.bandwidth": "2e12 B/s"}).gpu.hbm.bandwidth_bps == 2.0e12
    for plain in (3350, 3350.0):
        assert "a unit is needed" in refusal(load_hardware, "h100-sxm5-80gb", {"gpu.hbm.bandwidth": plain})


def test_a_range_drawn_in_a_quantity_says_its_unit_and_plain_listed_numbers_are_refused(write_study):
    knob = parse_space({"hardware.gpu.hbm.bandwidth": {"low": "2 TB/s", "high": "4 TB/s"}}, "s.yaml", "train", 8).knobs[-1]
    assert knob.range.unit == "B/s" and knob.spec_value(2.5e12) == "2500000000000.0 B/s"
    assert load_hardware("h100-sxm5-80gb", {"gpu.hbm.bandwidth": knob.spec_value(2.5e12)}).gpu.hbm.bandwidth_bps == 2.5e12
    with pytest.raises(SpecError, match="a unit is needed"):
        load_study(write_study(space={"hardware.gpu.hbm.bandwidth": [3350.0]}))


def test_a_dtype_without_a_peak_names_the_dtypes_the_gpu_has(tmp_path):
    a100 = load_hardware("a100-sxm4-80gb")
    with pytest.raises(SpecError) as err:
        with_dtype(a100, "fp8", "command line", "--dtype")
    assert str(err.value) == ("command line: field '--dtype' = fp8: A100-SXM4-80GB has no fp8 peak in "
                              "gpu.peak_flops; expected one it has: bf16, fp16")
    message = refusal(load_hardware, "a100-sxm4-80gb", {"dtype": "fp8"})
    assert "field 'dtype' = fp8" in message and "fp32, tf32, bf16, fp16" in message


# model YAML defaults

def test_model_yaml_defaults_are_the_spec_defaults(tmp_path):
    model = load_model(write(tmp_path, {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100}))
    assert (model.activation, model.norm) == ("swiglu", "rmsnorm")


def test_a_preset_without_name_is_named_after_the_preset():
    assert loader._default_name("preset llama3.1-70b") == "llama3.1-70b"
    assert loader._default_name("/tmp/my.model.yaml") == "my.model"


def test_an_unknown_moe_key_lists_capacity_factor(tmp_path):
    data = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
            "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 128, "capcity_factor": 1.0}}
    message = refusal(load_model, write(tmp_path, data))
    assert "'moe.capcity_factor'" in message and "capacity_factor" in message.split("allowed:")[1]


# Hugging Face configs

def test_mistral_sliding_window_bounds_attention_and_the_kv_cache(tmp_path):
    windowed = load_model(write(tmp_path, MISTRAL, "config.json"))
    full = load_model(write(tmp_path, {**MISTRAL, "sliding_window": None}, "config.json"))
    assert (windowed.window, full.window) == (4096, 0)
    assert windowed.total_params() == full.total_params() == 7_241_728_000
    # a cache of 8192 + 8192 tokens keeps the last 4096 of them: K and V of 8 heads x 128, 32 layers, 2 bytes
    h100 = load_hardware("h100-sxm5-80gb")
    one = [inference_memory(m, h100, Parallelism(), 1, 8192, 8192, 2).kv_cache_bytes for m in (windowed, full)]
    assert one == [2 * 4096 * 8 * 128 * 32 * 2, 2 * 16384 * 8 * 128 * 32 * 2]
    # a query past the first window sees 4096 keys: the 32k-token layer's attention costs far less
    shape = LayerShape(1, 32768, 32768, 1, False, 1, 1)
    attention = [next(op for op in build_layer(m, h100, shape).forward if op.name == "attention") for m in (windowed, full)]
    assert attention[0].flops == pytest.approx(attention[1].flops * attended_keys(32768, 4096) / (32768 * causal_fraction(32768)))


def test_a_window_no_sequence_reaches_costs_as_full_attention(tmp_path):
    spans = load_model(write(tmp_path, {**MISTRAL, "max_position_embeddings": 4096}, "config.json"))
    none = load_model(write(tmp_path, {**MISTRAL, "sliding_window": None}, "config.json"))
    assert spans.total_params() == none.total_params() == 7_241_728_000
    h100 = load_hardware("h100-sxm5-80gb")
    shape = LayerShape(1, 4096, 4096, 1, False, 1, 1)
    assert build_layer(spans, h100, shape) == build_layer(none, h100, shape)


def test_qwen_sliding_layers_slide_from_max_window_layers(tmp_path):
    dense = {k: v for k, v in QWEN2_MOE.items() if k not in ("num_experts", "num_experts_per_tok",
             "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers")}
    qwen2 = load_model(write(tmp_path, {**dense, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096},
                             "config.json"))
    assert [kind.window for kind in qwen2.layer_kinds] == [0] * 21 + [4096] * 3
    assert load_model(write(tmp_path, {**dense, "model_type": "qwen2", "use_sliding_window": True,
                                       "sliding_window": 4096, "max_window_layers": 24}, "config.json")).uniform
    kinds = {**dense, "model_type": "qwen2", "sliding_window": 4096, "layer_types": ["full_attention"] * 23 + ["sliding_attention"]}
    assert [kind.window for kind in load_model(write(tmp_path, kinds, "config.json")).layer_kinds] == [0] * 23 + [4096]
    bad = {**kinds, "layer_types": ["full_attention"] * 23 + ["chunked_attention"]}
    assert "field 'layer_types'" in refusal(load_model, write(tmp_path, bad, "config.json"))


def test_qwen2_moe_shared_expert_is_modelled_as_in_yaml(tmp_path):
    hf = load_model(write(tmp_path, QWEN2_MOE, "config.json"))
    assert hf.moe.shared_expert_ffn_hidden == 5632
    yaml_model = load_model(write(tmp_path, {"layers": 24, "hidden": 2048, "heads": 16, "ffn_hidden": 5632,
                                             "vocab": 151936, "moe": {"experts": 60, "top_k": 4, "expert_ffn_hidden": 1408,
                                                                      "shared_expert_ffn_hidden": 5632}}))
    assert hf.total_params() == yaml_model.total_params()
    assert hf.active_params() - hf.layers * hf.shared_expert_params() == \
        load_model(write(tmp_path, {**QWEN2_MOE, "shared_expert_intermediate_size": 0}, "config.json")).active_params()


def test_qwen_moe_dense_layers_are_modelled(tmp_path):
    model = load_model(write(tmp_path, {**QWEN2_MOE, "decoder_sparse_step": 2, "mlp_only_layers": [0, 1, 2, 3]},
                             "config.json"))
    moe_layers = [i for i, kind in enumerate(model.layer_kinds) if kind.ffn == "moe"]
    assert moe_layers == [5, 7, 9, 11, 13, 15, 17, 19, 21, 23]  # (i + 1) % 2 == 0, not listed
    all_moe = load_model(write(tmp_path, QWEN2_MOE, "config.json"))
    dense_mlp = 3 * 2048 * 5632
    assert model.total_params() == all_moe.total_params() - 14 * (all_moe.mlp_params() - dense_mlp)


def test_qwen3_moe_has_no_shared_expert_key(tmp_path):
    data = {**QWEN2_MOE, "model_type": "qwen3_moe"}
    message = refusal(load_model, write(tmp_path, data, "config.json"))
    assert "field 'shared_expert_intermediate_size' = 5632: not a qwen3_moe key" in message


@pytest.mark.parametrize("key, value", [("quantization_config", {"quant_method": "fp8"}), ("attention_bias", True),
                                        ("attention_dropout", 0.1), ("num_nextn_predict_layers", 1)])
def test_a_key_that_is_neither_costed_nor_costless_is_refused_by_name(tmp_path, key, value):
    data = {**{k: v for k, v in MISTRAL.items() if k != "sliding_window"}, "model_type": "llama", key: value}
    assert f"field '{key}'" in refusal(load_model, write(tmp_path, data, "config.json"))


def test_the_published_configs_of_modelled_families_load():
    for name, params in (("Qwen--Qwen3-235B-A22B.json", 235_093_606_400), ("Qwen--Qwen3-32B.json", 32_762_101_760),
                         ("meta-llama--Meta-Llama-3.1-70B.json", 70_553_698_304),
                         ("mistralai--Mixtral-8x7B-v0.1.json", 46_702_788_608)):
        path = Path("/work/shared/models") / name
        if path.is_file():
            assert load_model(path).total_params() == params


def test_model_page_names_every_hugging_face_key():
    text = (Path(__file__).resolve().parent.parent / "docs" / "model.md").read_text()
    keys = {k for family in loader.HF_COSTED for k in loader.HF_COSTED[family] + loader.HF_COSTLESS[family]}
    assert sorted(k for k in keys if f"`{k}`" not in text) == []
    assert not re.search(r"not modelled yet and are refused", text)
