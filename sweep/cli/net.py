"""`rapid net` as the `rapid` command runs it: astra_backend's compiled command, where a hardware
file of ours (a `gpu:` beside its `network:`) is read by core's loader, with every check `rapid
run` makes, and turned into the simulator's links as `rapid run`'s replays turn it
(core.replay.network.astra_dims: the calibration's network efficiency and per-step latency), so
that one file is one network for both commands. A file of a `network:` list alone, or in
ASTRA-sim's format, is astra_backend's to read."""
import math

from astra_backend import netcli
from astra_backend.configs import sized

add_arguments = netcli.add_arguments


def run(args) -> int:
    """`rapid net` with hardware files of ours read by core (exit status, as netcli.run)."""
    return netcli.run(args, _read)


def _read(path: str, npus) -> list:
    """The records of a network file: core's reading of a hardware file of ours, astra_backend's
    of any other. A hardware file's own `faults:` are not taken: `--fault` gives them here."""
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
    if hw.faults:
        links = ", ".join(f"{f.src}-{f.dst}:{f.factor:g}" for f in hw.faults)
        raise ValueError(f"{path}: faults: rapid net degrades links by --fault only; drop the block or give "
                         f"--fault {links}")
    sizes = [dim.size or "auto" for dim in hw.network]
    last = len(sizes) - 1
    outer = sized(sizes[-1], npus, math.prod(sizes[:-1]), True, f"{path}: network[{last}]")
    return netcli.records(astra_dims(hw, math.prod(sizes[:-1]) * outer))
