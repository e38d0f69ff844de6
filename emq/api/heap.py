"""The API process's garbage collector, set up once it listens.

A batch of 1000 jobs allocates tens of thousands of objects (decoded JSON, models, jobs,
envelopes); with CPython's default thresholds that sets off a young collection every 700
allocations and, as they add up, full ones, and each full collection walks every object made at
import time and start-up (pydantic's schemas, the routes, the clients): that was ~a fifth of the
API's CPU under batched enqueue (``emq bench enqueue``). Freezing what exists after start-up
takes it out of every later collection; the worker's thresholds (``worker.main.GC_THRESHOLDS``)
make collections rarer. Reference counting frees nearly everything a request allocates, so
little waits for the collector meanwhile; what is frozen and later becomes cyclic garbage is
never collected (start-up objects live as long as the process).
"""

from __future__ import annotations

import gc

GC_THRESHOLDS = (10_000, 10, 10)  # as the worker's: a young collection per 10 000 allocations


def tune_gc() -> None:
    """Freeze what exists now and raise the thresholds; call once, after start-up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
