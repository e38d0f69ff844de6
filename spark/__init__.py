"""PySpark jobs: capacity planning from traffic history, synthetic history."""
