"""What a worker computes for plain points: the context a batch carries and one row per point."""
