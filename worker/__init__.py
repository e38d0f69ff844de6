"""The worker: fetchers, buffers, dispatcher, push executor, retries, DLQ, checkpoints."""
