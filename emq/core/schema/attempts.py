"""The bodies and queries of the attempt log, search, callbacks and redeliveries
(docs/concepts/attempts.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from emq.core.attempts import SEARCH_DEFAULT_LIMIT, SEARCH_MAX_LIMIT
from emq.core.model import MAX_EXCERPT_BYTES, MAX_KEEP_DELIVERED_S, MAX_TOPIC_QPS
from emq.core.replays import MIN_RATE
from emq.core.schema.common import MAX_KEY_CHARS, URL_PATTERN, Body
from emq.core.schema.queries import NamespaceQuery

ExcerptBytes = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_EXCERPT_BYTES,
        description="bytes of each response body kept in the attempt log (default 0: none)",
    ),
]
TopicCallbackUrl = Annotated[
    str,
    Field(
        pattern=URL_PATTERN + "|^$",
        max_length=2048,
        description="callback of jobs that name none ('' : none)",
    ),
]
KeepDeliveredS = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_KEEP_DELIVERED_S,
        description="seconds delivered jobs are kept for redeliveries (default 0: not kept)",
    ),
]


Epoch = Annotated[float, Field(ge=0, le=4_102_444_800, description="epoch seconds")]
StateName = Literal["delivered", "retry_wait", "dead"]


class RedeliveryIn(Body):
    """Send again, at ``rate`` jobs per second for the whole topic (default: 5% of its quota),
    the jobs delivered between ``since`` and ``until`` (epoch seconds; ``until``: now), each as
    a new attempt of the same job. The window must lie within the topic's
    ``keep_delivered_s``."""

    since: Epoch
    until: Epoch | None = None
    rate: Annotated[float, Field(ge=MIN_RATE, le=MAX_TOPIC_QPS)] | None = None


class JobSearchQuery(NamespaceQuery):
    """The jobs whose records are retained, newest outcome first."""

    state: StateName | None = None
    key: Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS)] | None = None
    since: Epoch | None = None
    until: Epoch | None = None
    limit: Annotated[int, Field(ge=1, le=SEARCH_MAX_LIMIT)] = SEARCH_DEFAULT_LIMIT
    cursor: Annotated[
        str, Field(max_length=512, description="next_cursor of the previous page")
    ] = ""
