"""`rapid gemm`: times by the layer graph's GEMM function and the closed-form collectives, one
JSON record per row in input order, and a bad CSV cell as one line naming where it is."""
import json

import pytest

from core.model import ops
from core.model.collectives import collective_time
from core.model.loader import load_hardware, with_dtype
from sweep.cli import main

HW = "h100-sxm5-80gb"


def records(capsys, *argv) -> list:
    assert main(["gemm", "--hardware", HW, *argv, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_one_gemm_is_the_layer_graph_gemm_time(capsys):
    [record] = records(capsys, "--m", "4096", "--n", "8192", "--k", "2048")
    hw = load_hardware(HW)
    assert record["time_s"] == record["gemm_time_s"] == ops.gemm(hw, 4096, 8192, 2048).time_s
    assert record["collective"] is None and record["collective_time_s"] == 0


def test_alone_is_the_kernel_as_a_benchmark_times_it(capsys):
    [in_step] = records(capsys, "--m", "8192", "--n", "8192", "--k", "8192")
    [alone] = records(capsys, "--m", "8192", "--n", "8192", "--k", "8192", "--alone")
    hw = load_hardware(HW)
    assert alone["gemm_time_s"] == ops.gemm(ops.kernels_alone(hw), 8192, 8192, 8192).time_s
    assert alone["alone"] and not in_step["alone"]
    # a whole step keeps step_efficiency of the kernels' rate: the same GEMM takes longer in it
    assert in_step["gemm_time_s"] > alone["gemm_time_s"]


def test_k_sharded_adds_an_all_reduce_of_the_output(capsys):
    [record] = records(capsys, "--m", "4096", "--n", "8192", "--k", "8192", "--tp", "8", "--shard", "k")
    hw = load_hardware(HW)
    dims = hw.dims_for(8)
    expected = sum(collective_time(hw, dims, "all_reduce", 4096 * 8192 * 2.0, ((0, 8),)).values())
    assert record["gemm_time_s"] == ops.gemm(hw, 4096, 8192, 1024).time_s
    assert record["collective"] == "all_reduce" and record["collective_time_s"] == pytest.approx(expected)
    assert record["time_s"] == pytest.approx(record["gemm_time_s"] + expected)


def test_n_sharded_needs_no_collective_unless_gathered(capsys):
    [plain] = records(capsys, "--m", "4096", "--n", "8192", "--k", "8192", "--tp", "4", "--shard", "n")
    [gathered] = records(capsys, "--m", "4096", "--n", "8192", "--k", "8192", "--tp", "4", "--shard", "n", "--gather")
    assert plain["collective"] is None and gathered["collective"] == "all_gather"
    assert gathered["gemm_time_s"] == plain["gemm_time_s"] and gathered["time_s"] > plain["time_s"]


def test_a_csv_is_timed_row_by_row_in_input_order(tmp_path, capsys):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("m,n,k,dtype\n8192,8192,8192,fp8\n16,4096,4096,bf16\n1,2,3,\n")
    out = records(capsys, "--shapes", str(shapes))
    assert [(r["m"], r["dtype"]) for r in out] == [(8192, "fp8"), (16, "bf16"), (1, "bf16")]
    fp8 = with_dtype(load_hardware(HW), "fp8", "test", "dtype")
    assert out[0]["gemm_time_s"] == ops.gemm(fp8, 8192, 8192, 8192).time_s


@pytest.mark.parametrize("text, words", [
    ("m,n,k\n16,x,4\n", ["row 1", "'n' = x", "positive integer"]),
    ("m,n,k,dtype\n1,2,3,bf16\n16,4,0,bf16\n", ["row 2", "'k' = 0", "positive integer"]),
    ("m,n,k,dtype\n16,4,4,int4\n", ["row 1", "'dtype' = int4", "bf16, fp16, fp8"]),
    ("m,k\n16,4\n", ["'n' = <missing>", "columns m, n, k"]),
    ("m,n,k\n", ["no data rows"]),
    ("m,n,k\n4096,8,8,9\n", ["row 1", "expected 3 values"]),
    ("m,n,k,foo\n1,2,3,4\n", ["'foo'", "unknown column"]),
    ("m,n,k,m\n1,2,3,4\n", ["'m'", "a column named twice"]),
    ("m,n,k\n\u00b2,2,3\n", ["row 1", "'m' = \u00b2", "up to 2,147,483,647"]),  # a digit to str.isdigit
    ("m,n,k\n1,2,99999999999999\n", ["row 1", "'k' = 99999999999999", "up to 2,147,483,647"]),
])
def test_a_bad_csv_cell_is_one_line_naming_file_row_column_and_value(tmp_path, capsys, text, words):
    shapes = tmp_path / "bad.csv"
    shapes.write_text(text)
    assert main(["gemm", "--hardware", HW, "--shapes", str(shapes)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(shapes) in err and all(w in err for w in words)


def test_a_spreadsheets_byte_order_mark_and_blank_lines_are_no_rows(tmp_path, capsys):
    shapes = tmp_path / "excel.csv"
    shapes.write_bytes(b"\xef\xbb\xbfm,n,k\n16,32,64\n\n8,8,8\n\n")
    assert [(r["m"], r["n"], r["k"]) for r in records(capsys, "--shapes", str(shapes))] == [(16, 32, 64), (8, 8, 8)]


def test_a_shapes_file_that_is_not_text_is_one_line(tmp_path, capsys):
    shapes = tmp_path / "binary.csv"
    shapes.write_bytes(b"\xff\xfe\x00m")
    assert main(["gemm", "--hardware", HW, "--shapes", str(shapes)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "UTF-8" in err


@pytest.mark.parametrize("argv, word", [
    (["--m", "1", "--n", "1", "--k", "1", "--tp", "2"], "--shard"),
    (["--m", "1", "--n", "1"], "--k"),
    (["--m", "1", "--n", "1", "--k", "1", "--tp", "2", "--shard", "k", "--gather"], "--gather"),
    (["--m", "1", "--n", "1", "--k", "1", "--shard", "k"], "needs --tp 2 or more"),
    (["--m", "64", "--n", "8192", "--k", "64", "--tp", "128", "--shard", "k"], "more ranks than the 64 k splits into"),
])
def test_missing_or_conflicting_options_are_one_line(capsys, argv, word):
    assert main(["gemm", "--hardware", HW, *argv]) == 2
    assert word in capsys.readouterr().err


def test_a_dimension_past_int32_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["gemm", "--hardware", HW, "--m", "3000000000", "--n", "1", "--k", "1"])
    assert stop.value.code == 2 and "expected an integer in [1, 2147483647]" in capsys.readouterr().err
