"""The kernel suite: records carry their fields and the error arithmetic is right. No accuracy
threshold: the suite reports our errors against measured kernels, it does not judge them."""
import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import SpecError
from core.model import ops
from core.model.loader import load_hardware, with_dtype
from core.model.ops.mla import mla_decode
from core.model.ops.pointwise import NVFP4_ELEMENT_SM_S, NVFP4_ROW_SM_S, ROW_BLOCK_SM_S, ROW_PASS_SM_S
from core.serving.moe import MOE_CHAIN, table_row_s
from core.validation.kernels import CUBLAS_OVER_CUTLASS_FP8, INPUT_QUANT, KERNELS_DIR, LIBRARY_PROLOGUE_S, \
    TRTLLM_BLOCK_QUANT_SM_S, TRTLLM_FP8_BLOCK_OVER_CUBLAS, VLLM_FP8_STORE_OVER_CUBLAS, VLLM_NVFP4_STORE_OVER_CUBLAS, \
    VLLM_NVFP4_TILES, cutlass_arch, error_summary, in_graph, kernel_groups, kernels_alone, vllm_fp8_tiles
from sweep.cli import main

FIELDS = {"suite", "gpu", "kernel", "dtype", "bucket", "n", "median_error_pct", "median_abs_error_pct", "mean_abs_error_pct",
          "p90_abs_error_pct"}
needs_tables = pytest.mark.skipif(not KERNELS_DIR.is_dir(), reason="no ../shared/validation/kernels")


def test_error_summary_is_predicted_over_measured_less_one():
    figures = error_summary([1.0, 3.0, 2.0, 0.5], [1.0, 2.0, 2.0, 1.0])  # errors 0, +0.5, 0, -0.5
    assert figures["n"] == 4
    assert figures["median_error_pct"] == pytest.approx(0.0)
    assert figures["median_abs_error_pct"] == pytest.approx(25.0)  # of 0, 0, 0.5, 0.5
    assert figures["mean_abs_error_pct"] == pytest.approx(25.0)
    assert figures["p90_abs_error_pct"] == pytest.approx(50.0)


def test_a_hand_made_gemm_row_is_compared_with_our_gemm_time(tmp_path):
    folder = tmp_path / "h100_sxm" / "gemm" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"m": [2048, 16], "n": [2048, 16], "k": [2048, 16], "gemm_dtype": ["bfloat16", "nvfp4"],
                             "latency": [0.5, 0.01]}), folder / "gemm_perf.parquet")
    records, skipped = kernel_groups(tmp_path)
    predicted_s = ops.gemm(kernels_alone(load_hardware("h100-sxm5-80gb")), 2048, 2048, 2048, dtype="bf16").time_s
    [record] = records
    assert FIELDS <= record.keys()
    assert (record["gpu"], record["kernel"], record["dtype"], record["bucket"]) == ("h100_sxm", "gemm", "bf16",
                                                                                    "1-100 GFLOP")
    assert record["median_error_pct"] == pytest.approx(100 * (predicted_s / 0.5e-3 - 1))
    assert [(s["reason"], s["rows"]) for s in skipped] == [("gemm nvfp4: not modelled", 1)]


def test_an_fp8_row_quantizes_its_input_as_the_tables_engine_does(tmp_path):
    """TensorRT-LLM's per-tensor FP8 GEMM (cuBLAS) takes the input's amax in a pass of its own
    before the cast (ops.fp8_cast under current scaling); vLLM's casts with one thread block per
    row (ops.row_cast) and runs CUTLASS's GEMM, 128 x 128 x 128 tiles in clusters of two at 512
    rows on Hopper, at cuBLAS's share over CUBLAS_OVER_CUTLASS_FP8, writing its output at SM90
    CUTLASS's VLLM_FP8_STORE_OVER_CUBLAS of cuBLAS's rate."""
    m, n, k = 512, 4096, 4096
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    cutlass = replace(hw, calibration=replace(
        hw.calibration, fp8_efficiency=hw.calibration.fp8_efficiency / CUBLAS_OVER_CUTLASS_FP8,
        store_efficiency=hw.calibration.store_efficiency * VLLM_FP8_STORE_OVER_CUBLAS["sm90"]))
    expected_s = {
        "trtllm": ops.gemm(hw, m, n, k, dtype="fp8").time_s
        + ops.fp8_cast(with_dtype(hw, "fp8", "test", "dtype", "current"), m * k).time_s,
        "vllm": ops.gemm(cutlass, m, n, k, dtype="fp8", tiles=((128, 128, 128, 2),)).time_s
        + ops.row_cast(hw, m, k).time_s}
    for engine, predicted_s in expected_s.items():
        folder = tmp_path / engine / "h100_sxm" / "gemm" / engine / "0.1"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"m": [m], "n": [n], "k": [k], "gemm_dtype": ["fp8"], "latency": [0.1]}),
                       folder / "gemm_perf.parquet")
        [record], _ = kernel_groups(tmp_path / engine)
        assert record["median_error_pct"] == pytest.approx(100 * (predicted_s / 0.1e-3 - 1))


def test_an_nvfp4_row_is_the_gemm_and_one_quantizing_pass(tmp_path):
    """vLLM's NVFP4 layer (FlashInfer) quantizes its BF16 input in one pass taken a row at a time
    (ops.row_cast: 2 bytes read, half a byte and one scale byte per 16 written per element, or
    its rows through the SMs where slower); its GEMM runs at the preset's (cuBLAS)
    share over CUBLAS_OVER_CUTLASS_FP8, on the persistent kernel's tiles, never split in k,
    writes its output at VLLM_NVFP4_STORE_OVER_CUBLAS of cuBLAS's rate and starts 2.8 us later
    than cuBLAS's BF16 kernel (LIBRARY_PROLOGUE_S)."""
    m, n, k = 1024, 4096, 4096
    hw = kernels_alone(load_hardware("b200-sxm-180gb"))
    flashinfer = replace(hw, calibration=replace(
        hw.calibration, nvfp4_efficiency=hw.calibration.nvfp4_efficiency / CUBLAS_OVER_CUTLASS_FP8,
        store_efficiency=hw.calibration.store_efficiency * VLLM_NVFP4_STORE_OVER_CUBLAS))
    folder = tmp_path / "b200_sxm" / "gemm" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"m": [m], "n": [n], "k": [k], "gemm_dtype": ["nvfp4"], "latency": [0.05]}),
                   folder / "gemm_perf.parquet")
    [record], _ = kernel_groups(tmp_path)
    predicted_s = (ops.gemm(flashinfer, m, n, k, dtype="nvfp4", tiles=VLLM_NVFP4_TILES).time_s
                   + ops.row_cast(hw, m, k, "nvfp4").time_s + 2.8e-6)
    assert LIBRARY_PROLOGUE_S["vllm", "nvfp4", "sm100"] == 2.8e-6
    assert (record["dtype"], record["median_error_pct"]) == ("nvfp4", pytest.approx(100 * (predicted_s / 0.05e-3 - 1)))


def test_a_short_k_nvfp4_row_is_its_output_written_at_its_kernels_rate(tmp_path):
    """16384 x 16384 BF16 outputs over k = 64: 512 MiB written at 0.742 of the rate of cuBLAS's
    BF16 epilogue (0.634 of B200's 7.7 TB/s), after the input's one quantizing pass: 16,384 rows
    over B200's 148 SMs, 111 on the busiest, at NVFP4_ROW_SM_S and 64 x NVFP4_ELEMENT_SM_S each;
    the kernel's late start on top."""
    m, n, k = 16384, 16384, 64
    hw = kernels_alone(load_hardware("b200-sxm-180gb"))
    folder = tmp_path / "b200_sxm" / "gemm" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"m": [m], "n": [n], "k": [k], "gemm_dtype": ["nvfp4"], "latency": [0.3]}),
                   folder / "gemm_perf.parquet")
    [record], _ = kernel_groups(tmp_path)
    written_s = m * n * 2 / (hw.gpu.hbm.bandwidth_bps * 0.634 * VLLM_NVFP4_STORE_OVER_CUBLAS)
    cast_s = 111 * (NVFP4_ROW_SM_S + k * NVFP4_ELEMENT_SM_S)
    predicted_s = written_s + ops.launch_s(hw) + cast_s + ops.launch_s(hw) + LIBRARY_PROLOGUE_S["vllm", "nvfp4", "sm100"]
    assert (hw.calibration.store_efficiency, VLLM_NVFP4_STORE_OVER_CUBLAS) == (0.634, 0.742)
    assert record["median_error_pct"] == pytest.approx(100 * (predicted_s / 0.3e-3 - 1))


def test_a_short_k_fp8_row_on_blackwell_writes_its_output_at_sm100_cutlasss_rate(tmp_path):
    """vLLM's FP8 GEMM on a B200 is CUTLASS's SM100 kernel (cutlass_arch), whose epilogue writes
    at 0.503 of cuBLAS's BF16 rate and which starts 0.8 us later: 16384 x 16384 BF16 outputs over
    k = 64, 512 MiB at 0.634 x 0.503 of B200's 7.7 TB/s, after the input's cast, 16,384 rows of
    one pass over 148 SMs (111 on the busiest)."""
    m, n, k = 16384, 16384, 64
    hw = kernels_alone(load_hardware("b200-sxm-180gb"))
    assert (cutlass_arch(hw), cutlass_arch(load_hardware("h100-sxm5-80gb"))) == ("sm100", "sm90")
    folder = tmp_path / "b200_sxm" / "gemm" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"m": [m], "n": [n], "k": [k], "gemm_dtype": ["fp8"], "latency": [0.3]}),
                   folder / "gemm_perf.parquet")
    [record], _ = kernel_groups(tmp_path)
    written_s = m * n * 2 / (hw.gpu.hbm.bandwidth_bps * 0.634 * VLLM_FP8_STORE_OVER_CUBLAS["sm100"])
    cast_s = 111 * (ROW_BLOCK_SM_S + ROW_PASS_SM_S)
    assert (VLLM_FP8_STORE_OVER_CUBLAS["sm100"], LIBRARY_PROLOGUE_S["vllm", "fp8", "sm100"]) == (0.503, 0.8e-6)
    assert record["median_error_pct"] == pytest.approx(
        100 * ((written_s + cast_s + 2 * ops.launch_s(hw) + 0.8e-6) / 0.3e-3 - 1))


def test_block_scaled_fp8_rows_are_timed_for_tensorrt_llm_and_skipped_for_vllm(tmp_path):
    """TensorRT-LLM's fp8_block row: its own block-scaled FP8 GEMM (TRTLLM_FP8_BLOCK_OVER_CUBLAS of
    cuBLAS's share, its output written after its tiles) and one quantizing pass launched as in a
    CUDA graph (gpu.graph_launch_overhead), its 8.4 M elements through H100's 132 SMs at
    TRTLLM_BLOCK_QUANT_SM_S each (14 us), slower than their 3 bytes and a 4-byte scale per 128 over
    HBM (7.6 us); vLLM's were timed without CUDA graphs and are counted as skipped."""
    m, n, k = 2048, 4096, 4096
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    for engine in ("trtllm", "vllm"):
        folder = tmp_path / "h100_sxm" / "gemm" / engine / "0.1"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"m": [m], "n": [n], "k": [k], "gemm_dtype": ["fp8_block"], "latency": [0.1]}),
                       folder / "gemm_perf.parquet")
    [record], skipped = kernel_groups(tmp_path)
    trtllm_kernel = replace(hw, fp8_recipe="block-scaled", calibration=replace(
        hw.calibration, fp8_block_efficiency=hw.calibration.fp8_block_efficiency * TRTLLM_FP8_BLOCK_OVER_CUBLAS))
    cast_s = m * k * TRTLLM_BLOCK_QUANT_SM_S / 132
    assert cast_s > m * k * (2 + 1 + 4 / 128) / hw.gpu.hbm.bandwidth_bps
    predicted_s = (ops.gemm(trtllm_kernel, m, n, k, dtype="fp8", epilogue_in_series=True).time_s
                   + cast_s + hw.gpu.graph_launch_overhead_s)
    assert in_graph(hw).gpu.launch_overhead_s == hw.gpu.graph_launch_overhead_s == 1e-6
    assert (record["framework"], record["dtype"]) == ("trtllm 0.1", "fp8 block")
    assert record["median_error_pct"] == pytest.approx(100 * (predicted_s / 0.1e-3 - 1))
    assert [(s["reason"], s["rows"]) for s in skipped] == [("gemm fp8_block in vLLM: timed without CUDA graphs, host-bound", 1)]


def test_attention_rows_are_timed_by_the_kernel_that_ran_them(tmp_path):
    """vLLM's context table on B200: a prompt of one token its decode kernel ran is its decode op
    over one cached token; a row its Triton fallback ran (head_dim 192 over an FP8 cache) is not
    modelled and counted as skipped, whatever its shape; a FlashInfer prefill row is the engine's
    prefill op."""
    hw = kernels_alone(load_hardware("b200-sxm-180gb"))
    folder = tmp_path / "b200_sxm" / "attention" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({
        "kernel_source": ["vllm_flashinfer_trtllmdecode", "vllm_triton_attn", "vllm_flashinfer_trtllmprefill"],
        "batch_size": [64, 1, 2], "isl": [1, 8192, 1024], "num_heads": [32, 64, 32], "num_key_value_heads": [8, 4, 8],
        "head_dim": [128, 192, 128], "window_size": [0, 0, 0], "attn_dtype": ["bfloat16"] * 3,
        "kv_cache_dtype": ["bfloat16", "fp8", "bfloat16"], "latency": [0.01, 25.0, 0.05]}),
        folder / "context_attention_perf.parquet")
    records, skipped = kernel_groups(tmp_path)
    decode_s = ops.decode_attention(hw, 64, 32, 8, 1, 128, 2, "vllm").time_s
    prefill_s = ops.flash_attention(hw, 2 * 32, 1024, 1024, 128, 4, True, kernel="vllm").time_s
    by_bucket = {r["bucket"]: r["median_error_pct"] for r in records}
    assert by_bucket == {"<1 GFLOP": pytest.approx(100 * (decode_s / 0.01e-3 - 1)),
                         "1-100 GFLOP": pytest.approx(100 * (prefill_s / 0.05e-3 - 1))}
    assert [(s["reason"], s["rows"]) for s in skipped] == [
        ("attention by vLLM's Triton attention (its Blackwell fallback at head_dim 192 over an FP8 cache): "
         "not modelled", 1)]


def test_a_decode_row_of_vllms_triton_fallback_is_skipped_not_timed(tmp_path):
    """vLLM's generation table on B200: the row its Triton fallback ran is counted as skipped with
    its reason; the FlashInfer decode row beside it is compared."""
    folder = tmp_path / "b200_sxm" / "attention" / "vllm" / "0.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({
        "kernel_source": ["vllm_triton_attn", "vllm_flashinfer_trtllmdecode"], "batch_size": [8, 8],
        "num_heads": [64, 32], "num_key_value_heads": [4, 8], "head_dim": [192, 128], "step": [4096, 4096],
        "window_size": [0, 0], "attn_dtype": ["bfloat16"] * 2, "kv_cache_dtype": ["fp8", "bfloat16"],
        "latency": [0.2, 0.05]}), folder / "generation_attention_perf.parquet")
    records, skipped = kernel_groups(tmp_path)
    assert [(r["kernel"], r["dtype"], r["n"]) for r in records] == [("attention.decode", "bf16", 1)]
    assert [s["rows"] for s in skipped] == [1] and "Triton" in skipped[0]["reason"]


def test_tensorrt_llms_block_cast_is_the_slower_of_its_sms_and_its_bytes():
    """TensorRT-LLM's 1 x 128 FP8 cast of 2,048 x 4,096 elements on an H100, in a CUDA graph
    (1 us of launch): 0.22 ns of one SM an element over 132 SMs, 14 us, beside 25.4 MB over
    HBM, 7.6 us, so the SMs bind; with a tenth of the HBM bandwidth the bytes do."""
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    cast = INPUT_QUANT["trtllm", "fp8_block"]
    elements, moved = 2048 * 4096, 2048 * 4096 * (2 + 1 + 4 / 128)
    assert TRTLLM_BLOCK_QUANT_SM_S == 0.22e-9
    assert cast(hw, 2048, 4096).time_s == pytest.approx(elements * 0.22e-9 / 132 + 1e-6)
    slow = replace(hw, gpu=replace(hw.gpu, hbm=replace(hw.gpu.hbm, bandwidth_bps=hw.gpu.hbm.bandwidth_bps / 10)))
    assert cast(slow, 2048, 4096).time_s == pytest.approx(moved / ops.mixed_bandwidth_bps(slow) + 1e-6)


def test_vllm_dispatches_its_fp8_tile_by_rows_and_gpu():
    """vLLM's CUTLASS FP8 configurations, tile over m first (swap-AB ones written that way), with
    their clusters' extent over m where it is more than one tile."""
    hopper, blackwell = load_hardware("h100-sxm5-80gb"), load_hardware("b200-sxm-180gb")
    assert vllm_fp8_tiles(hopper, 16, 1280, 4096) == ((16, 64, 256, 2),)
    assert vllm_fp8_tiles(hopper, 16, 1281, 4096) == ((16, 64, 256),)
    assert vllm_fp8_tiles(hopper, 17, 1280, 4096) == ((16, 64, 256, 4),)
    assert vllm_fp8_tiles(hopper, 64, 1281, 4096) == ((64, 64, 256),)
    assert vllm_fp8_tiles(hopper, 65, 4096, 4096) == ((64, 128, 128, 2),)
    assert vllm_fp8_tiles(hopper, 128, 4096, 4096) == ((64, 128, 128, 2),)
    assert vllm_fp8_tiles(hopper, 129, 4096, 4096) == ((128, 128, 128, 2),)
    assert vllm_fp8_tiles(hopper, 4096, 4096, 4096) == ((128, 128, 128, 2),)
    assert vllm_fp8_tiles(blackwell, 8, 4096, 4096) == ((32, 128, 128),)
    assert vllm_fp8_tiles(blackwell, 64, 4096, 2048) == ((64, 64, 128),)
    assert vllm_fp8_tiles(blackwell, 64, 4096, 8192) == ((64, 128, 256),)
    assert vllm_fp8_tiles(blackwell, 200, 4096, 4096) == ((64, 128, 128, 2),)  # a 2-SM 128-row tile
    assert vllm_fp8_tiles(blackwell, 4096, 4096, 4096) == ((128, 128, 128, 2),)


def test_a_gemm_of_fixed_tiles_never_splits_k():
    """One 128 x 128 output tile over k = 65,536 runs on one SM with a fixed tile: at least its
    2.1 GFLOP at one SM's share of the FP8 rate; free to split k, the library spreads it."""
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    one_sm_s = 2.0 * 128 * 128 * 65536 / (ops.tensor_rate_flops(hw, "fp8") / hw.gpu.sm_count)
    assert ops.gemm(hw, 128, 128, 65536, dtype="fp8", tiles=((128, 128, 128),)).time_s >= one_sm_s
    assert ops.gemm(hw, 128, 128, 65536, dtype="fp8").time_s < one_sm_s / 4


def test_a_row_cast_is_bound_by_its_rows_thread_blocks():
    """vLLM's FP8 cast on an H100 (132 SMs) gives each row a thread block that takes it 2,048
    elements a pass, and the SM dealt the most rows sets the time: 32,768 rows of 64 elements
    are 6 MiB, about 2 us of HBM, but 249 rows of one pass on the busiest SM (ROW_BLOCK_SM_S +
    ROW_PASS_SM_S each), 204 us. 16,384 rows of 16,384: 0.8 GB, 0.3 ms of HBM, but 125 rows of
    eight passes, 0.54 ms. A row of 2,048 costs what a row of one does, one more element adds a
    pass; three rows of 65,536 take one row's 32 passes, 16 us, on three SMs of 132."""
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    short = ops.row_cast(hw, 32768, 64)
    assert short.time_s == pytest.approx(249 * (ROW_BLOCK_SM_S + ROW_PASS_SM_S) + ops.launch_s(hw))
    assert short.hbm_bytes == 32768 * 64 * 3
    square = ops.row_cast(hw, 16384, 16384)
    assert 16384 * 16384 * 3 / ops.mixed_bandwidth_bps(hw) < square.time_s - ops.launch_s(hw) == pytest.approx(
        125 * (ROW_BLOCK_SM_S + 8 * ROW_PASS_SM_S))
    assert ops.row_cast(hw, 1024, 1).time_s == ops.row_cast(hw, 1024, 2048).time_s
    assert ops.row_cast(hw, 1024, 2049).time_s - ops.row_cast(hw, 1024, 2048).time_s == pytest.approx(
        8 * ROW_PASS_SM_S)  # 8 rows, ceil(1024 / 132), on the busiest SM
    assert ops.row_cast(hw, 3, 65536).time_s == pytest.approx(ROW_BLOCK_SM_S + 32 * ROW_PASS_SM_S + ops.launch_s(hw))


def test_an_nvfp4_cast_takes_its_rows_through_the_sms_too():
    """vLLM's NVFP4 input quantization on a B200 (148 SMs): 32,768 rows of 64 elements write one
    byte per two elements plus a scale byte per 16 (2.5625 bytes an element with the BF16 read),
    5 MiB, under 1 us of HBM, but 222 rows on the busiest SM at NVFP4_ROW_SM_S and 64 x
    NVFP4_ELEMENT_SM_S each, 18.4 us; one row of 1,024 costs its launch and the row's time on one
    SM (126 ns), more than its 2.6 kB over HBM."""
    hw = kernels_alone(load_hardware("b200-sxm-180gb"))
    short = ops.row_cast(hw, 32768, 64, "nvfp4")
    assert short.hbm_bytes == pytest.approx(32768 * 64 * 2.5625)
    assert short.time_s == pytest.approx(222 * (NVFP4_ROW_SM_S + 64 * NVFP4_ELEMENT_SM_S) + ops.launch_s(hw))
    one = ops.row_cast(hw, 1, 1024, "nvfp4")
    assert one.time_s == pytest.approx(NVFP4_ROW_SM_S + 1024 * NVFP4_ELEMENT_SM_S + ops.launch_s(hw))
    assert 1024 * 2.5625 / ops.mixed_bandwidth_bps(hw) < one.time_s - ops.launch_s(hw)


def test_missing_tables_are_one_clear_error(tmp_path):
    with pytest.raises(SpecError, match="kernel tables"):
        kernel_groups(tmp_path / "absent")


@needs_tables
def test_a_slice_of_every_table_gives_records_with_their_fields():
    records, skipped = kernel_groups(gpus={"h100_sxm"}, max_rows=200)
    kernels = {r["kernel"].split(".")[0] for r in records}
    assert {"gemm", "attention", "nccl"} <= kernels
    assert all(FIELDS <= r.keys() and r["suite"] == "kernels" and r["n"] > 0 for r in records)
    assert all(s["rows"] > 0 and s["reason"] for s in skipped)


@needs_tables
def test_validate_json_carries_the_groups(monkeypatch, capsys):
    from core.validation import kernels

    monkeypatch.setattr(kernels, "kernel_groups", lambda: kernel_groups(gpus={"a100_sxm"}, max_rows=100))
    assert main(["validate", "--suite", "kernels", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cases"] == [] and out["groups"] and all(FIELDS <= g.keys() for g in out["groups"])


def test_an_expert_parallel_moe_row_runs_its_share_of_the_copies():
    """AIConfigurator's collector routes a row's tokens over all the experts and times the GPU's
    1 / ep share of them: 8 GPUs of expert parallelism run 1/8 of the copies of one GPU."""
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    one = table_row_s(hw, 4096, 1536, 128, 8, 8192, 1, 1) - MOE_CHAIN * hw.gpu.launch_overhead_s
    eight = table_row_s(hw, 4096, 1536, 128, 8, 8192, 1, 8) - MOE_CHAIN * hw.gpu.launch_overhead_s
    assert eight == pytest.approx(one / 8, rel=0.05)


def test_hand_made_mla_decode_and_moe_rows_are_compared_with_our_kernels(tmp_path):
    mla = tmp_path / "h100_sxm" / "mla" / "trtllm" / "0.1"
    moe = tmp_path / "h100_sxm" / "moe" / "vllm" / "0.1"
    mla.mkdir(parents=True)
    moe.mkdir(parents=True)
    pq.write_table(pa.table({"batch_size": [64], "num_heads": [16], "step": [4095], "mla_dtype": ["bfloat16"],
                             "kv_cache_dtype": ["bfloat16"], "latency": [0.2]}), mla / "generation_mla_perf.parquet")
    pq.write_table(pa.table({"kernel_source": ["triton"], "moe_dtype": ["bfloat16"], "num_tokens": [64],
                             "hidden_size": [4096], "inter_size": [1536], "topk": [8], "num_experts": [128],
                             "moe_tp_size": [1], "moe_ep_size": [1], "distribution": ["balanced"], "latency": [0.5]}),
                   moe / "moe_perf.parquet")
    records, _ = kernel_groups(tmp_path)
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))
    decode_s = mla_decode(hw, 64, 16, 4096, 512, 64, 2, "trtllm").time_s  # the table's engine's MLA kernel
    # 512 routed rows over 128 experts: 4 rows each, one grouped GEMM up (gate and up), one down,
    # and the routing chain's MOE_CHAIN launches (the fitted grouped kernel does not bind here)
    moe_s = (ops.gemm(hw, 4, 2 * 1536, 4096, 128).time_s + ops.pointwise(hw, 3 * 4 * 128 * 1536 * 2).time_s
             + ops.gemm(hw, 4, 4096, 1536, 128).time_s + MOE_CHAIN * hw.gpu.launch_overhead_s)
    by_kernel = {r["kernel"]: r["median_error_pct"] for r in records}
    assert by_kernel["mla.decode"] == pytest.approx(100 * (decode_s / 0.2e-3 - 1))
    assert by_kernel["moe.experts"] == pytest.approx(100 * (moe_s / 0.5e-3 - 1))
