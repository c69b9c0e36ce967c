"""Inputs read as they mean: Hugging Face configs with head_dim, MoE keys and tied embeddings;
SQL that cannot touch files; output piped into `head`; the parameter count shown."""
import json
import subprocess
import sys

import core
from sweep.cli import main

QWEN3_4B = {"model_type": "qwen3", "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 9728, "num_hidden_layers": 36, "vocab_size": 151936,
            "tie_word_embeddings": True, "hidden_act": "silu"}
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
             "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
             "num_experts_per_tok": 8, "num_hidden_layers": 48, "vocab_size": 151936, "tie_word_embeddings": False}


def write_config(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_head_dim_and_tied_embeddings_give_qwen3_4b_its_parameters(tmp_path):
    model = core.load_model(write_config(tmp_path, QWEN3_4B))
    assert (model.head_dim, model.q_dim, model.tied_embeddings) == (128, 4096, True)
    h, q, kv, f = 2560, 4096, 1024, 9728
    layer = h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h
    assert model.total_params() == 36 * layer + 151936 * h  # 4.02 B, one embedding matrix
    assert round(model.total_params() / 1e9, 2) == 4.02


def test_qwen_moe_keys_make_an_moe_model(tmp_path):
    model = core.load_model(write_config(tmp_path, QWEN3_MOE))
    assert model.moe == core.model.specs.MoESpec(experts=128, top_k=8, expert_ffn_hidden=768)
    h, q, kv, expert = 2048, 4096, 512, 3 * 2048 * 768
    layer = h * (q + 2 * kv) + q * h + 128 * expert + h * 128 + 2 * h  # router included
    assert model.total_params() == 48 * layer + 2 * 151936 * h  # 30.5 B (Qwen3-30B-A3B)
    assert model.active_params() == model.total_params() - 48 * 120 * expert


def test_rapid_run_prints_the_parameter_count(tmp_path, capsys):
    assert main(["run", "--model", str(write_config(tmp_path, QWEN3_4B)), "--hardware", "a100-sxm4-80gb",
                 "--gpus", "8", "--tp", "8", "--global-batch", "8", "--seq", "1024", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"] == core.load_model(tmp_path / "config.json").total_params()


def test_sql_cannot_write_or_read_files(small_results, tmp_path, capsys):
    target = tmp_path / "copied.csv"
    assert main(["query", str(small_results), "--sql", f"COPY results TO '{target}'"]) == 2
    assert "--sql" in capsys.readouterr().err and not target.exists()
    assert main(["query", str(small_results), "--sql", "select * from read_csv('/etc/hostname')"]) == 2
    assert "disabled" in capsys.readouterr().err


def test_piping_into_head_is_quiet(small_results):
    shell = f"{sys.executable} -m sweep.cli query {small_results} --format csv | head -1"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
    assert done.stdout.startswith("point_id,") and done.stderr == ""
