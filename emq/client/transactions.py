"""Transactions in the Python client (:mod:`emq.core.transactions`).

::

    async with client.transaction("acme", "orders", check_url="https://shop.example/tx") as tx:
        await tx.send({"url": "https://hooks.example/paid", "body": "..."})
        await tx.publish("order.paid", {"order": 7})  # each subscription's delivery, prepared
        ...  # the database commit goes here: an exception before the end rolls back
    # leaving the block without an exception committed the jobs

``send`` prepares jobs and ``publish`` events' deliveries (stored by EMQ, not delivered); the
end of the block commits, or rolls back if the block raised. Commit and rollback are idempotent
and retried like an enqueue (:class:`~emq.client.backoff.Backoff`); ``send`` and ``publish``
are sent once (sending again could prepare the jobs twice). A producer that dies inside the
block leaves the transaction open: at its timeout EMQ asks ``check_url`` for the decision (see
the docs, "Transactions").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from emq.client.backoff import Backoff
from emq.core import errors

if TYPE_CHECKING:
    from emq.client.client import Client

MAX_BATCH_JOBS = 1000


class TransactionConflict(errors.ConfigConflict):
    """A commit of a transaction decided the other way (rolled back by the producer, its
    check-back or the topic's default), or a rollback of a committed one. ``transaction`` is
    its final state as the API showed it."""

    code = "transaction_closed"

    def __init__(self, message: str, transaction: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.transaction = dict(transaction)


class Transaction:
    """One open transaction of a topic (made by :meth:`Client.transaction` or
    :meth:`Client.create_transaction`)."""

    def __init__(
        self, client: Client, tenant: str, topic: str, tx_id: str, namespace: str | None
    ) -> None:
        self.client = client
        self.tenant = tenant
        self.topic = topic
        self.id = tx_id
        self.namespace = namespace

    def _path(self, *rest: str) -> str:
        return self.client._topic_path(self.tenant, self.topic, "transactions", self.id, *rest)

    def _query(self) -> dict[str, str]:
        return self.client._topic_query(self.namespace)

    async def send(self, job_or_jobs: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[str]:
        """Prepare one job (a dict) or many (a list, in requests of up to 1000); their ids."""
        path, query = self._path("jobs"), self._query()
        if isinstance(job_or_jobs, Mapping):
            answer = await self.client._object("POST", path, body=job_or_jobs, query=query)
            return list(answer["ids"])
        ids: list[str] = []
        for start in range(0, len(job_or_jobs), MAX_BATCH_JOBS):
            batch = {"jobs": list(job_or_jobs[start : start + MAX_BATCH_JOBS])}
            answer = await self.client._object("POST", path, body=batch, query=query)
            ids += answer["ids"]
        return ids

    async def publish(self, type_: str, payload: Any = None, **options: Any) -> dict[str, Any]:
        """Publish one event into the transaction (``key``, ``idempotency_key``, ``priority``,
        ``delay_s`` as :meth:`Client.publish_event`): its deliveries are prepared, delivered
        once it commits. ``{"event_id", "deliveries", "duplicates"}``."""
        return await self.client.publish_event(
            self.tenant, self.topic, type_, payload, namespace=self.namespace,
            transaction_id=self.id, **options,
        )  # fmt: skip

    async def publish_events(self, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Publish events (dicts as the API takes them) into the transaction; one answer each."""
        return await self.client.publish_events(
            self.tenant, self.topic, events, namespace=self.namespace, transaction_id=self.id
        )

    async def show(self) -> dict[str, Any]:
        """The transaction: state, jobs, its decision (and where it came from), its log."""
        return await self.client._object("GET", self._path(), query=self._query())

    async def commit(self) -> dict[str, Any]:
        """Commit: every job is delivered. :class:`TransactionConflict` if it was rolled back."""
        return await self._decide("commit")

    async def rollback(self) -> dict[str, Any]:
        """Roll back: every job is discarded. :class:`TransactionConflict` if committed."""
        return await self._decide("rollback")

    async def _decide(self, action: str) -> dict[str, Any]:
        path, query = self._path(action), self._query()
        try:
            return await Backoff(self.client.retry_for_s).run(
                lambda: self.client._object("POST", path, query=query)
            )
        except errors.AlreadyExists as e:  # 409: decided the other way
            shown = await self.show()
            raise TransactionConflict(e.message, shown) from None


class TransactionBlock:
    """``async with client.transaction(...) as tx``: opens on entry, commits on a normal
    exit, rolls back when the block raises (the block's exception is what propagates)."""

    def __init__(
        self,
        client: Client,
        tenant: str,
        topic: str,
        check_url: str,
        timeout_s: int | None,
        namespace: str | None,
    ) -> None:
        self._args = (client, tenant, topic, check_url, timeout_s, namespace)
        self.transaction: Transaction | None = None

    async def __aenter__(self) -> Transaction:
        client, tenant, topic, check_url, timeout_s, namespace = self._args
        self.transaction = await create(client, tenant, topic, check_url, timeout_s, namespace)
        return self.transaction

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tx = self.transaction
        assert tx is not None
        if exc_type is None:
            await tx.commit()
            return
        # The block's error goes on; a transaction left open is resolved by its check-back.
        with contextlib.suppress(errors.EmqError):
            await tx.rollback()


async def create(
    client: Client,
    tenant: str,
    topic: str,
    check_url: str,
    timeout_s: int | None,
    namespace: str | None,
) -> Transaction:
    """Open a transaction on ``tenant``/``topic``."""
    body: dict[str, Any] = {"check_url": check_url}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    path = client._topic_path(tenant, topic, "transactions")
    answer = await client._object("POST", path, body=body, query=client._topic_query(namespace))
    return Transaction(client, tenant, topic, str(answer["transaction_id"]), namespace)
