"""The study's Parquet table: parts written atomically under a lock, read back, and queried."""
