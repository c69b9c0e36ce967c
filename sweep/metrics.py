"""The metric columns every results table may carry, and which way is better."""
from core.evaluation import ENERGY
from core.serving.service import SERVE_COLUMNS

COST = ("usd_per_step", "usd_per_million_tokens", "run_usd")  # with the study's cost: block (sweep/study/cost_block.py)
METRICS = ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s", "memory_peak_gib", *ENERGY, *COST)
# what a serving study's rows add (core.serving): latency percentiles, throughput per GPU and per
# user, and a disaggregated point's KV-cache hand-over per request (null when aggregated)
SERVE_METRICS = tuple(c for c in SERVE_COLUMNS if c not in METRICS) + ("kv_transfer_s",)
HIGHER_IS_BETTER = ("mfu", "tokens_per_s", "gpu_clock_share", "max_concurrency_kv", "output_tokens_per_s",
                    "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user")
AGGREGATES = ("slowdown_p50", "slowdown_p95", "slowdown_max", "step_time_p95_s")  # per point, over fault samples
