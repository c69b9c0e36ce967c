"""Predictions held against published measurements: the corpus of measured rows, how each kind of
row is predicted, and the named suites `rapid validate` runs."""
