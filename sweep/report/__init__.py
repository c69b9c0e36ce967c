"""`rapid report`: one HTML page of plotly views of a study's table (and PNGs with matplotlib)."""
