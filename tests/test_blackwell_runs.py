"""Training runs on every Blackwell preset in every dtype it has a peak for (issue 21): Llama 3.1
70B on 64 GPUs and 405B on 256 fit in memory, and their speeds sit where the presets' peaks put
them: no step outruns its GEMMs' rate in its dtype, and each narrower format is faster."""
import pytest

from sweep.cli import main
from core.evaluation import evaluate, mfu_peak_flops
from core.model import ops
from core.model.loader import load_hardware, load_model, with_dtype
from core.model.specs import Parallelism, TrainWorkload

PRESETS = ("b200-sxm-180gb", "b300-sxm-288gb", "gb200-nvl72", "gb300-nvl72")
DTYPES = ("bf16", "fp8", "mxfp8", "nvfp4")  # widest to narrowest
# model -> (layout, GPUs, global batch); sequences of 8,192 tokens, one per micro-batch
LAYOUTS = {"llama3.1-70b": ({"tp": 4, "pp": 2, "dp": 8}, 64, 256),
           "llama3.1-405b": ({"tp": 8, "pp": 8, "dp": 4}, 256, 512)}


def run(preset: str, dtype: str, model: str) -> tuple:
    """(the hardware computing in `dtype`, the step's record) of `model`'s layout."""
    hw = with_dtype(load_hardware(preset), dtype, preset, "dtype")
    layout, gpus, global_batch = LAYOUTS[model]
    par = Parallelism(**layout, sp=True, micro_batch=1)
    return hw, evaluate(load_model(model), hw, par, TrainWorkload(global_batch=global_batch, seq=8192), gpus)


@pytest.mark.parametrize("model", sorted(LAYOUTS))
@pytest.mark.parametrize("preset", PRESETS)
def test_every_dtype_fits_and_runs_below_its_gemm_rate(preset, model):
    steps = []
    for dtype in DTYPES:
        hw, record = run(preset, dtype, model)
        assert record["feasible"], f"{preset} {dtype} {model}: {record['infeasible_reason']}"
        achieved_flops = record["mfu"] * mfu_peak_flops(hw)  # model FLOP/s per GPU
        assert 0 < achieved_flops < ops.tensor_rate_flops(hw, dtype)
        steps.append(record["step_time_s"])
    bf16, fp8, mxfp8, nvfp4 = steps
    assert nvfp4 < fp8 < bf16 and nvfp4 < mxfp8 < bf16
    assert mxfp8 == pytest.approx(fp8, rel=0.005)  # the same FP8 peak; only the scales differ


def test_rapid_run_prints_a_blackwell_nvfp4_step(capsys):
    assert main(["run", "--model", "llama3.1-70b", "--hardware", "gb200-nvl72", "--dtype", "nvfp4",
                 "--gpus", "64", "--tp", "4", "--pp", "2", "--global-batch", "256", "--seq", "8192",
                 "--micro-batch", "1", "--json"]) == 0
    assert '"feasible": true' in capsys.readouterr().out
