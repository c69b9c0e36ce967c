"""The operator model: specs and presets, operators and the layer graph, layouts, memory, closed-form
collectives, and the analytical training step and inference request built from them."""
