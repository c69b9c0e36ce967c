"""Malformed models, hardware and command lines: one line naming the field, no traceback."""
import subprocess
import sys

import pytest
import yaml

from sweep.cli import main

GOOD_MODEL = {"name": "tiny", "layers": 4, "hidden": 256, "heads": 8, "vocab": 1000}
GOOD_HW = yaml.safe_load(open("core/model/presets/gpus/a100-sxm4-80gb.yaml"))


def model_with(**changes):
    data = dict(GOOD_MODEL)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def hw_with(path, value):
    data = yaml.safe_load(yaml.safe_dump(GOOD_HW))
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


MODEL_CASES = [
    (model_with(layers=None), "layers"),
    (model_with(hidden=250), "hidden"),
    (model_with(kv_heads=3), "kv_heads"),
    (model_with(activation="relu"), "activation"),
    (model_with(layers="four"), "layers"),
    (model_with(moe={"experts": 4, "top_k": 8, "expert_ffn_hidden": 512}), "moe.top_k"),
    (model_with(colour="blue"), "colour"),
    (model_with(norm="batchnorm"), "norm"),
]
HW_CASES = [
    (hw_with(["gpu", "hbm", "bandwidth"], "fast"), "gpu.hbm.bandwidth"),
    (hw_with(["gpu", "hbm", "capacity"], "80 parsecs"), "gpu.hbm.capacity"),
    (hw_with(["gpu", "sm_count"], 0), "gpu.sm_count"),
    (hw_with(["network"], []), "network"),
    (hw_with(["network", 0, "topology"], "donut"), "network.0.topology"),
    (hw_with(["network", 0, "ll_bandwidth"], "quick"), "network.0.ll_bandwidth"),
    (hw_with(["gpu", "peak_flops"], {"int3": "1 TFLOP/s"}), "gpu.peak_flops.int3"),
    (hw_with(["calibration", "compute_efficiency"], 1.5), "calibration.compute_efficiency"),
    (hw_with(["calibration", "stream_efficiency"], 0), "calibration.stream_efficiency"),
    (hw_with(["dtype"], "fp8"), "dtype"),
]


def run_cli(capsys, argv):
    """Exit code and stderr of `rapid ARGV`, whether argparse or the command rejects it."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("data, field", MODEL_CASES)
def test_bad_model_files(tmp_path, capsys, data, field):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = run_cli(capsys, ["run", "--model", str(path), "--hardware", "a100-sxm4-80gb"])
    assert code == 2
    assert len(err.splitlines()) == 1 and f"'{field}'" in err and str(path) in err


@pytest.mark.parametrize("data, field", HW_CASES)
def test_bad_hardware_files(tmp_path, capsys, data, field):
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = run_cli(capsys, ["run", "--model", "llama2-7b", "--hardware", str(path)])
    assert code == 2
    assert len(err.splitlines()) == 1 and f"'{field}'" in err and str(path) in err


@pytest.mark.parametrize("argv, named", [
    (["--model", "llama9-1b", "--hardware", "a100-sxm4-80gb"], "model"),
    (["--model", "llama2-7b", "--hardware", "tpu-v9"], "hardware"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--tp", "x"], "--tp"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--tp", "0"], "--tp"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--gpus", "12", "--tp", "8"], "--dp"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--tp", "3"], "parallelism"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--recompute", "most"], "--recompute"),
    (["--model", "llama2-7b", "--hardware", "a100-sxm4-80gb", "--dp", "two"], "--dp"),
])
def test_bad_command_lines(capsys, argv, named):
    code, err = run_cli(capsys, ["run", *argv])
    assert code == 2
    assert len(err.splitlines()) == 1 and named in err


def test_broken_yaml_is_one_line_without_traceback(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("layers: [4\n")
    out = subprocess.run([sys.executable, "-m", "sweep.cli", "run", "--model", str(path),
                          "--hardware", "a100-sxm4-80gb"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "not valid YAML" in out.stderr
