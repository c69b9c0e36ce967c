"""Parsing of sizes, bandwidths and times written with units (GB = 1e9 bytes, GiB = 2^30)."""
import math
import re

from . import _netsim

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/]*)\s*$")

_BYTES = _netsim.BYTE_UNITS  # compiled: `rapid net --size` reads sizes without Python
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _split(text, what):
    if isinstance(text, bool):
        raise ValueError(f"{what} {text!r} is not a number with a unit")
    if isinstance(text, (int, float)):
        return float(text), ""
    match = _NUMBER.match(str(text))
    if not match:
        raise ValueError(f"{what} {text!r} is not a number with a unit")
    return float(match.group(1)), match.group(2)


def _checked(value, text, what):
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} {text!r} must be finite and >= 0")
    return value


def parse_bytes(text):
    """'64MiB', '1 GB', 4096 -> bytes as a float (text is read by the compiled parser that
    `rapid net --size` uses)."""
    if isinstance(text, str):
        return _netsim.parse_bytes(text)
    value, _ = _split(text, "size")
    return _checked(value, text, "size")


def parse_bandwidth(text):
    """'300 GB/s', '400 Gb/s', '25 GiB/s' -> bytes per second; a bare number means GB/s."""
    value, unit = _split(text, "bandwidth")
    if unit == "":
        return _checked(value * 1e9, text, "bandwidth")
    per_second = unit[:-2] if unit.endswith("/s") or unit.lower().endswith("ps") else ""
    if not per_second:
        raise ValueError(f"bandwidth {text!r} needs a unit like GB/s, GiB/s or Gb/s")
    bits = per_second.endswith("b")
    scale = _BYTES.get((per_second[:-1] + "B").lower() if bits else per_second.lower())
    if scale is None:
        raise ValueError(f"bandwidth {text!r} has unknown unit {unit!r}; use e.g. GB/s, GiB/s, Gb/s")
    return _checked(value * scale / (8 if bits else 1), text, "bandwidth")


def parse_time(text):
    """'0.7 us', '500ns', '5 ms' -> seconds; a bare number means seconds."""
    value, unit = _split(text, "time")
    scale = 1.0 if unit == "" else _SECONDS.get(unit.lower() if unit != "µs" else unit)
    if scale is None:
        raise ValueError(f"time {text!r} has unknown unit {unit!r}; use s, ms, us or ns")
    return _checked(value * scale, text, "time")
