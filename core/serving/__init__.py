"""Serving: an inference engine's iteration loop simulated over a stream of requests
(continuous batching, chunked prefill, KV-bound admission and preemption), each iteration timed
by the operator model."""
