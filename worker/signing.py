"""Standard Webhooks signatures (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``).

Uses the reference ``standardwebhooks`` package, so what we sign is what receivers verify. One
``Webhook`` object per topic secret is cached: building one decodes the secret.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

from standardwebhooks import Webhook


@lru_cache(maxsize=4096)
def _webhook(secret: str) -> Webhook:
    return Webhook(secret)


def signature_headers(secret: str, message_id: str, now: float, body: str) -> dict[str, str]:
    """The three headers for ``body`` sent as message ``message_id`` at ``now`` (epoch seconds)."""
    stamp = datetime.fromtimestamp(int(now), tz=UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": _webhook(secret).sign(message_id, stamp, body),
    }
