"""Kill a run midway, as a user's Ctrl-\\ or an OOM killer would: for resume tests."""
import os
import signal
import subprocess
import time

from sweep.store.parts import part_files


def sigkill_after_parts(command: list, folder, parts: int) -> None:
    """Run `command` in its own session and SIGKILL its whole process group as soon as
    `folder` holds `parts` finished parts (the run must still be going by then)."""
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(part_files(folder)) < parts and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.01)
    assert process.poll() is None, "the run finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
