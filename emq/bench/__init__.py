"""``emq bench``: measured figures, printed as JSON. Benchmarks, not tests: run on demand."""
