import pytest

from core import SpecError
from core.units import parse_bandwidth, parse_bytes, parse_flops, parse_frequency, parse_time


@pytest.mark.parametrize("text, expected", [
    ("80 GB", 80e9), ("40 MiB", 40 * 2**20), ("1.5GiB", 1.5 * 2**30), (1024, 1024.0), ("8 Gb", 1e9),
])
def test_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("2039 GB/s", 2039e9), ("200 Gb/s", 25e9), ("1.5 TB/s", 1.5e12), ("100 GiB/s", 100 * 2**30),
])
def test_bandwidths(text, expected):
    assert parse_bandwidth(text) == expected


def test_times_flops_and_clocks():
    assert parse_time("5 us") == pytest.approx(5e-6)
    assert parse_time("300 ns") == pytest.approx(3e-7)
    assert parse_time("1.2 ms") == pytest.approx(1.2e-3)
    assert parse_flops("312 TFLOP/s") == 312e12
    assert parse_frequency("1410 MHz") == 1.41e9


@pytest.mark.parametrize("parse, text", [
    (parse_bytes, "80 parsecs"), (parse_bandwidth, "2039 GB"), (parse_time, "five us"),
    (parse_flops, "-3 TFLOP/s"), (parse_bytes, True),
])
def test_bad_units_name_the_field(parse, text):
    with pytest.raises(SpecError) as err:
        parse(text, "gpu.yaml", "gpu.hbm.capacity")
    assert "gpu.yaml: field 'gpu.hbm.capacity'" in str(err.value)
    assert "\n" not in str(err.value)
