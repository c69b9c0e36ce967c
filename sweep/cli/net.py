"""`rapid net` as the `rapid` command runs it: astra_backend's compiled command, where a hardware
file of ours (a `gpu:` beside its `network:`) is read by core's loader, with every check `rapid
run` makes, and turned into the simulator's links as `rapid run`'s replays turn it
(core.replay.network.astra_dims: the calibration's network efficiency and per-step latency), so
that one file is one network for both commands. A file of a `network:` list alone, or in
ASTRA-sim's format, is astra_backend's to read."""
import math

from astra_backend import netcli

add_arguments = netcli.add_arguments


def run(args) -> int:
    return netcli.run(args, _read)


def _read(path: str, npus) -> list:
    import yaml

    try:
        with open(path, encoding="utf-8") as file:
            data = yaml.safe_load(file)
    except (OSError, yaml.YAMLError):
        data = None  # astra_backend's reader says what is wrong with it
    if not (isinstance(data, dict) and "gpu" in data):
        return netcli.read_network(path, npus)
    from core.model.loader import load_hardware
    from core.replay.network import astra_dims

    hw = load_hardware(path)
    sizes = [dim.size for dim in hw.network]
    inner = math.prod(sizes[:-1])
    if sizes[-1] == 0 and npus is None:
        raise ValueError(f"{path}: network.{len(sizes) - 1}.size: auto needs the NPU count (rapid net --npus N)")
    if sizes[-1] == 0 and npus % inner:
        raise ValueError(f"{path}: network.{len(sizes) - 1}.size: auto with {npus} NPUs: not a multiple of the "
                         f"inner {inner}")
    return netcli.records(astra_dims(hw, npus if sizes[-1] == 0 else math.prod(sizes)))
