"""Malformed input of every kind (study, model, hardware, Hugging Face config, command line)
gets exit code 2 and one line naming the file, the field, the value and what is allowed:
no traceback, nothing written. Each case is (argv template, text of the files it names,
expected substrings); `{tmp}` is the case's folder, `{study}`, `{model}`, `{hw}` and `{hf}`
files written there."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from core import SpecError
from core.model.loader import PRESET_DIR
from sweep.cli import main

A100 = (PRESET_DIR / "gpus" / "a100-sxm4-80gb.yaml").read_text()
LLAMA = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256,
         "activation": "swiglu", "norm": "rmsnorm"}
HF = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 128256, "hidden_act": "silu"}
STUDY = {"name": "bad", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 16,
         "workload": {"mode": "train", "global_batch": 64, "seq": 4096}, "space": {"tp": [4, 8]}}
RUN = ["run", "--hardware", "{hw}", "--model", "{model}", "--gpus", "8", "--tp", "8", "--global-batch", "8", "--seq", "1024"]
RUN_HF = ["run", "--hardware", "a100-sxm4-80gb", "--model", "{hf}", "--gpus", "8", "--tp", "8", "--global-batch", "8"]
SWEEP = ["sweep", "{study}", "--local", "--quiet"]


TABLE = pa.table({"point_id": ["a"], "tp": [1], "feasible": [True], "step_time_s": [1.0]})
FAULT_TABLE = pa.table({"point_id": ["a", "a"], "tp": [1, 1], "feasible": [True, True], "step_time_s": [1.0, 1.5],
                        "fault_sample": [0, 1], "slowdown": [1.0, 1.5]})


def study(**changes) -> str:
    data = {**STUDY, "output": "{tmp}/out"}
    for key, value in changes.items():
        if key.startswith("space_"):
            data["space"] = {**data["space"], key[6:].replace("__", "."): value}
        elif key.startswith("workload_"):
            data["workload"] = {**data["workload"], key[9:]: value}
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False)


def model(**changes) -> str:
    return yaml.safe_dump({**LLAMA, **changes})


def hf(**changes) -> str:
    return json.dumps({**HF, **changes})


def hw(old: str, new: str) -> str:
    assert old in A100
    return A100.replace(old, new, 1)


# name: (argv, {file: text}, [substrings the one line must contain])
CASES = {
    # study files
    "study unknown key": (SWEEP, {"study": study(speed=3)}, ["{study}", "speed", "3", "allowed"]),
    "study description not text": (SWEEP, {"study": study(description=["a", "b"])},
                                   ["{study}", "description", "['a', 'b']", "text"]),
    "study bad name": (SWEEP, {"study": study(name="a b/c")}, ["{study}", "name", "a b/c"]),
    "study gpus zero": (SWEEP, {"study": study(gpus=0)}, ["{study}", "gpus", "0", "positive integer"]),
    "study gpus string": (SWEEP, {"study": study(gpus="16")}, ["{study}", "gpus", "16", "positive integer"]),
    "study backend": (SWEEP, {"study": study(backend="ns3")}, ["{study}", "backend", "ns3", "analytical"]),
    "study seed negative": (SWEEP, {"study": study(seed=-1)}, ["{study}", "seed", "-1", "non-negative"]),
    "study workload mode": (SWEEP, {"study": study(workload_mode="simulate")}, ["{study}", "workload.mode", "simulate", "train"]),
    "study workload seq zero": (SWEEP, {"study": study(workload_seq=0)}, ["{study}", "workload.seq", "0", "positive"]),
    "study workload batch past int32": (SWEEP, {"study": study(workload_global_batch=2**63)},
                                        ["{study}", "workload.global_batch", str(2**63), "up to 2,147,483,647"]),
    "study workload batch string": (SWEEP, {"study": study(workload_global_batch="64")}, ["{study}", "workload.global_batch", "64"]),
    "study workload unknown": (SWEEP, {"study": study(workload_steps=3)}, ["{study}", "workload.steps", "3", "allowed"]),
    "study missing workload": (SWEEP, {"study": study(workload=None)}, ["{study}", "workload", "<missing>", "required"]),
    "study tp zero": (SWEEP, {"study": study(space_tp=[0])}, ["{study}", "space.tp", "0", "positive"]),
    "study tp empty": (SWEEP, {"study": study(space_tp=[])}, ["{study}", "space.tp", "[]", "at least one"]),
    "study tp float": (SWEEP, {"study": study(space_tp=[1.5])}, ["{study}", "space.tp", "1.5", "positive"]),
    "study zero stage": (SWEEP, {"study": study(space_zero=[4])}, ["{study}", "space.zero", "4", "ZeRO"]),
    "study recompute": (SWEEP, {"study": study(space_recompute=["sometimes"])}, ["{study}", "space.recompute", "sometimes", "selective"]),
    "study schedule": (SWEEP, {"study": study(space_schedule=["zb"])}, ["{study}", "space.schedule", "zb", "1f1b"]),
    "study placement": (SWEEP, {"study": study(space_placement=["tp,dp"])}, ["{study}", "space.placement", "tp,dp", "axis orders"]),
    "study sp": (SWEEP, {"study": study(space_sp=["yes"])}, ["{study}", "space.sp", "yes", "true/false"]),
    "study unknown knob": (SWEEP, {"study": study(space_speed=[1])}, ["{study}", "space.speed", "[1]", "unknown knob"]),
    "study duplicate value": (SWEEP, {"study": study(space_tp=[2, 2])}, ["{study}", "space.tp", "[2, 2]", "twice"]),
    "study mixed knob kinds": (SWEEP, {"study": study(space_hardware__gpu__hbm__bandwidth=["2 TB/s", 5])},
                               ["{study}", "space.hardware.gpu.hbm.bandwidth", "2 TB/s", "one kind"]),
    "study NaN override": (SWEEP, {"study": study(overrides={"hardware.gpu.hbm.bandwidth": float("nan")})},
                           ["{study}", "overrides.hardware.gpu.hbm.bandwidth", "nan", "finite"]),
    "study inf knob": (SWEEP, {"study": study(space_hardware__gpu__hbm__bandwidth=[float("inf")])},
                       ["{study}", "space.hardware.gpu.hbm.bandwidth", "inf", "finite"]),
    "study negative bandwidth": (SWEEP, {"study": study(overrides={"hardware.gpu.hbm.bandwidth": "-5 GB/s"})},
                                 ["{study}", "overrides.hardware.gpu.hbm.bandwidth", "-5 GB/s", "bandwidth"]),
    "study override path": (SWEEP, {"study": study(overrides={"gpu.hbm.bandwidth": "1 TB/s"})},
                            ["{study}", "overrides.gpu.hbm.bandwidth", "1 TB/s", "model. or hardware."]),
    "study overrides not a mapping": (SWEEP, {"study": study(overrides=[1])}, ["{study}", "overrides", "[1]", "mapping"]),
    "study unknown model": (SWEEP, {"study": study(model="llama9-1t")}, ["{study}", "model", "llama9-1t", "preset"]),
    "study unknown hardware": (SWEEP, {"study": study(hardware="b300")}, ["{study}", "hardware", "b300", "preset"]),
    "study no legal layout": (SWEEP, {"study": study(gpus=7)}, ["{study}", "gpus", "7", "no legal layout"]),
    "study no legal layout, not for the GPU count alone": (
        SWEEP, {"study": study(gpus=12, space_tp=[2, 4, 8])}, ["{study}", "'space'", "no legal layout on gpus = 12", "global_batch (64)"]),
    "study duplicate key": (SWEEP, {"study": "name: bad\nname: again\n"}, ["{study}", "<file>", "twice"]),
    "study not YAML": (SWEEP, {"study": "name: [unclosed\n"}, ["{study}", "<file>", "not valid YAML"]),
    "study empty": (SWEEP, {"study": ""}, ["{study}", "<file>", "mapping"]),
    "study a list": (SWEEP, {"study": "- 1\n- 2\n"}, ["{study}", "<file>", "mapping"]),
    "study binary": (SWEEP, {"study": b"\x00\x01\x02rapid"}, ["{study}", "<file>", "binary"]),
    "study is a folder": (["sweep", "{tmp}"], {}, ["{tmp}", "<file>", "folder"]),
    "study missing": (["sweep", "{tmp}/nope.yaml"], {}, ["{tmp}/nope.yaml", "<file>", "no such study file"]),
    "study output is a file": (SWEEP, {"study": study(output="{tmp}/taken"), "taken": "x"},
                               ["{study}", "output", "{tmp}/taken", "not a folder"]),
    "study output parent is a file": (SWEEP, {"study": study(output="{tmp}/taken/out"), "taken": "x"},
                                      ["output", "{tmp}/taken/out", "folder"]),
    "study fault to a missing node": (SWEEP, {"study": study(hardware="{hw}", backend="astra-hierarchical"),
                                              "hw": A100 + "faults: [{link: [0, 9999], factor: 0.5}]\n"},
                                      ["{study}", "faults", "9999", "NPUs, then the switches"]),
    "search storage unknown dialect": (SWEEP, {"study": study(search={"trials": 2, "storage": "foo://bar"})},
                                       ["{study}", "search.storage", "foo://bar", "Optuna storage URL"]),
    "study one value in two units": (SWEEP, {"study": study(space_hardware__gpu__hbm__bandwidth=["1935 GB/s", "1.935 TB/s"])},
                                     ["{study}", "space.hardware.gpu.hbm.bandwidth", "'1.935 TB/s' is '1935 GB/s' again"]),
    "study variant the same as the files": (SWEEP, {"study": study(variants={"base": {}, "stock": {
        "hardware.gpu.hbm.bandwidth": "2039 GB/s"}})}, ["{study}", "variants.stock", "the same model and hardware as variant base"]),
    "search storage without its driver": (SWEEP, {"study": study(search={"trials": 2, "storage": "postgresql://u@127.0.0.1:1/x"})},
                                          ["{study}", "search.storage", "postgresql://", "driver is not installed"]),
    "search zero range past stage 3": (SWEEP, {"study": study(search={"trials": 2}, space_zero={"low": 0, "high": 5})},
                                       ["{study}", "space.zero.high", "5", "at most 3"]),
    # model files
    "run seq past int32": ([*RUN, "--seq", "99999999999"], {"model": model(), "hw": A100},
                           ["command line", "--seq", "99999999999", "up to 2,147,483,647"]),
    "model layers zero": (RUN, {"model": model(layers=0), "hw": A100}, ["{model}", "layers", "0", "integer >= 1"]),
    "model layer kind unknown ffn": (RUN, {"model": model(layer_kinds=[{"count": 32, "ffn": "sparse"}]), "hw": A100},
                                     ["{model}", "layer_kinds.0.ffn", "sparse", "dense, moe, none"]),
    "model layer kinds not filling": (RUN, {"model": model(layer_kinds=[{"count": 5}]), "hw": A100},
                                      ["{model}", "layer_kinds", "5 layers", "divisor"]),
    "model layer kind moe without block": (RUN, {"model": model(layer_kinds=[{"ffn": "moe"}]), "hw": A100},
                                           ["{model}", "layer_kinds.0.ffn", "moe", "moe` block"]),
    "model mtp layers negative": (RUN, {"model": model(mtp_layers=-1), "hw": A100},
                                  ["{model}", "mtp_layers", "-1", "integer >= 0"]),
    "run mtp layers negative": ([*RUN, "--mtp-layers", "-2"], {"model": model(), "hw": A100},
                                ["command line", "--mtp-layers", "-2"]),
    "run mtp layers serving": (["run", "--hardware", "{hw}", "--model", "{model}", "--gpus", "8", "--tp", "8", "--mode",
                                "infer", "--mtp-layers", "1"], {"model": model(), "hw": A100},
                               ["command line", "--mtp-layers", "1", "--mode train"]),
    "model layers float": (RUN, {"model": model(layers=1.5), "hw": A100}, ["{model}", "layers", "1.5", "integer"]),
    "model hidden string": (RUN, {"model": model(hidden="4096"), "hw": A100}, ["{model}", "hidden", "4096", "integer"]),
    "model heads divide": (RUN, {"model": model(heads=30), "hw": A100}, ["{model}", "hidden", "4096", "divisible"]),
    "model kv heads above heads": (RUN, {"model": model(kv_heads=64), "hw": A100}, ["{model}", "kv_heads", "64", "divide"]),
    "model kv heads divisor": (RUN, {"model": model(kv_heads=5), "hw": A100}, ["{model}", "kv_heads", "5", "divide"]),
    "model activation": (RUN, {"model": model(activation="relu"), "hw": A100}, ["{model}", "activation", "relu", "swiglu"]),
    "model missing vocab": (RUN, {"model": yaml.safe_dump({k: v for k, v in LLAMA.items() if k != "vocab"}), "hw": A100},
                            ["{model}", "vocab", "<missing>", "required"]),
    "model unknown field": (RUN, {"model": model(hiden=3), "hw": A100}, ["{model}", "hiden", "3", "allowed"]),
    "model moe top_k": (RUN, {"model": model(moe={"experts": 4, "top_k": 8, "expert_ffn_hidden": 1024}), "hw": A100},
                        ["{model}", "moe.top_k", "8", "<= experts"]),
    "model NaN": (RUN, {"model": model(hidden=float("nan")), "hw": A100}, ["{model}", "hidden", "nan", "integer"]),
    "model duplicate key": (RUN, {"model": model() + "layers: 40\n", "hw": A100}, ["{model}", "<file>", "twice"]),
    # hardware files
    "hw NaN bandwidth": (RUN, {"model": model(), "hw": hw("bandwidth: 2039 GB/s", "bandwidth: .nan")},
                         ["{hw}", "gpu.hbm.bandwidth", "nan", "finite"]),
    "hw inf bandwidth": (RUN, {"model": model(), "hw": hw("bandwidth: 2039 GB/s", "bandwidth: .inf")},
                         ["{hw}", "gpu.hbm.bandwidth", "inf", "finite"]),
    "hw zero bandwidth": (RUN, {"model": model(), "hw": hw("bandwidth: 2039 GB/s", "bandwidth: 0 GB/s")},
                          ["{hw}", "gpu.hbm.bandwidth", "0 GB/s", "bandwidth such as"]),
    "hw huge exponent": (RUN, {"model": model(), "hw": hw("bandwidth: 2039 GB/s", "bandwidth: 1e999 GB/s")},
                         ["{hw}", "gpu.hbm.bandwidth", "1e999 GB/s", "finite"]),
    "hw zero capacity": (RUN, {"model": model(), "hw": hw("capacity: 81920 MiB", "capacity: 0 MiB")},
                         ["{hw}", "gpu.hbm.capacity", "0 GB", "positive size"]),
    "hw sm count": (RUN, {"model": model(), "hw": hw("sm_count: 108", "sm_count: 0")}, ["{hw}", "gpu.sm_count", "0", "integer"]),
    "hw clock": (RUN, {"model": model(), "hw": hw("clock: 1410 MHz", "clock: fast")}, ["{hw}", "gpu.clock", "fast", "frequency"]),
    "hw dtype": (RUN, {"model": model(), "hw": hw("dtype: bf16", "dtype: int4")}, ["{hw}", "dtype", "int4", "fp8"]),
    "hw topology": (RUN, {"model": model(), "hw": hw("topology: switch", "topology: star")},
                    ["{hw}", "network.0.topology", "star", "ring"]),
    "hw efficiency": (RUN, {"model": model(), "hw": hw("efficiency: 0.78", "efficiency: 1.5")},
                      ["{hw}", "network.0.efficiency", "1.5", "number in"]),
    "hw negative latency": (RUN, {"model": model(), "hw": hw("latency: 0.7 us", "latency: -1 us")},
                            ["{hw}", "network.0.latency", "-1 us", "duration"]),
    "hw flops dtype": (RUN, {"model": model(), "hw": hw("fp32: 19.5 TFLOP/s", "int8: 19.5 TFLOP/s")},
                       ["{hw}", "gpu.peak_flops.int8", "19.5 TFLOP/s", "dtype must be"]),
    "hw two network dimensions of one name": (RUN, {"model": model(), "hw": hw("name: ib,", "name: nvlink,")},
                                              ["{hw}", "network.1.name", "nvlink", "another dimension has"]),
    "hw a link faulted twice": (RUN, {"model": model(), "hw": A100 + "faults: [{link: [0, 8], factor: 0.5}, {link: [8, 0], factor: 0.5}]\n"},
                                ["{hw}", "faults.1.link", "[8, 0]", "the link of faults.0 again"]),
    "hw required field misspelt": (RUN, {"model": model(), "hw": hw("sm_count: 108", "sm_cont: 108")},
                                   ["{hw}", "gpu.sm_count", "<missing>", "'gpu.sm_cont' a misspelling"]),
    "hw unknown field": (RUN, {"model": model(), "hw": A100 + "cooling: water\n"}, ["{hw}", "cooling", "water", "allowed"]),
    "hw fault factor": (RUN, {"model": model(), "hw": A100 + "faults: [{link: [0, 8], factor: 2}]\n"},
                        ["{hw}", "faults.0.factor", "2", "[0, 1]"]),
    "hw duplicate key": (RUN, {"model": model(), "hw": A100 + "dtype: fp16\n"}, ["{hw}", "<file>", "twice"]),
    # Hugging Face config.json
    "hf model type": (RUN_HF, {"hf": hf(model_type="bert")}, ["{hf}", "model_type", "bert", "supported"]),
    "hf kv heads above heads": (RUN_HF, {"hf": hf(num_key_value_heads=64)}, ["{hf}", "num_key_value_heads", "64", "divisor"]),
    "hf kv heads string": (RUN_HF, {"hf": hf(num_key_value_heads="8")}, ["{hf}", "num_key_value_heads", "8", "positive integer"]),
    "hf kv heads divisor": (RUN_HF, {"hf": hf(num_key_value_heads=5)}, ["{hf}", "num_key_value_heads", "5", "divisor"]),
    "hf head dim zero": (RUN_HF, {"hf": hf(head_dim=0)}, ["{hf}", "head_dim", "0", "positive integer"]),
    "hf hidden not split by heads": (RUN_HF, {"hf": hf(hidden_size=4095)},
                                     ["{hf}", "hidden_size", "4095", "not divisible by num_attention_heads (32)"]),
    "model file missing": (["run", "--hardware", "a100-sxm4-80gb", "--model", "{tmp}/missing.json"], {},
                           ["model", "{tmp}/missing.json", "no such file"]),
    "hf tied string": (RUN_HF, {"hf": hf(tie_word_embeddings="yes")}, ["{hf}", "tie_word_embeddings", "yes", "true or false"]),
    "hf activation": (RUN_HF, {"hf": hf(hidden_act="relu")}, ["{hf}", "hidden_act", "relu", "silu"]),
    "hf shared experts": (RUN_HF, {"hf": hf(model_type="qwen3_moe", num_experts=60, num_experts_per_tok=4,
                                            moe_intermediate_size=1408, shared_expert_intermediate_size=5632)},
                          ["{hf}", "shared_expert_intermediate_size", "5632", "not a qwen3_moe key"]),
    "hf moe without experts": (RUN_HF, {"hf": hf(model_type="mixtral", num_local_experts=0)},
                               ["{hf}", "num_local_experts", "0", "expert count"]),
    "hf top k above experts": (RUN_HF, {"hf": hf(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=8,
                                                 moe_intermediate_size=768)},
                               ["{hf}", "num_experts_per_tok", "8", "at most num_experts"]),
    "hf missing vocab": (RUN_HF, {"hf": json.dumps({k: v for k, v in HF.items() if k != "vocab_size"})},
                         ["{hf}", "vocab_size", "<missing>", "positive integer"]),
    "hf duplicate key": (RUN_HF, {"hf": hf()[:-1] + ', "vocab_size": 5}'}, ["{hf}", "<file>", "twice"]),
    "hf not JSON": (RUN_HF, {"hf": "{model_type: llama"}, ["{hf}", "<file>", "not valid JSON"]),
    # command line
    "cli workers negative": (SWEEP + ["--workers", "-3"], {"study": study()}, ["--workers", "-3", "integer >= 1"]),
    "cli workers zero": (SWEEP + ["--workers", "0"], {"study": study()}, ["--workers", "0", "integer >= 1"]),
    "cli workers text": (SWEEP + ["--workers", "many"], {"study": study()}, ["--workers", "many", "integer >= 1"]),
    "cli batch points": (SWEEP + ["--batch-points", "-1"], {"study": study()}, ["--batch-points", "-1", "integer >= 1"]),
    "cli part rows": (SWEEP + ["--part-rows", "0"], {"study": study()}, ["--part-rows", "0", "integer >= 1"]),
    "cli sweep top": (SWEEP + ["--top", "-2"], {"study": study()}, ["--top", "-2", "integer >= 1"]),
    "cli address format": (["sweep", "{study}", "--address", "nohost"], {"study": study()},
                           ["--address", "nohost", "host:port"]),
    "cli output is a file": (SWEEP + ["--output", "{tmp}/taken"], {"study": study(), "taken": "x"},
                             ["--output", "{tmp}/taken", "not a folder"]),
    "cli run tp zero": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--tp", "0"], {},
                        ["--tp", "0", "integer >= 1"]),
    "cli run gpus negative": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--gpus", "-8"], {},
                              ["--gpus", "-8", "integer >= 1"]),
    "cli run seq zero": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--seq", "0"], {},
                         ["--seq", "0", "integer >= 1"]),
    "cli run dp text": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--dp", "two"], {},
                        ["--dp", "two", "positive integer or auto"]),
    "cli run zero stage": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--zero", "5"], {},
                           ["--zero", "5", "choose from"]),
    "cli run traces onto a file": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--tp", "8",
                                    "--backend", "astra-hierarchical", "--emit-traces", "{tmp}/taken"], {"taken": "x"},
                                   ["--emit-traces", "{tmp}/taken", "not a folder"]),
    "cli run traces under a file": (["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--tp", "8",
                                     "--backend", "astra-hierarchical", "--emit-traces", "{tmp}/taken/sub"], {"taken": "x"},
                                    ["--emit-traces", "{tmp}/taken/sub", "lies under {tmp}/taken, a file"]),
    "cli run model folder": (["run", "--model", "{tmp}", "--hardware", "a100-sxm4-80gb"], {}, ["{tmp}", "<file>", "folder"]),
    "cli run kv dtype in training": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
                                      "--global-batch", "8", "--kv-dtype", "fp8"], {},
                                     ["--kv-dtype", "fp8", "--mode infer"]),
    "cli run seq in inference": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--mode", "infer",
                                  "--seq", "999"], {}, ["--seq", "999", "--mode train"]),
    "cli run kv dtype tf32": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--mode", "infer",
                               "--kv-dtype", "tf32"], {}, ["--kv-dtype", "tf32", "choose from"]),
    "cli run recompute in inference": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--mode",
                                        "infer", "--recompute", "full"], {},
                                       ["field '--recompute' = full", "recompute = full", "training knobs"]),
    "cli run fp8 params on bf16": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
                                    "--global-batch", "8", "--fp8-params"], {},
                                   ["field '--fp8-params' = true", "fp8_params", "dtype fp8"]),
    "cli run etp without experts": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
                                     "--tp", "8", "--global-batch", "8", "--etp", "4"], {},
                                    ["field '--etp' = 4", "etp = 4", "no experts"]),
    "cli run first stage alone": (["run", "--model", "llama3.1-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
                                   "--pp", "4", "--global-batch", "8", "--first-stage-layers", "6"], {},
                                  ["parallelism", "6/0", "give both"]),
    "study dtype twice": (SWEEP, {"study": study(space_dtype=["bf16"], space_hardware__dtype=["fp16"])},
                          ["{study}", "space.hardware.dtype", "space.dtype sets hardware.dtype"]),
    "study variant sets an aliased knob": (SWEEP, {"study": study(space_dtype=["bf16"],
                                                                   variants={"fp16": {"hardware.dtype": "fp16"}})},
                                           ["{study}", "variants.fp16.hardware.dtype", "space.dtype sweeps"]),
    "study fp8 on a100": (SWEEP, {"study": study(space_dtype=["fp8"])}, ["{study}", "space.dtype", "fp8", "expected one of bf16, fp16,"]),
    "study kv dtype": (SWEEP, {"study": study(workload={"mode": "infer", "batch": 1, "prompt": 8, "decode": 8,
                                                       "kv_dtype": "int4"})},
                       ["{study}", "workload.kv_dtype", "int4", "fp8"]),
    "cli query top": (["query", "{tmp}", "--top", "-1"], {}, ["--top", "-1", "integer >= 1"]),
    "cli query no table": (["query", "{tmp}"], {}, ["RESULTS", "{tmp}", "no results table"]),
    "cli query sql with where": (["query", "{tmp}/t", "--sql", "select tp from results", "--where", "tp = 1"],
                                 {"t/part-000000.parquet": TABLE}, ["--where", "with --sql", "SELECT says"]),
    "cli query faults summary of baselines only": (
        ["query", "{tmp}/t", "--faults-summary", "--where", "fault_sample = 0"], {"t/part-000000.parquet": FAULT_TABLE},
        ["--where", "fault_sample = 0", "no fault sample"]),
    "cli report out is a folder": (["report", "{tmp}/t", "--out", "{tmp}/o"], {"t/part-000000.parquet": TABLE, "o/x": "x"},
                                   ["--out", "{tmp}/o", "folder"]),
    "cli report page under a file": (["report", "{tmp}/t", "--out", "{tmp}/p/r.html"], {"t/part-000000.parquet": TABLE, "p": "x"},
                                     ["--out", "{tmp}/p/r.html", "lies under {tmp}/p, a file"]),
    "cli report png is a file": (["report", "{tmp}/t", "--png", "{tmp}/p"], {"t/part-000000.parquet": TABLE, "p": "x"},
                                 ["--png", "{tmp}/p", "not a folder"]),
    "cli net npus zero": (["net", "--network", str(PRESET_DIR / "gpus" / "a100-sxm4-80gb.yaml"), "--npus", "0",
                           "--collective", "all_reduce", "--size", "1GiB"], {}, ["--npus", "0", "integer >= 1"]),
}


def materialise(tmp: Path, argv, files) -> tuple[list, dict]:
    names = {"tmp": str(tmp)}
    suffix = {"study": ".yaml", "model": ".yaml", "hw": ".yaml", "hf": "/config.json"}
    for key in files:
        names[key] = str(tmp / f"{key}{suffix.get(key, '')}")
    for key, text in files.items():
        path = Path(names[key])
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, pa.Table):
            pq.write_table(text, path)
        elif isinstance(text, bytes):
            path.write_bytes(text)
        else:
            for placeholder, value in names.items():
                text = text.replace("{" + placeholder + "}", value)
            path.write_text(text)
    return [a.format(**names) for a in argv], names


def test_there_are_at_least_sixty_distinct_cases():
    assert len(CASES) >= 60
    assert len({(tuple(a), repr(sorted(f.items()))) for a, f, _ in CASES.values()}) == len(CASES)


def exit_code(argv) -> int:
    """main's return code, or argparse's exit status for an option it refuses while parsing."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_exit_2_nothing_written(name, tmp_path, capsys):
    argv, files, expected = CASES[name]
    argv, names = materialise(tmp_path, argv, files)
    before = sorted(tmp_path.rglob("*"))
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for text in expected:
        assert text.format(**names) in err, f"{text.format(**names)!r} not in {err!r}"
    assert sorted(tmp_path.rglob("*")) == before, "something was written"


def test_a_handful_as_real_processes(tmp_path):
    import subprocess
    import sys

    for name in ("study binary", "hf kv heads string", "cli workers negative", "hw NaN bandwidth"):
        argv, files, expected = CASES[name]
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        argv, names = materialise(folder, argv, files)
        done = subprocess.run([sys.executable, "-m", "sweep.cli", *argv], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert all(t.format(**names) in done.stderr for t in expected)


def test_a_spec_error_crosses_a_process_boundary_as_itself():
    """Raised in a --local or Ray worker, it reaches the driver whole (pickled and rebuilt)."""
    import pickle

    error = pickle.loads(pickle.dumps(SpecError("study.yaml", "space.ep", 16, "expected a divisor of 8")))
    assert (error.source, error.field, error.value, error.allowed) == ("study.yaml", "space.ep", 16,
                                                                      "expected a divisor of 8")
    assert str(error) == "study.yaml: field 'space.ep' = 16: expected a divisor of 8"
