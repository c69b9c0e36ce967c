"""Argument types shared by the `rapid` subcommands: integers checked against their range
at parse time, so a bad value is one line naming the option, the value and the range."""
import argparse


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
