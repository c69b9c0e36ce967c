"""Monte Carlo link faults and stragglers: what each sample draws, its replay, and per-point summaries."""
