"""`rapid net` on a hardware file of ours reads it as `rapid run` does: the loader's checks, and
the links the astra backends replay (the calibration's network efficiency applied)."""
import json

import pytest

from core.model.loader import PRESET_DIR, load_hardware
from sweep.cli import main

B200 = PRESET_DIR / "gpus" / "b200-sxm-180gb.yaml"


def test_a_hardware_file_gives_the_links_rapid_run_replays(capsys):
    assert main(["net", "--network", str(B200), "--npus", "8", "--collective", "all_reduce", "--size", "16GiB",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    nvlink = load_hardware("b200-sxm-180gb").network[0]
    calibration = load_hardware("b200-sxm-180gb").calibration
    # a large ring all-reduce's bus bandwidth is its links' rate: link x efficiency x network efficiency
    expected = nvlink.link_bandwidth_bps * nvlink.efficiency * calibration.network_efficiency / 1e9
    assert record["busbw_gbps"] == pytest.approx(expected, rel=2e-3)


def test_a_hardware_file_is_held_to_the_loaders_rules(tmp_path, capsys):
    bare = tmp_path / "bare.yaml"
    assert "latency: 4 us" in B200.read_text()
    bare.write_text(B200.read_text().replace("latency: 4 us", "latency: 4", 1))
    assert main(["net", "--network", str(bare), "--npus", "16", "--collective", "all_reduce", "--size", "1GiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'network.1.latency' = 4: a unit is needed" in err


def test_all_to_all_goes_direct_by_default(capsys):
    def time_s(*extra) -> float:
        assert main(["net", "--network", str(B200), "--npus", "8", "--collective", "all_to_all", "--size", "1GiB",
                     "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["time_s"]

    assert time_s() == time_s("--algorithm", "direct") < time_s("--algorithm", "ring")
