"""Record the model's outputs for a small fixed set of configurations, with MODEL_VERSION.

tests/test_model_pinned.py recomputes them and fails when any number moved while
core.MODEL_VERSION stayed the same. After a deliberate model change: bump MODEL_VERSION in
core/version.py, then run `.venv/bin/python scripts/pin_model_outputs.py` and commit both."""
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import core  # noqa: E402
from core.model.loader import with_dtype  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "model_outputs.json"
METRICS = ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s", "memory_peak_gib")
# name -> (model, hardware, its (dtype, FP8 recipe) ((): the preset's), parallelism fields, workload fields,
# gpus)
CASES = {
    "llama70b-train-tp8pp4": ("llama3.1-70b", "a100-sxm4-80gb", (),
                              {"tp": 8, "pp": 4, "dp": 2, "sp": True, "recompute": "selective"},
                              {"global_batch": 64, "seq": 4096}, 64),
    "llama8b-train-cp-zero3": ("llama3.1-8b", "h100-sxm5-80gb", (),
                               {"tp": 4, "cp": 2, "dp": 2, "sp": True, "zero": 3, "micro_batch": 2},
                               {"global_batch": 32, "seq": 16384}, 16),
    "gpt175b-train-interleaved": ("gpt-175b", "a100-sxm4-80gb", (),
                                  {"tp": 8, "pp": 8, "dp": 1, "sp": True, "schedule": "interleaved",
                                   "virtual_stages": 2, "recompute": "selective"},
                                  {"global_batch": 64, "seq": 2048}, 64),
    "mixtral-train-ep": ("mixtral-8x7b", "h100-sxm5-80gb", (), {"tp": 2, "ep": 4, "dp": 4, "sp": True, "zero": 1},
                         {"global_batch": 32, "seq": 4096}, 8),
    "llama70b-train-gb200-nvfp4": ("llama3.1-70b", "gb200-nvl72", ("nvfp4", ""),
                                   {"tp": 4, "pp": 2, "dp": 8, "sp": True}, {"global_batch": 256, "seq": 8192}, 64),
    "llama405b-train-b200-mxfp8": ("llama3.1-405b", "b200-sxm-180gb", ("mxfp8", ""),
                                   {"tp": 8, "pp": 8, "dp": 4, "sp": True}, {"global_batch": 512, "seq": 8192}, 256),
    "llama70b-train-h100-fp8-block": ("llama3.1-70b", "h100-sxm5-80gb", ("fp8", "block-scaled"),
                                      {"tp": 8, "pp": 2, "dp": 4, "sp": True}, {"global_batch": 128, "seq": 8192}, 64),
    "llama70b-infer-tp4": ("llama2-70b", "a100-sxm4-80gb", (), {"tp": 4},
                           {"batch": 8, "prompt": 1024, "decode": 128}, 4),
    "qwen3b-infer-pp2": ("qwen2.5-3b", "h200-sxm-141gb", (), {"tp": 1, "pp": 2, "dp": 2},
                         {"batch": 16, "prompt": 512, "decode": 256}, 4),
}


def outputs() -> dict:
    """name -> {metric: value (None when not a number)} for every case, analytical backend."""
    result = {}
    for name, (model, hardware, dtype, par, work, gpus) in CASES.items():
        workload = core.TrainWorkload(**work) if "seq" in work else core.InferWorkload(**work)
        hw = core.load_hardware(hardware)
        if dtype:
            low_precision, recipe = dtype
            hw = with_dtype(hw, low_precision, name, "dtype", recipe)
        record = core.evaluate(core.load_model(model), hw, core.Parallelism(**par),
                               workload, gpus, time_infeasible=True)
        result[name] = {key: None if math.isnan(record[key]) else record[key] for key in METRICS}
    return result


def main() -> None:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"model_version": core.MODEL_VERSION, "outputs": outputs()}, indent=1) + "\n")
    print(f"pinned {len(CASES)} cases under MODEL_VERSION {core.MODEL_VERSION} in {FIXTURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
