"""Tiled GEMMs over the SRAM / L2 / HBM hierarchy, memoized by shape."""
from functools import lru_cache
from math import ceil, gcd, sqrt

from ..specs import BLOCK_SCALES, DTYPE_BYTES, HardwareSpec, activation_dtype, gemm_recipe, quantized_bytes
from .common import (KernelTime, launch_s, mixed_bandwidth_bps, store_bandwidth_bps, stream_bandwidth_bps,
                     tensor_rate_flops)

# (tile_m, tile_n, tile_k) candidates a GEMM library would pick from.
GEMM_TILES = ((256, 128, 32), (128, 256, 32), (128, 128, 32), (128, 64, 64), (64, 128, 64),
              (64, 64, 64), (64, 32, 64), (32, 64, 64))
SPLIT_K = (1, 2, 4, 8, 16)
# A library that sizes the token side of its tiles to the batch (gpu.token_tile_step) also
# offers m split into 1 to TOKEN_TILE_COUNTS tiles of at most TOKEN_TILE_MAX rows (Hopper's
# warpgroup MMA: N up to 256), each padded to the step, TOKEN_TILE_N wide and TOKEN_TILE_K deep:
# our profiles of the H100 and H200 tables' grids (scripts/gemm_grid_report.py) show cuBLAS
# padding m by a median 3-6 % at 64 to 384 rows so, where the fixed tiles pad m to a multiple of
# their 32 to 256 rows (257 rows: 288 in 32-row tiles, 384 in 128-row ones). Larger m keeps the
# fixed tiles alone (docs/accuracy.md, "Tiles sized to the batch", says what sizing it does).
TOKEN_TILE_MAX = 256
TOKEN_TILE_COUNTS = 4
TOKEN_TILE_N = 128
TOKEN_TILE_K = 64
# A library whose MMA takes tile widths in steps (gpu.wide_tile_step) also offers tiles of
# WIDE_TILE_M rows by every such width strictly between 128 and 256 columns, WIDE_TILE_K deep (as
# GEMM_TILES' tiles of 128 rows). Not of 256 rows: their FP32 accumulators would take more than
# half an SM's registers, which _tilings refuses.
WIDE_TILE_M = 128
WIDE_TILE_K = 32
PIPELINE_STAGES = 3  # shared-memory buffers per operand (cp.async multi-stage pipeline)
L2_USABLE_FRACTION = 0.5  # of L2 a GEMM's operands can keep resident while streaming
# Share of the shorter of a GEMM's compute and memory times its pipeline leaves exposed: the
# operand loads that fill the pipeline before the first MMA and the output stores after the
# last (fitted with the shares on H100's measured tables, scripts/fit_gemm.py).
EXPOSED_OVERLAP = 0.3
# The wait of a stream-K tile's owner for its sharers' partial sums beyond moving them (the
# flag each sharer sets once its partial is written, polled through L2): chosen on H100's BF16
# and TensorRT-LLM FP8 GEMM tables with gpu.stream_k on and the shares refitted (0, 1, 2 and
# 4 us tried; 2 us leaves the GEMMs under 1 GFLOP as they were without stream-K), H200's held out.
STREAM_K_SYNC_S = 2e-6
SCALE_BLOCK_K = BLOCK_SCALES["fp8"][0]  # depth of block-scaled FP8's scale blocks along k

@lru_cache(maxsize=65536)
def gemm(hw: HardwareSpec, m: int, n: int, k: int, batch: int = 1, dtype: str = "",
         weights: bool = True, tiles: tuple = (), epilogue_in_series: bool = False,
         weight_bytes: float = 0.0) -> KernelTime:
    """C[m,n] = A[m,k] @ B[k,n], `batch` independent products, with operands in `dtype`
    (default: the hardware's compute dtype) at that dtype's peak. A block-scaled dtype's
    operands carry their scales (quantized_bytes: NVFP4 reads 0.5625 bytes an element, not
    0.5). FP8 GEMMs write their output in BF16, as Transformer Engine's do. With `weights`, B
    is a weight matrix, swept from HBM as one long read stream (stream_efficiency); activations
    in and out move at the elementwise kernels' rate (memory_efficiency); writing the output is
    a bound of its own (store_efficiency), which short-k GEMMs of many tiles reach. The library
    picks the best of GEMM_TILES (with tiles sized to m where it sizes them to the batch,
    gpu.token_tile_step, and tiles of the widths its MMA takes, gpu.wide_tile_step) and SPLIT_K;
    given `tiles`, a library that dispatches fixed (tile_m, tile_n, tile_k) choices by shape
    and never splits k takes the best of those; a fourth entry is the thread-block
    cluster's extent over m in tiles, to whose multiple the tile rows round up (a cluster
    launches whole: its tiles past m run their MMAs on zeros). A GEMM split in k is two
    kernels, the split GEMM and the kernel summing its partials, which starts behind it after
    the GPU's gap between queued kernels (gpu.graph_launch_overhead). Block-scaled FP8 on an
    MMA without block scales runs each tile's k-blocks in turn (gpu.block_scale_step) and never
    splits k. On a GPU whose library runs stream-K (gpu.stream_k), a single product whose tiles
    it picks may also deal the tiles' k-iterations out evenly over the SMs. With
    `epilogue_in_series`, a kernel whose math warps write each tile's output themselves before
    the next tile's MMAs (DeepGEMM's), writing the output adds to the time rather than bounding
    it. `weight_bytes` is what B takes in HBM per element where it is stored narrower than
    `dtype` and widened in the kernel (a weight-only quantized checkpoint: gpt-oss's MXFP4
    experts in a BF16 engine); 0 = the dtype's."""
    gpu = hw.gpu
    dtype = dtype or hw.dtype
    recipe = gemm_recipe(dtype, hw.recipe)
    in_bytes = quantized_bytes(dtype, recipe)
    b_in_bytes = weight_bytes or quantized_bytes(dtype, recipe, weights=weights)
    out_bytes = DTYPE_BYTES[activation_dtype(dtype)]
    per_sm_flops = tensor_rate_flops(hw, dtype) / gpu.sm_count
    per_sm_sram = gpu.sram.bandwidth_bps / gpu.sm_count
    mixed_bw = mixed_bandwidth_bps(hw)
    b_bw = stream_bandwidth_bps(hw) if weights else mixed_bw
    l2_bw = gpu.l2.bandwidth_bps * gpu.operand_multicast
    unique_in = (m * k * in_bytes + k * n * b_in_bytes) * batch
    block_step_s = gpu.block_scale_step_s if dtype == "fp8" and recipe == "block-scaled" else 0.0
    best = float("inf")
    best_hbm = unique_in + m * n * out_bytes * batch
    free = not (tiles or block_step_s)  # the library picks its tiles, splits and schedule
    per_sm_l2_bps = gpu.l2.bandwidth_bps / gpu.sm_count
    stream_k = free and gpu.stream_k and batch == 1  # batched products run their tiles data-parallel
    offered = tiles or GEMM_TILES + ((token_sized_tiles(m, gpu.token_tile_step) + wide_tiles(gpu.wide_tile_step))
                                     if free else ())
    choices = _tilings(gpu.sm_count, gpu.sram.capacity_bytes, gpu.register_bytes_per_sm, gpu.l2.capacity_bytes,
                       in_bytes, out_bytes, m, n, k, batch, offered, SPLIT_K if free else SPLIT_K[:1],
                       b_in_bytes, stream_k)
    for (flops_per_sm, sram_per_sm, l2_bytes, activation_bytes, b_bytes, k_blocks_per_sm, reduces,
         fixup_bytes_per_sm) in choices:
        compute_s = max(flops_per_sm / per_sm_flops, sram_per_sm / per_sm_sram, l2_bytes / l2_bw,
                        k_blocks_per_sm * block_step_s)
        if fixup_bytes_per_sm:  # a stream-K tile's owner sums its sharers' partials after its own share
            compute_s += fixup_bytes_per_sm / per_sm_l2_bps + STREAM_K_SYNC_S
        memory_s = activation_bytes / mixed_bw + b_bytes / b_bw
        time_s = (max(compute_s, memory_s) + EXPOSED_OVERLAP * min(compute_s, memory_s)
                  + reduces * gpu.graph_launch_overhead_s)
        if time_s < best:
            best, best_hbm = time_s, activation_bytes + b_bytes
    store_s = m * n * out_bytes * batch / store_bandwidth_bps(hw)
    best = best + store_s if epilogue_in_series else max(best, store_s)
    return KernelTime(best + launch_s(hw), 2.0 * m * n * k * batch, best_hbm)


def token_sized_tiles(m: int, step: int) -> tuple:
    """The tiles a library sizing their token side to `m` in steps of `step` rows adds to
    GEMM_TILES (the TOKEN_TILE_* constants); () for step 0, a library of fixed tiles."""
    if not step:
        return ()
    rows = dict.fromkeys(size for count in range(1, TOKEN_TILE_COUNTS + 1)
                         if 0 < (size := ceil(m / count / step) * step) <= TOKEN_TILE_MAX)
    tiles = ((tile_m, TOKEN_TILE_N, TOKEN_TILE_K) for tile_m in rows)
    return tuple(tile for tile in tiles if tile not in GEMM_TILES)


@lru_cache(maxsize=None)
def wide_tiles(step: int) -> tuple:
    """The tiles a library whose MMA widths come in steps of `step` columns adds to GEMM_TILES:
    WIDE_TILE_M rows by each width strictly between 128 and 256; () for step 0."""
    if not step:
        return ()
    return tuple((WIDE_TILE_M, width, WIDE_TILE_K) for width in range(128 + step, 256, step))


@lru_cache(maxsize=65536)
def _tilings(sm_count: int, sram_bytes: float, register_bytes: float, l2_capacity_bytes: float, in_bytes: float,
             out_bytes: float, m: int, n: int, k: int, batch: int, tiles: tuple = GEMM_TILES,
             splits: tuple = SPLIT_K, b_in_bytes: float = 0.0, stream_k: bool = False) -> tuple:
    """The (tile, split-K) choices a GEMM of this shape has on a GPU of this build, each as what
    it leaves to the rates: (FLOPs per SM, SRAM bytes per SM, L2 bytes, HBM bytes of
    activations and output, HBM bytes of B, scale blocks of k an SM runs in turn, kernels after
    it that sum split partials, bytes of partial sums an SM moves through L2 in turn with its
    MMAs). Apart from the clock and bandwidths, so hardware variants apart only in rates (a
    bandwidth what-if, a probe clock) share them. B takes `b_in_bytes` per element in HBM (0:
    `in_bytes`). With `stream_k`, a tile shape whose grid leaves a last wave partly empty (or
    is smaller than one wave) may offer the stream-K schedule too, unless an even share of its
    k-iterations comes to whole tiles."""
    b_in_bytes = b_in_bytes or in_bytes
    unique_in = (m * k * in_bytes + k * n * b_in_bytes) * batch
    out_total = m * n * out_bytes * batch
    choices = []
    for tm, tn, tk, *cluster in tiles:
        smem = (tm + tn) * tk * in_bytes * PIPELINE_STAGES
        accum = tm * tn * 4
        if smem > sram_bytes or accum > register_bytes / 2:
            continue
        ctas_per_sm = max(1, min(int(sram_bytes // smem), int(register_bytes / 2 // accum)))
        cluster_m = cluster[0] if cluster else 1
        tiles_m, tiles_n = ceil(m / (tm * cluster_m)) * cluster_m, ceil(n / tn)
        a_reads = b_reads = 1
        if unique_in > l2_capacity_bytes * L2_USABLE_FRACTION:
            # Operands no longer stay resident: A is re-read once per group of tile
            # columns running together, B once per group of tile rows.
            slots = sm_count * ctas_per_sm
            rows = min(tiles_m, max(1, int(sqrt(slots))))
            cols = min(tiles_n, max(1, slots // rows))
            a_reads, b_reads = ceil(tiles_n / cols), ceil(tiles_m / rows)
        a_bytes = m * k * in_bytes * batch * a_reads
        b_bytes = k * n * b_in_bytes * batch * b_reads
        for split in splits:
            k_part = ceil(k / split)
            if split > 1 and (k_part < 4 * tk or tiles_m * tiles_n * batch >= sm_count):
                break
            k_pad = ceil(k_part / tk) * tk
            tiles = tiles_m * tiles_n * batch * split
            per_sm_tiles = ceil(tiles / sm_count)
            choices.append((per_sm_tiles * 2.0 * tm * tn * k_pad, per_sm_tiles * (tm + tn) * k_pad * in_bytes,
                            tiles * (tm + tn) * k_pad * in_bytes + out_total * split,
                            a_bytes + out_total + (2 * m * n * 4 * batch * split if split > 1 else 0),
                            b_bytes, per_sm_tiles * ceil(k_part / SCALE_BLOCK_K), int(split > 1), 0))
        if not stream_k:
            continue
        output_tiles = tiles_m * tiles_n * batch
        k_iters = ceil(k / tk)
        per_sm_iters = ceil(output_tiles * k_iters / sm_count)
        if k_iters and per_sm_iters % k_iters:
            # Stream-K: the tiles' k-iterations dealt out evenly over the SMs, each SM's share a
            # run of per_sm_iters, so a last partial wave (or a grid under one wave) leaves no SM
            # idle. A tile whose k-loop spans the runs of several SMs (at most `sharers`) is
            # summed through L2: each SM writes its FP32 partial tile and the tile's owner reads
            # the others' back after its own share, at most sharers tiles an SM moves in turn
            # with its MMAs; in all, a partial written and read for each run's end inside a tile.
            sharers = ceil((k_iters - 1) / per_sm_iters) + 1
            partial_bytes = tm * tn * 4
            run_ends = ceil(output_tiles * k_iters / per_sm_iters) - 1
            cuts = run_ends - run_ends // (k_iters // gcd(per_sm_iters, k_iters))
            choices.append((per_sm_iters * 2.0 * tm * tn * tk, per_sm_iters * (tm + tn) * tk * in_bytes,
                            output_tiles * (tm + tn) * k_iters * tk * in_bytes + out_total + 2 * cuts * partial_bytes,
                            a_bytes + out_total, b_bytes, 0, 0, sharers * partial_bytes))
    return tuple(choices)
