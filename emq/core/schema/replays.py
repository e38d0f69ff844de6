"""The API's request bodies and query parameters for DLQ replays (issue 16, item 4).

Part of :mod:`emq.core.schema` (whose rules and messages they share) so the feature's fields
live in one place; the OpenAPI document takes them from the route table like the others.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from emq.core.model import MAX_TOPIC_QPS
from emq.core.replays import MIN_RATE
from emq.core.schema.common import MAX_REPLAY, Body
from emq.core.schema.queries import NamespaceQuery
from emq.core.schema.topics import DeadLetterId

Epoch = Annotated[float, Field(ge=0, le=4_102_444_800, description="epoch seconds")]


class ReplayCreateIn(Body):
    """A paced replay: ``ids`` (as the DLQ lists them), or the letters dead-lettered between
    ``since`` and ``until`` (either open), or, with neither, every letter there now. ``rate``:
    letters moved back into the topic's queues per second (default: 5% of its quota); they
    are delivered with its live jobs within its quota, so under a live backlog of L jobs/s a
    replay at R/s delivers about quota x R / (L + R) of them per second, never more than R."""

    ids: Annotated[list[DeadLetterId], Field(min_length=1, max_length=MAX_REPLAY)] | None = None
    since: Epoch | None = None
    until: Epoch | None = None
    rate: Annotated[float, Field(ge=MIN_RATE, le=MAX_TOPIC_QPS)] | None = None


class ReplaysQuery(NamespaceQuery):
    limit: Annotated[int, Field(ge=1, le=100)] = 20
