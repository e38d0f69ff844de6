"""The key hash: which of a topic's groups a job's ``key`` goes to.

Jump consistent hashing (Lamping & Veach): when a quota change raises the group count from
``n`` to ``m``, a key either stays in its group or moves to one of the new groups ``n..m-1``,
and only about ``1 - n/m`` of the keys move. The API places jobs with it and the worker uses it
to tell which keys a change moved, and from which group (worker.regroup).
"""

from __future__ import annotations

import hashlib


def jump_hash(key: str, buckets: int) -> int:
    """Lamping & Veach's jump consistent hash of ``key`` into ``range(buckets)``."""
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    b, j = -1, 0
    while j < buckets:
        b = j
        h = (h * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        j = int((b + 1) * ((1 << 31) / ((h >> 33) + 1)))
    return b
