"""Chakra execution traces: the schema and wire format, writing our replays as ASTRA-sim bundles,
and replaying any Chakra set (`rapid replay`)."""
