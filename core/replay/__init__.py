"""Steps replayed on the compiled network simulator: the network a hardware spec describes, per-rank
programs in flat arrays, training and inference replays, and replays under link faults."""
