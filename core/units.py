"""Quantities with units written out: `80 GB`, `2039 GB/s`, `200 Gb/s`, `5 us`, `312 TFLOP/s`.

GB = 1e9 bytes and GiB = 2^30 bytes; a lower-case `b` means bits. Plain numbers
are taken in the base unit (bytes, bytes/s, seconds, FLOP/s, Hz).
"""
import math
import re

from .errors import SpecError

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")

_DECIMAL = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _split(text, source: str, field: str, allowed: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise SpecError(source, field, text, allowed)
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = _NUMBER.match(str(text).replace("µ", "u"))
        if not match:
            raise SpecError(source, field, text, allowed)
        value, unit = float(match.group(1)), match.group(2)
    if not math.isfinite(value):
        raise SpecError(source, field, text, f"{allowed} (a finite number)")
    return value, unit


def _scaled_bytes(unit: str) -> float | None:
    """Bytes per unit for B/KB/MiB/Gb...; None if `unit` is not a size."""
    if unit in ("", "B"):
        return 1.0
    for prefix, scale in _BINARY.items():
        if unit == prefix + "B":
            return float(scale)
        if unit == prefix + "b":
            return scale / 8.0
    for prefix, scale in _DECIMAL.items():
        if prefix and unit == prefix + "B":
            return scale
        if prefix and unit == prefix + "b":
            return scale / 8.0
    return None


def parse_bytes(text, source: str = "", field: str = "size") -> float:
    allowed = "expected a size such as 80 GB, 40 MiB or 1024 (bytes)"
    value, unit = _split(text, source, field, allowed)
    scale = _scaled_bytes(unit)
    if scale is None or value < 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def parse_bandwidth(text, source: str = "", field: str = "bandwidth") -> float:
    """Bytes per second."""
    allowed = "expected a bandwidth such as 2039 GB/s, 200 Gb/s or 1.5 TB/s"
    value, unit = _split(text, source, field, allowed)
    if unit == "":
        scale = 1.0
    elif unit.endswith("/s"):
        scale = _scaled_bytes(unit[:-2])
    elif unit.endswith("ps"):
        scale = _scaled_bytes(unit[:-2])
    else:
        scale = None
    if scale is None or value <= 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def parse_time(text, source: str = "", field: str = "time") -> float:
    """Seconds."""
    allowed = "expected a duration such as 5 us, 1.2 ms or 300 ns"
    value, unit = _split(text, source, field, allowed)
    scale = 1.0 if unit == "" else _TIME.get(unit)
    if scale is None or value < 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def parse_flops(text, source: str = "", field: str = "flops") -> float:
    """FLOP per second."""
    allowed = "expected a throughput such as 312 TFLOP/s or 19.5 TFLOPS"
    value, unit = _split(text, source, field, allowed)
    scale = None
    for suffix in ("FLOP/s", "FLOPS", "FLOPs", "flop/s", "flops"):
        if unit.endswith(suffix):
            scale = _DECIMAL.get(unit[: -len(suffix)])
            break
    if unit == "":
        scale = 1.0
    if scale is None or value <= 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def parse_frequency(text, source: str = "", field: str = "clock") -> float:
    """Hertz."""
    allowed = "expected a frequency such as 1.41 GHz or 1410 MHz"
    value, unit = _split(text, source, field, allowed)
    scale = 1.0 if unit == "" else (_DECIMAL.get(unit[:-2]) if unit.endswith("Hz") else None)
    if scale is None or value <= 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def _prefixed(text, source: str, field: str, allowed: str, symbol: str, prefixes: dict) -> float:
    """A non-negative number with a prefixed unit symbol (`1.2 kW`, `0.6 pJ`); no unit: the base unit."""
    value, unit = _split(text, source, field, allowed)
    scale = 1.0 if unit == "" else (prefixes.get(unit[:-len(symbol)]) if unit.endswith(symbol) else None)
    if scale is None or value < 0:
        raise SpecError(source, field, text, allowed)
    return value * scale


def parse_power(text, source: str = "", field: str = "power") -> float:
    """Watts."""
    return _prefixed(text, source, field, "expected a power such as 700 W or 1.2 kW", "W", _DECIMAL)


_SMALL = {"": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15}


def parse_energy(text, source: str = "", field: str = "energy") -> float:
    """Joules (an energy per FLOP or per byte is written `0.6 pJ`)."""
    return _prefixed(text, source, field, "expected an energy such as 0.6 pJ or 30 pJ", "J", _SMALL)


# (column suffix, parser) for a quantity written with units, in the order they are tried
QUANTITY_KINDS = (("bps", parse_bandwidth), ("flops", parse_flops), ("hz", parse_frequency),
                  ("s", parse_time), ("bytes", parse_bytes), ("w", parse_power))
# each kind's base unit as the parsers read it back: a value drawn in base units keeps its unit
BASE_UNITS = {"bps": "B/s", "flops": "FLOP/s", "hz": "Hz", "s": "s", "bytes": "B", "w": "W"}


def quantity(text) -> tuple[str, float] | None:
    """(kind suffix, value in base units) of a string with a unit (`2039 GB/s` -> ("bps",
    2.039e12)); None for a plain number or a string that is no quantity."""
    if not isinstance(text, str) or not re.search(r"[A-Za-z]", text):
        return None
    for suffix, parse in QUANTITY_KINDS:
        try:
            return suffix, parse(text)
        except SpecError:
            continue
    return None


# the prefixes a value is shown in, per base unit, smallest first
_PREFIXES = {
    "s": (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)),
    "B/s": (("B/s", 1.0), ("kB/s", 1e3), ("MB/s", 1e6), ("GB/s", 1e9), ("TB/s", 1e12), ("PB/s", 1e15)),
    "B": (("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15)),
    "Hz": (("Hz", 1.0), ("kHz", 1e3), ("MHz", 1e6), ("GHz", 1e9)),
    "FLOP/s": (("FLOP/s", 1.0), ("GFLOP/s", 1e9), ("TFLOP/s", 1e12), ("PFLOP/s", 1e15), ("EFLOP/s", 1e18)),
}
_SECONDS = ("s", "request_s", "step_time_s", "collective_time_s")  # what validation cases call seconds


def unit_prefix(magnitude: float, unit: str) -> tuple[str, float]:
    """(unit name, scale) to show values of about `magnitude` base units in: the largest
    prefix the magnitude reaches (2.039e12 B/s -> ("TB/s", 1e12), 5e-6 s -> ("us", 1e-6)); the
    unit itself, scale 1, for a unit without prefixes (GiB, tokens)."""
    unit = "s" if unit in _SECONDS else unit
    prefixes = _PREFIXES.get(unit)
    if not prefixes:
        return unit, 1.0
    magnitude = abs(magnitude) if math.isfinite(magnitude) else 0.0
    chosen = prefixes[0] if magnitude else next(p for p in prefixes if p[1] == 1.0)
    for name, scale in prefixes:
        if magnitude >= scale * (1 - 1e-9):
            chosen = (name, scale)
    return chosen


def format_quantity(value: float, unit: str, magnitude: float | None = None) -> str:
    """A value in base units with its unit written out, in the prefix that fits it: seconds in
    s, ms, us or ns (microsecond collectives are not "0.000 s"), bytes/s in GB/s or TB/s, bytes
    in MB or GB, Hz, FLOP/s; other units as a plain number and the unit. `magnitude` (say, a
    table column's largest value) picks the prefix instead, so one column shows one unit."""
    name, scale = unit_prefix(value if magnitude is None else magnitude, unit)
    return f"{value / scale:.4g} {name}"
