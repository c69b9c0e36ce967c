"""Layers that differ, written in our model YAML: `layer_kinds` runs (repeated as a pattern
to fill the layers), a `recurrent` block for linear-attention and Mamba layers, and
`mtp_layers`; costed as the Hugging Face families' kinds are."""

import pytest
import yaml

import core
from core.errors import SpecError
from core.model.specs import LayerKind, ModelSpec, MoESpec, RecurrentSpec

BASE = {"name": "t", "layers": 8, "hidden": 1024, "heads": 8, "vocab": 32000}
MOE = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 512}
GDN = {"kind": "gated_deltanet", "heads": 8, "key_heads": 4, "key_dim": 128, "value_dim": 128}


def load(tmp_path, **fields):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, **fields}))
    return core.load_model(path)


def test_dense_first_layers_then_moe_as_deepseek_writes_them(tmp_path):
    model = load(tmp_path, moe=MOE, layer_kinds=[{"count": 2, "ffn": "dense"}, {"count": 6}], mtp_layers=1)
    assert [kind.ffn for kind in model.layer_kinds] == ["dense"] * 2 + ["moe"] * 6
    assert model.mtp_layers == 1
    h = 1024
    dense_layer = 4 * h * h + 3 * h * 4096 + 2 * h
    moe_layer = 4 * h * h + 8 * 3 * h * 512 + h * 8 + 2 * h
    assert model.decoder_params() == 2 * dense_layer + 6 * moe_layer
    assert model.mtp_params() == moe_layer + 2 * h + 2 * h * h


def test_a_short_list_repeats_as_a_pattern(tmp_path):
    model = load(tmp_path, layer_kinds=[{"window": 128}, {}])  # gpt-oss: sliding, full, sliding, ...
    assert [kind.window for kind in model.layer_kinds] == [128, 0] * 4


def test_linear_attention_beside_full_attention(tmp_path):
    model = load(tmp_path, recurrent=GDN, layer_kinds=[{"count": 3, "mixer": "linear"}, {}])
    assert [kind.mixer for kind in model.layer_kinds] == (["linear"] * 3 + ["attention"]) * 2
    assert model.recurrent == RecurrentSpec("gated_deltanet", 8, 4, 128, 128)
    record = core.evaluate(model, core.load_hardware("h100-sxm5-80gb"), core.Parallelism(tp=2),
                           core.TrainWorkload(global_batch=2, seq=1024), 2)
    assert record["feasible"] and record["step_time_s"] > 0


def test_one_kind_for_every_layer_is_the_uniform_model(tmp_path):
    listed = load(tmp_path, moe=MOE, layer_kinds=[{"count": 8, "ffn": "moe"}])
    plain = load(tmp_path, moe=MOE)
    assert listed == plain and listed.uniform


def test_the_yaml_kinds_cost_what_the_same_kinds_set_in_code_cost(tmp_path):
    model = load(tmp_path, moe=MOE, layer_kinds=[{"count": 2, "ffn": "dense"}, {"count": 6}])
    built = ModelSpec("t", 8, 1024, 8, 8, 4096, 32000, moe=MoESpec(8, 2, 512),
                      layer_kinds=(LayerKind(),) * 2 + (LayerKind(ffn="moe"),) * 6)
    assert model == built


@pytest.mark.parametrize("fields, field, words", [
    ({"layer_kinds": [{"count": 3}]}, "layer_kinds", "divisor"),
    ({"layer_kinds": [{"ffn": "moe"}]}, "layer_kinds.0.ffn", "moe` block"),
    ({"layer_kinds": [{}, {"mixer": "mamba"}]}, "layer_kinds.1.mixer", "recurrent` block"),
    ({"layer_kinds": [{"count": 0}]}, "layer_kinds.0.count", "integer >= 1"),
    ({"layer_kinds": [{"heads": 4}]}, "layer_kinds.0.heads", "unknown field"),
    ({"layer_kinds": [{"window": 64, "chunk": 64}]}, "layer_kinds.0.chunk", "not both"),
    ({"layer_kinds": [{"mixer": "none", "ffn": "none"}]}, "layer_kinds.0.ffn", "needs an FFN"),
    ({"layer_kinds": {"count": 8}}, "layer_kinds", "list of runs"),
    ({"recurrent": GDN}, "recurrent", "no layer_kinds entry"),
    ({"mtp_layers": 1.5}, "mtp_layers", "integer >= 0"),
])
def test_a_bad_entry_is_refused_naming_its_field(tmp_path, fields, field, words):
    with pytest.raises(SpecError) as err:
        load(tmp_path, **fields)
    assert f"field '{field}'" in str(err.value) and words in str(err.value)
