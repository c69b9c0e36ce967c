import json

import pytest

import core
from core import SpecError


def test_every_preset_loads():
    presets = core.list_presets()
    assert len(presets["models"]) >= 12 and len(presets["gpus"]) >= 4
    for name in presets["models"]:
        core.load_model(name)
    for name in presets["gpus"]:
        core.load_hardware(name)


def test_llama2_7b_parameter_count_matches_the_published_6_74b():
    model = core.load_model("llama2-7b")
    # 32 layers of 4*4096^2 attention + 3*4096*11008 MLP + two RMSNorms, embeddings and LM head.
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert model.layer_params() == per_layer
    assert model.total_params() == 32 * per_layer + 2 * 32000 * 4096
    assert model.total_params() == pytest.approx(6.74e9, rel=0.01)


def test_mixtral_counts_all_experts_but_activates_two():
    model = core.load_model("mixtral-8x7b")
    assert model.total_params() == pytest.approx(46.7e9, rel=0.01)
    assert model.active_params() == pytest.approx(12.9e9, rel=0.01)


def test_huggingface_config_json(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
              "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert core.load_model(path).layer_params() == core.load_model("llama3.1-8b").layer_params()
    path.write_text(json.dumps({**config, "hidden_act": "gelu"}))  # still act(gate) * up: three matrices
    assert core.load_model(path).layer_params() == core.load_model("llama3.1-8b").layer_params()


def test_model_yaml_defaults(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\n")
    model = core.load_model(path)
    assert (model.kv_heads, model.ffn_hidden, model.activation, model.norm) == (4, 256, "swiglu", "rmsnorm")


def test_hardware_overrides_by_dotted_path():
    base = core.load_hardware("a100-sxm4-80gb")
    slower = core.load_hardware("a100-sxm4-80gb", {"gpu.hbm.bandwidth": "1488 GB/s",
                                                   "network.ib.link_bandwidth": "100 Gb/s"})
    assert slower.gpu.hbm.bandwidth_bps == 1488e9
    assert slower.network[1].link_bandwidth_bps == 12.5e9
    assert base.gpu.hbm.bandwidth_bps == 2039e9


def test_auto_sized_outer_dimension():
    dims = core.load_hardware("a100-sxm4-80gb").dims_for(64)
    assert [(d.name, d.size) for d in dims] == [("nvlink", 8), ("ib", 8)]


def test_override_of_unknown_field_is_named():
    with pytest.raises(SpecError, match="gpu.hbm.speed"):
        core.load_hardware("a100-sxm4-80gb", {"gpu.hbm.speed": "1 TB/s"})
