"""The metric columns every results table may carry, and which way is better."""
METRICS = ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s", "memory_peak_gib")
HIGHER_IS_BETTER = ("mfu", "tokens_per_s")
AGGREGATES = ("slowdown_p50", "slowdown_p95", "slowdown_max", "step_time_p95_s")  # per point, over fault samples
