"""Blackwell GPU presets (issue 21): each loads, the NVL72 parts have a 72-GPU NVLink switch
level under a scale-out level, and the dense peaks, HBM bandwidth and link rates are the
figures of AIConfigurator's system spec for that part (read from the shared kernel folder
when present, else the constants below, copied from those files)."""
from pathlib import Path

import pytest
import yaml

from core.model.loader import load_hardware

KERNELS = Path("/work/shared/validation/kernels")
# preset -> (kernel-table folder, its system.yaml figures: bf16 and fp8 dense FLOP/s, HBM B/s,
# NVLink and scale-out B/s per GPU and direction)
PRESETS = {
    "b200-sxm-180gb": ("b200_sxm", 2250e12, 4500e12, 7700e9, 900e9, 100e9),
    "b300-sxm-288gb": ("b300_sxm", 2250e12, 4500e12, 7750e9, 900e9, 100e9),
    "gb200-nvl72": ("gb200", 2500e12, 5000e12, 8000e9, 900e9, 100e9),
    "gb300-nvl72": ("gb300", 2500e12, 5000e12, 8000e9, 900e9, 100e9),
}


def _cited(preset: str) -> tuple:
    folder, *figures = PRESETS[preset]
    path = KERNELS / folder / "system.yaml"
    if not path.is_file():
        return tuple(figures)
    spec = yaml.safe_load(path.read_text())
    gpu, node = spec["gpu"], spec["node"]
    return (gpu["bfloat16_tc_flops"], gpu["fp8_tc_flops"], gpu["mem_bw"], node["intra_node_bw"],
            node.get("inter_rack_bw", node["inter_node_bw"]))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_loads_with_cited_figures(preset):
    hw = load_hardware(preset)
    bf16, fp8, hbm, nvlink, scale_out = _cited(preset)
    peaks = dict(hw.gpu.peak_flops)
    assert peaks["bf16"] == pytest.approx(bf16)
    assert peaks["fp16"] == pytest.approx(bf16)
    assert peaks["fp8"] == pytest.approx(fp8)
    assert hw.gpu.hbm.bandwidth_bps == pytest.approx(hbm)
    inner, outer = hw.network
    assert (inner.name, inner.topology) == ("nvlink", "switch")
    assert inner.link_bandwidth_bps == pytest.approx(nvlink)
    assert outer.size == 0 and outer.link_bandwidth_bps == pytest.approx(scale_out)  # auto: the racks / nodes
    cal = hw.calibration
    assert 0 < cal.compute_efficiency <= 1 and 0 < cal.fp8_efficiency <= 1 and 0 < inner.efficiency <= 1


@pytest.mark.parametrize("preset", ["gb200-nvl72", "gb300-nvl72"])
def test_nvl72_has_a_72_gpu_nvlink_domain(preset):
    hw = load_hardware(preset)
    assert hw.network[0].size == 72
    assert [d.size for d in hw.dims_for(144)] == [72, 2]  # two racks
    assert [d.size for d in hw.dims_for(64)] == [72, 1]


@pytest.mark.parametrize("preset", ["b200-sxm-180gb", "b300-sxm-288gb"])
def test_dgx_blackwell_has_an_8_gpu_nvlink_node(preset):
    assert load_hardware(preset).network[0].size == 8

