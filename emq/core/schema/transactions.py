"""The API's request bodies and query parameters for transactions (emq.core.transactions)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from emq.core.schema.common import URL_PATTERN, IntegralBody
from emq.core.schema.queries import NamespaceQuery
from emq.core.transactions import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, TRANSACTION_ID_PATTERN


class TransactionIn(IntegralBody):
    """A new transaction: where EMQ asks for the decision if it is still open after
    ``timeout_s`` seconds."""

    check_url: Annotated[
        str,
        Field(
            pattern=URL_PATTERN,
            max_length=2048,
            description="http or https, with a host; a private or loopback address only if "
            "EMQ_PUSH_ALLOW_CIDRS allows it",
            json_schema_extra={"format": "uri"},
        ),
    ]
    timeout_s: Annotated[int, Field(ge=1, le=MAX_TIMEOUT_S)] = DEFAULT_TIMEOUT_S


class TransactionsQuery(NamespaceQuery):
    limit: Annotated[int, Field(ge=1, le=1000)] = 50


class EnqueueQuery(NamespaceQuery):
    """``POST .../jobs?transaction_id=...`` (and ``.../events?transaction_id=...``): the jobs
    (the events' deliveries) are prepared in that transaction."""

    transaction_id: Annotated[
        str,
        Field(
            pattern=TRANSACTION_ID_PATTERN,
            description="an open transaction of the topic: prepared in it (stored, delivered "
            "only once it commits, discarded if it rolls back)",
        ),
    ]


class EnqueueQueryDoc(NamespaceQuery):
    """How ``POST .../jobs`` and ``POST .../events`` are documented: ``transaction_id`` is
    optional there (without it the jobs are enqueued at once); :class:`EnqueueQuery` is what
    those routes validate when it is given."""

    transaction_id: Annotated[
        str | None,
        Field(
            pattern=TRANSACTION_ID_PATTERN,
            description="an open transaction of the topic: prepared in it (stored, delivered "
            "only once it commits, discarded if it rolls back); without it, enqueued at once",
        ),
    ] = None
