"""The compiled `rapid` launcher: `rapid net` runs in it without Python where it can, and prints
exactly what the Python CLI prints (both run the same compiled command); everything else goes
to the Python CLI with the same arguments."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCHER = Path(sys.executable).with_name("rapid")
RING8_YAML = "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 100 ]\nlatency: [ 0 ]\n"
RING4_SWITCH2_BLOCK = ("topology:\n  - Ring\n  - Switch\nnpus_count:\n  - 4\n  - 2\n"
                       "bandwidth: [50.0, 12.5]  # GiB/s\nlatency: [500.0, 1000.0]\n")
SWITCH8_JSON = '{"topology": ["Switch"], "npus_count": [8], "bandwidth": [100.0], "latency": [1000.0]}'
OURS = "network:\n  - {topology: ring, size: 4, link_bandwidth: 100 GB/s, latency: 1 us}\n"
BAD_LENGTHS = "topology: [Ring]\nnpus_count: [4, 2]\nbandwidth: [50.0]\nlatency: [5.0]\n"


@pytest.fixture
def networks(tmp_path):
    files = {"ring8.yml": RING8_YAML, "block.yml": RING4_SWITCH2_BLOCK, "switch8.json": SWITCH8_JSON,
             "ours.yaml": OURS, "bad.yml": BAD_LENGTHS}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run(command, cwd, env=None):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    return done.returncode, done.stdout, done.stderr


CASES = [
    "--network ring8.yml --collective all_reduce --size 64MiB",
    "--network ring8.yml --collective all-gather --size 1GiB --group 0-3 --fault 0-1:0.5 --fault 4-5:0",
    "--network block.yml --collective all_to_all --size 1MiB --json --top 3",
    "--network switch8.json --collective broadcast --size 1MB --root 3 --group 1,3 5-7 --chunks 4",
    "--network=switch8.json --collective=send_recv --size=4KiB --group 2 6 --json",
    "--network ours.yaml --collective all_reduce --size 1MiB --fault 0-1:0.25",
    "--network ring8.yml --collective all_reduce --size lots",
    "--network ring8.yml --collective all_reduce --size 1MiB --fault 0-2:0.5",
    "--network ring8.yml --collective all_reduce --size 1MiB --group 0 0 1",
    "--network ring8.yml --collective send_recv --size 1MiB",
    "--network bad.yml --collective all_reduce --size 1MiB",
    "--network missing.yml --collective all_reduce --size 1MiB",
    "--network ring8.yml --collective all_reduce --size 1MiB --top -1",
    "--network ring8.yml --collective all_reduce",
]


@pytest.mark.parametrize("argv", CASES)
def test_the_launcher_prints_what_the_python_cli_prints(argv, networks):
    native = run([str(LAUNCHER), "net", *argv.split()], networks)
    python = run([sys.executable, "-m", "sweep.cli", "net", *argv.split()], networks)
    assert native == python
    status, out, err = native
    if status == 0:
        assert out and err == ""
    else:
        assert status == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_net_on_astra_sim_files_runs_without_python_and_the_rest_goes_to_python(networks):
    """A copy of the launcher beside a stand-in `python3` that says it was called: ASTRA-sim
    files run in the launcher, our hardware YAML, --help and other commands reach the stand-in
    with the same arguments."""
    shutil.copy(LAUNCHER, networks / "rapid")
    (networks / "python3").write_text('#!/bin/sh\necho "python $*"\nexit 7\n')
    (networks / "python3").chmod(0o755)
    launcher = str(networks / "rapid")
    env = {k: v for k, v in os.environ.items() if k != "RAPID_PYTHON"}  # that would name the interpreter
    status, out, _ = run([launcher, "net", "--network", "switch8.json", "--collective", "all_reduce", "--size", "1MiB",
                          "--json"], networks, env)
    assert status == 0 and out.startswith('{"time_s": ')
    for argv in (["net", "--network", "ours.yaml", "--collective", "all_reduce", "--size", "1MiB"],
                 ["net", "--help"], ["net", "--net", "switch8.json", "--collective", "all_reduce", "--size", "1"],
                 ["run", "--model", "llama3.1-8b"]):
        assert run([launcher, *argv], networks, env)[:2] == (7, f"python -P -m sweep.cli {' '.join(argv)}\n")
