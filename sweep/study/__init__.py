"""A study file: its top level, its space of knobs and variants, its `faults:` and `search:` blocks,
and the plan that turns it into legal points."""
