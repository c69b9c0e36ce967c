"""The model's version: bump MODEL_VERSION whenever a change moves any predicted number.

It is part of every sweep point's id, so a table never serves rows an older model
computed; tests/test_model_pinned.py fails when outputs move while it stays put
(regenerate its fixture with `python scripts/pin_model_outputs.py`)."""
MODEL_VERSION = 81
