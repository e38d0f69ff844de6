"""A re-enabled endpoint's deferred jobs, released at once.

While an endpoint is disabled, the jobs past those parked for it go back to their group's
delayed set, due :data:`~worker.endpoints.DISABLED_DEFER_S` later (``worker.endpoints``: memory
stays bounded). An operator's re-enable mark (the topic's policy) reaches every worker; each
then makes the endpoint's jobs in the delayed sets of the topic's groups it owns due now
(``QueueBackend.release_deferred``), so they come back with the parked ones and go at the
endpoint's pace, instead of waiting for the rest of their deferral (up to a minute). Jobs put
with ``delay_s`` keep their due time; the endpoint's retries due within the deferral come back
too (the operator said it is healthy again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from emq.core.endpoints import EndpointPolicy
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import QueueBackend
from emq.core.model import GroupRef
from worker.endpoints import DISABLED_DEFER_S

log = logging.getLogger(__name__)

MARGIN_MS = 1_000  # past the longest deferral: a job deferred as the mark was made


def new_marks(old: EndpointPolicy, new: EndpointPolicy) -> list[str]:
    """The endpoints (or ``*``) that marks in ``new`` and not in ``old`` re-enable."""
    before = set(old.enables)
    return sorted({endpoint for endpoint, at in new.enables if (endpoint, at) not in before})


async def release(
    queues: QueueBackend, groups: Sequence[GroupRef], endpoints: Sequence[str]
) -> int:
    """Make the deferred jobs of ``endpoints`` in ``groups`` due now; how many."""
    now_ms = int(time.time() * 1000)
    until_ms = now_ms + int(DISABLED_DEFER_S * 1000) + MARGIN_MS
    released = 0
    for group in groups:
        for endpoint in endpoints:
            try:
                released += await queues.release_deferred(group, endpoint, until_ms, now_ms)
            except BackendUnavailable as e:  # they come back when their deferral ends
                log.warning("group %s: deferred jobs of %s not released: %s", group, endpoint, e)
    if released:
        log.info("released %d deferred jobs of re-enabled %s", released, ", ".join(endpoints))
    return released
