"""Optuna searches over a study's space: the ask/tell loop, refinement, and rows of fault searches."""
