"""The accuracy reached so far, per validation suite: a change that makes any suite's
worst or mean error larger, or turns a verdict that agrees into one that does not, fails
here. Bounds sit just above the figures measured when they were set (see the commit that
set them) and move down; where one rose, the comment below says what raised it and why it was
taken."""
import pytest

from core.validation.suites import SUITES, summary

# suite: (max |error| %, mean |error| %, verdicts allowed to disagree)
# training rose when NCCL protocol latencies entered every collective: the A100 factors
# refitted under them give gpt-1t +4.9 % (held out). inference fell to 3.3 % once decode GEMMs
# read their weights at stream_efficiency, apart from elementwise kernels, and to 3.1 % once
# the prefill emitted the first output token (one decode step fewer per request).
# memory_h100's mean rose from 6.4 when its Bridge figures became first-iteration peaks (what
# the performance harness reads; core.validation.corpus._memory_measurement) and FP8 weight transposes were
# counted: all four within 10 % (max 10.8 before), each 4-5 GB under.
# training stays at 4.96 / 2.8 with compute_efficiency fitted on Korthikanti's, FlashAttention's
# and llm-foundry's rows together (memory_efficiency no longer fitted beside it).
# moe's mean rose from 3.4 to 3.7 when expert parallelism followed Megatron-Core's expert grid
# (core.model.layout.expert_grid: ep spans the context-parallel ranks before the data-parallel
# ones): the paper's MCore long-context rows (tp2 cp4 dp2 ep4 ...) had their all-to-all
# across nodes, -8 % to +3 %, and now inside the NVLink node, +4 % to +9 %, beside the
# folded rows of the same table (+1 % to +9 %).
# h100_dense and moe rose (14.29 -> 14.45, 9.8 -> 10.8) when H100's kernel_overhead stopped
# being a hand-kept 4.75 us, a value chosen with the held-out moe suite in view, and became
# A100's fitted 4 us (H100's own rows do not pin it; scripts/calibrate.py, Family.inherited),
# the H100 inference factors refitted beside it (stream_efficiency 0.963 -> 0.925).
# h100_dense's mean fell from 4.7 to 4.2 when mma_sync_share (FlashAttention-2's share of the fused
# Hopper kernel's rate, which the NeMo long-sequence rows run) became the 0.59 we measured on our
# own H100 and H200 (core/validation/data/measured) in place of the FlashAttention-3 paper's 0.54.
# a100_training fell from 6.4 / 13.6 to 6.1 / 13.5 when the A100 presets began to cost the fused
# attention backward's memory-bound passes (reading O and dO, the FP32 dQ round trip).
# h100_dense fell from 4.2 / 14.4 to 3.9 / 12.6 when FP8 delayed scaling's amax all-reduces
# were costed (core.model.training.amax_sync: two per model chunk per micro-batch, blocking, and
# over a group spanning nodes the wait for its latest rank, calibration.sync_skew) and H100's
# factors were refitted beside it (fp8_efficiency 0.75 -> 0.775, sync_skew 125 us; trtllm's
# mean 7.02 -> 6.95 with the inference factors refitted after them).
# Every GEMM took its share of the peak from the measured kernel tables (scripts/fit_gemm.py), and
# whole steps one step_efficiency (H100 beside attention_efficiency and sync_skew; FP8 steps at
# the measured 0.911 of the BF16 clock) (MODEL_VERSION 22): training 4.96 / 2.8 -> 4.86 / 2.23,
# a100_training 13.5 / 6.1 -> 10.16 / 5.44, inference 3.1 / 2.0 -> 3.04 / 2.01, h100_dense
# 12.6 / 3.9 -> 11.70 / 3.83, trtllm 13.7 / 6.95 -> 10.66 / 5.93, and the held-out moe 10.8 / 3.56
# -> 9.61 / 3.65: its worst row 1.2 points better, its mean 0.09 worse, the one bound that rose
# (its rows move by under a point each; fitting the shares on every GEMM row instead of the
# compute-bound ones, without the FP8 clock, gave moe 3.53 but missed H100's FP8 kernel tables by
# 16-28 % where this misses them by 1-8 %).
# moe's mean and trtllm's worst rose (3.65 -> 4.13, 10.66 -> 10.83) when H100's and H200's NVLink
# figures came from NCCL 2.29.2's kernel tables (scripts/fit_nccl.py; MODEL_VERSION 35): their
# 2-GPU all-gathers and reduce-scatters had been 25-30 % faster than measured there, and the
# moe suite's expert-TP-2 MCore rows leaned on it (docs/accuracy.md, NCCL inside a node).
# trtllm's worst rose (10.83 -> 11.08) and its mean fell (5.90 -> 5.75) when Hopper's and
# Blackwell's stream_efficiency came from their kernel tables' weight-streaming GEMMs instead of
# TensorRT-LLM v0.5's H100 decode rows (0.9875 -> 0.957 on H100; MODEL_VERSION 47): the worst
# row, Llama 2 70B 2048-128 on 4 H100s, is one whose prefill the model already puts 11 % slow,
# and its decode now sweeps the weights at the measured rate (docs/accuracy.md).
# trtllm's worst rose again (11.080 -> 11.103) when int8 reductions got their own NVLink fill
# and Hopper's NVLink figures were refitted beside it (MODEL_VERSION 53; every NCCL group of
# 1 MiB and more on H100/H200/B200/GB200 within 10 %): that row's 1 MiB decode all-reduces run
# NCCL's LL protocol, capped at 141 GB/s, where a longer ring fill costs 0.4 % and the higher
# link efficiency buys nothing (docs/accuracy.md, int8 reductions).
# inference's worst rose (3.009 -> 3.12 %, its mean fell 1.999 -> 1.971) when a GEMM split in k
# became the two kernels it is, the second (the partials' sum) starting behind the first after
# gpu.graph_launch_overhead (MODEL_VERSION 55): Llama 2 7B on 8 A100s at batch 1, whose decode
# GEMMs split, +2.5 -> +3.1 %; the kernel tables' BF16 GEMMs under 1 GFLOP on Hopper came within
# p90 21-22 % from 32-36 %, serving's TPOT 11.43 -> 11.37 %. The A100 refit beside it
# (scripts/calibrate.py --family a100) puts that suite's worst at 3.5 %, so the preset stays.
# trtllm and collectives are bounded over all their rows (collectives' worst is the 32-byte
# all-reduce, whose latency the closed form misses; above 1 MiB, see test_core_inference_accuracy).
REACHED = {
    "training": (4.9, 2.25, 0),
    "a100_training": (10.2, 5.45, 0),
    "inference": (3.13, 2.05, 0),
    "memory": (9.0, 2.7, 0),
    "h100_dense": (11.7, 3.85, 0),
    "moe": (9.7, 4.15, 0),
    "memory_h100": (9.8, 9.1, 1),
    "trtllm": (11.11, 5.8, 0),
    "collectives": (78.0, 9.75, 0),
}


@pytest.mark.parametrize("suite", sorted(REACHED))
def test_no_suite_gets_less_accurate(suite):
    cases, verdicts = SUITES[suite]()
    worst, mean, disagree = REACHED[suite]
    figures = summary(cases)[suite]
    assert figures["max_abs_error_pct"] <= worst
    assert figures["mean_abs_error_pct"] <= mean
    wrong = [v.case for v in verdicts if v.disagrees]
    assert len(wrong) <= disagree, wrong
