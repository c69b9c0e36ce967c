"""Argument checks shared by the `rapid` subcommands: integers checked against their range
at parse time, so a bad value is one line naming the option, the value and the range, and
output paths checked before any work is done."""
import argparse
from pathlib import Path

from core import SpecError


def int_in(low: int, high: int | None = None):
    """An argparse type: an integer in [low, high] (no upper bound when high is None)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}': expected {allowed}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"'{text}': expected {allowed}")
        return value

    parse.__name__ = allowed  # argparse names the type in some messages
    return parse


POSITIVE = int_in(1)


def check_folder_path(option: str, value: str, folder: Path | None = None) -> None:
    """Refuse `option`'s folder to be written (`value`, or the `folder` it names) where it
    exists as a file or lies under one."""
    folder = Path(value) if folder is None else folder
    blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        what = "exists and is not a folder" if blocker == Path(value) else f"lies under {blocker}, a file"
        raise SpecError("command line", option, value, what)
