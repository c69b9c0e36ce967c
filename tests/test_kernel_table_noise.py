"""A kernel table contradicts itself where a deeper GEMM of the same m x n ran much faster than a
shallower one: scripts/kernel_table_noise.py counts those rows, the floor under any model whose
time grows with k."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import kernel_table_noise as noise  # noqa: E402


def test_a_shallower_gemm_taking_a_fifth_longer_marks_both_rows():
    # 10 us at k = 32 against 5 us at k = 64: out of order by 2x; 5 -> 12 us is in order
    assert noise.inverted({32: 10e-6, 64: 5e-6, 128: 12e-6}) == {32, 64}
    # exactly 20 % longer at the shallower depth is out of order; 10 % is not
    assert noise.inverted({32: 12e-6, 64: 10e-6}) == {32, 64}
    assert noise.inverted({32: 11e-6, 64: 10e-6}) == set()


def test_a_series_growing_with_depth_has_no_inverted_row():
    assert noise.inverted({k: k * 1e-9 for k in (32, 64, 128, 256)}) == set()


def test_shares_count_rows_per_dtype_and_size_bucket():
    rows = [
        # 64 x 64: k = 32 and 64 out of order (0.26 and 0.52 MFLOP: under 1 GFLOP), k = 128 not
        (64, 64, 32, "bfloat16", 10e-6), (64, 64, 64, "bfloat16", 5e-6), (64, 64, 128, "bfloat16", 6e-6),
        # 4096 x 4096 x 1024 (34 GFLOP) and x 4096 (137 GFLOP), in order
        (4096, 4096, 1024, "bfloat16", 50e-6), (4096, 4096, 4096, "bfloat16", 180e-6),
        # the same shape in another dtype is its own series
        (64, 64, 32, "fp8", 4e-6),
    ]
    assert noise.inverted_shares(rows) == {("bfloat16", "<1 GFLOP"): (3, 2), ("bfloat16", "1-100 GFLOP"): (1, 0),
                                           ("bfloat16", ">=100 GFLOP"): (1, 0), ("fp8", "<1 GFLOP"): (1, 0)}
