"""The client of the EMQ HTTP API: one method per route, answers as plain dicts.

Error responses become :mod:`emq.core.errors` classes (:mod:`emq.client.errors`). Enqueues
(:meth:`Client.enqueue`) are retried by :class:`~emq.client.backoff.Backoff`; every other route
is sent once. For many jobs use :meth:`Client.producer`, which batches.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp

from emq.client import transactions as tx_client
from emq.client.backoff import DEFAULT_RETRY_FOR_S, Backoff
from emq.client.changes import ChangeMethods, change_headers
from emq.client.errors import ApiError, error_from_response
from emq.client.producer import DEFAULT_IN_FLIGHT, DEFAULT_LINGER_S, MAX_BATCH_JOBS, Producer
from emq.client.subscriptions import SubscriptionMethods
from emq.core import errors

JSON_TYPE = "application/json"


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


def _batches(jobs: Sequence[object], size: int) -> list[Sequence[object]]:
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


class Client(SubscriptionMethods, ChangeMethods):
    """One tenant's (or the admin's) connection to the EMQ API.

    One ``aiohttp.ClientSession`` per client, created on first use; pass ``session`` to share
    one (the client then leaves it open). ``namespace`` is the default for topic routes (else the
    API's own default); each topic method can override it. ``change_route`` (``cli``, ``plan``)
    and ``change_reason`` are recorded with the changes it makes (:mod:`emq.client.changes`).
    """

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        namespace: str | None = None,
        timeout_s: float = 30,
        session: aiohttp.ClientSession | None = None,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
        change_route: str | None = None,
        change_reason: str | None = None,
    ) -> None:
        if retry_for_s < 0:
            raise ValueError("retry_for_s must be at least 0")
        self.api_url = api_url.rstrip("/")
        self.retry_for_s = retry_for_s  # enqueues only: other routes are not retried
        self.namespace = namespace
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._headers |= change_headers(change_route, change_reason)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> Self:
        self._http()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if this client opened it."""
        if self._session is not None and self._owns_session:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    # ------------------------------------------------------------------ transport

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        raw: bytes | None = None,
        query: Mapping[str, str] | None = None,
    ) -> object:
        """Send one request and return its decoded JSON; an error status raises its EMQ error.

        ``body`` is encoded as JSON; ``raw`` is sent as already-encoded JSON.
        """
        if body is not None:
            raw = json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers | ({"Content-Type": JSON_TYPE} if raw is not None else {})
        url = f"{self.api_url}/{path}"
        try:
            # A BytesIO is written in chunks; plain bytes over 1 MB would block the loop (and warn).
            data = io.BytesIO(raw) if raw is not None else None
            async with self._http().request(
                method, url, data=data, params=query, headers=headers
            ) as response:
                payload = await _decode(response)
                if response.status >= 400:
                    retry_after = response.headers.get("Retry-After")
                    raise error_from_response(response.status, payload, retry_after)
                return payload
        except aiohttp.ClientError as e:
            raise errors.BackendUnavailable(f"cannot reach the EMQ API at {url}: {e}") from e
        except TimeoutError as e:
            timeout = self._timeout.total
            raise errors.BackendUnavailable(f"no answer from {url} within {timeout} s") from e

    async def _object(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        raw: bytes | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """:meth:`request` for the routes that answer a JSON object (all of them)."""
        result = await self.request(method, path, body=body, raw=raw, query=query)
        if not isinstance(result, dict):
            raise ApiError(
                200, "http_error", f"expected a JSON object from {path}: {result!r:.200}"
            )
        return result

    def _topic_query(self, namespace: str | None) -> dict[str, str]:
        ns = namespace or self.namespace
        return {"namespace": ns} if ns else {}

    def _topic_path(self, tenant: str, topic: str, *rest: str) -> str:
        return _path("v1", "tenants", tenant, "topics", topic, *rest)

    # ------------------------------------------------------------------ tenants (admin)

    async def create_tenant(self, tenant: str, name: str | None = None) -> dict[str, Any]:
        """Create a tenant; the answer carries its API token, shown this once."""
        body = {"tenant": tenant} | ({"name": name} if name is not None else {})
        return await self._object("POST", "v1/tenants", body=body)

    async def list_tenants(self) -> list[dict[str, Any]]:
        result = await self._object("GET", "v1/tenants")
        return list(result["tenants"])

    async def set_tenant_cap(
        self, tenant: str, qps_cap: int | None, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Set (or with ``None`` remove) the tenant's cap over its topics in a namespace."""
        body = {"qps_cap": qps_cap, "namespace": namespace or self.namespace}
        return await self._object("PATCH", _path("v1", "tenants", tenant), body=body)

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        tenant: str,
        topic: str,
        qps: int,
        *,
        namespace: str | None = None,
        retry: Mapping[str, Any] | None = None,
        endpoint_concurrency: int | None = None,
        max_backlog: int | None = None,
        priority_mode: str | None = None,
        dlq_max_entries: int | None = None,
        dlq_max_age_s: int | None = None,
        weight: int | None = None,
        burst: int | None = None,
        transaction_default: str | None = None,
    ) -> dict[str, Any]:
        """Create a topic (admin); the answer has its groups and its signing secret."""
        options = {
            "namespace": namespace or self.namespace,
            "retry": dict(retry) if retry is not None else None,
            "endpoint_concurrency": endpoint_concurrency,
            "max_backlog": max_backlog,
            "priority_mode": priority_mode,
            "dlq_max_entries": dlq_max_entries,
            "dlq_max_age_s": dlq_max_age_s,
            "weight": weight,
            "burst": burst,
            "transaction_default": transaction_default,
        }
        body = {"topic": topic, "qps": qps} | {k: v for k, v in options.items() if v is not None}
        path = _path("v1", "tenants", tenant, "topics")
        return await self._object("POST", path, body=body)

    async def list_topics(
        self, tenant: str, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        path = _path("v1", "tenants", tenant, "topics")
        result = await self._object("GET", path, query=self._topic_query(namespace))
        return list(result["topics"])

    async def get_topic(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """The topic's settings, groups and backlog (per priority and per group)."""
        path = self._topic_path(tenant, topic)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def update_topic(
        self, tenant: str, topic: str, *, namespace: str | None = None, **changes: Any
    ) -> dict[str, Any]:
        """Change a topic live (admin): ``qps``, ``paused``, ``retry``, ``max_backlog``..."""
        path = self._topic_path(tenant, topic)
        query = self._topic_query(namespace)
        return await self._object("PATCH", path, body=changes, query=query)

    async def set_quota(
        self, tenant: str, topic: str, qps: int, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, qps=qps)

    async def pause(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, paused=True)

    async def resume(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, paused=False)

    async def enable_endpoint(
        self, tenant: str, topic: str, endpoint: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Re-enable an endpoint (``host:port``, or ``*``) workers disabled (admin)."""
        path = self._topic_path(tenant, topic, "endpoints", "enable")
        query = self._topic_query(namespace)
        return await self._object("POST", path, body={"endpoint": endpoint}, query=query)

    # ------------------------------------------------------------------ jobs

    async def enqueue(
        self,
        tenant: str,
        topic: str,
        job_or_jobs: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Enqueue one job (a dict) or many (a list, sent in requests of up to 1000 jobs).

        Returns ``{"ids": [...], "duplicates": n}``. Each request is retried (see
        :class:`Backoff`) for up to ``retry_for_s``. Batches go one after the other; if one
        fails for good, its error is raised and the batches before it stay accepted.
        """
        path = self._topic_path(tenant, topic, "jobs")
        query = self._topic_query(namespace)

        def post(body: object) -> Callable[[], Awaitable[dict[str, Any]]]:
            return lambda: self._object("POST", path, body=body, query=query)

        if isinstance(job_or_jobs, Mapping):
            return await Backoff(self.retry_for_s).run(post(job_or_jobs))
        ids: list[str] = []
        duplicates = 0
        for batch in _batches(job_or_jobs, MAX_BATCH_JOBS):
            answer = await Backoff(self.retry_for_s).run(post({"jobs": list(batch)}))
            ids += answer["ids"]
            duplicates += answer["duplicates"]
        return {"ids": ids, "duplicates": duplicates}

    async def enqueue_encoded(
        self, tenant: str, topic: str, jobs: Sequence[bytes], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Enqueue jobs already encoded as JSON objects, in one request, not retried (the
        Producer's path: it retries on its own)."""
        raw = b'{"jobs":[' + b",".join(jobs) + b"]}"
        path = self._topic_path(tenant, topic, "jobs")
        query = self._topic_query(namespace)
        return await self._object("POST", path, raw=raw, query=query)

    def producer(
        self,
        tenant: str,
        topic: str,
        *,
        namespace: str | None = None,
        max_batch: int = MAX_BATCH_JOBS,
        linger_s: float = DEFAULT_LINGER_S,
        max_in_flight: int = DEFAULT_IN_FLIGHT,
        retry_for_s: float | None = None,
        idempotent: bool = False,
    ) -> Producer:
        """A :class:`~emq.client.producer.Producer` sending to one topic through this client
        (retrying for the client's ``retry_for_s`` unless given)."""
        return Producer(
            self,
            tenant,
            topic,
            namespace=namespace,
            max_batch=max_batch,
            linger_s=linger_s,
            max_in_flight=max_in_flight,
            retry_for_s=self.retry_for_s if retry_for_s is None else retry_for_s,
            idempotent=idempotent,
        )

    # ------------------------------------------------------------------ dead letters

    async def dlq_list(
        self,
        tenant: str,
        topic: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """One page of dead letters: ``{"dead": [...], "next_cursor": str | None}``."""
        query = self._topic_query(namespace)
        if limit is not None:
            query["limit"] = str(limit)
        if cursor is not None:
            query["cursor"] = cursor
        path = self._topic_path(tenant, topic, "dlq")
        return await self._object("GET", path, query=query)

    async def job_status(
        self, tenant: str, topic: str, job_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """One job's state and, while it waits, why (docs/concepts/job-status.md)."""
        path = self._topic_path(tenant, topic, "jobs", job_id)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def dlq_replay(
        self,
        tenant: str,
        topic: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Put dead letters back on the topic (``ids``, or up to ``limit`` of them)."""
        body: dict[str, Any] = {}
        if ids is not None:
            body["ids"] = list(ids)
        if limit is not None:
            body["limit"] = limit
        path = self._topic_path(tenant, topic, "dlq", "replay")
        query = self._topic_query(namespace)
        return await self._object("POST", path, body=body, query=query)

    async def replay_start(
        self,
        tenant: str,
        topic: str,
        *,
        ids: Sequence[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        rate: float | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Start a paced replay (docs/concepts/replays.md); the replay with its ``id``."""
        fields = {"ids": None if ids is None else list(ids), "since": since, "until": until}
        body = {k: v for k, v in {**fields, "rate": rate}.items() if v is not None}
        path = self._topic_path(tenant, topic, "dlq", "replays")
        return await self._object("POST", path, body=body, query=self._topic_query(namespace))

    async def replays(
        self, tenant: str, topic: str, *, replay_id: str | None = None, namespace: str | None = None
    ) -> dict[str, Any]:
        """One replay's progress (``replay_id``), or ``{"replays": [...]}``, newest first."""
        extra = ("replays",) if replay_id is None else ("replays", replay_id)
        path = self._topic_path(tenant, topic, "dlq", *extra)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def replay_cancel(
        self, tenant: str, topic: str, replay_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Cancel a replay; the replay as it stopped."""
        path = self._topic_path(tenant, topic, "dlq", "replays", replay_id)
        return await self._object("DELETE", path, query=self._topic_query(namespace))

    # ------------------------------------------------------------------ transactions

    def transaction(
        self,
        tenant: str,
        topic: str,
        *,
        check_url: str,
        timeout_s: int | None = None,
        namespace: str | None = None,
    ) -> tx_client.TransactionBlock:
        """``async with client.transaction(...) as tx: await tx.send(job)``: commits on a
        normal exit, rolls back if the block raises (:mod:`emq.client.transactions`)."""
        return tx_client.TransactionBlock(
            self, tenant, topic, check_url, timeout_s, namespace or self.namespace
        )

    async def create_transaction(
        self,
        tenant: str,
        topic: str,
        *,
        check_url: str,
        timeout_s: int | None = None,
        namespace: str | None = None,
    ) -> tx_client.Transaction:
        """Open a transaction; commit or roll it back yourself (or leave it to check_url)."""
        ns = namespace or self.namespace
        return await tx_client.create(self, tenant, topic, check_url, timeout_s, ns)

    def open_transaction(
        self, tenant: str, topic: str, tx_id: str, *, namespace: str | None = None
    ) -> tx_client.Transaction:
        """A transaction opened before (by id), to send to, show, commit or roll back."""
        ns = namespace or self.namespace
        return tx_client.Transaction(self, tenant, topic, tx_id, ns)

    async def transactions(
        self, tenant: str, topic: str, *, limit: int = 50, namespace: str | None = None
    ) -> dict[str, Any]:
        """``{"transactions": [...]}``: the topic's, newest first."""
        path = self._topic_path(tenant, topic, "transactions")
        query = self._topic_query(namespace) | {"limit": str(limit)}
        return await self._object("GET", path, query=query)

    # ------------------------------------------------------------------ schedules

    async def create_schedule(
        self,
        tenant: str,
        topic: str,
        cron: str,
        job: Mapping[str, Any],
        *,
        schedule_id: str | None = None,
        timezone: str | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Create a schedule (docs/concepts/schedules.md): ``job`` is the template (url, method,
        headers, body, priority, key); ``options`` are start_at, end_at, catch_up,
        catch_up_max, paused. Answers the schedule with its next ticks."""
        body: dict[str, Any] = {"cron": cron, "job": dict(job), **options}
        if schedule_id is not None:
            body["id"] = schedule_id
        if timezone is not None:
            body["timezone"] = timezone
        path = self._topic_path(tenant, topic, "schedules")
        return await self._object("POST", path, body=body, query=self._topic_query(namespace))

    async def list_schedules(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """A topic's schedules, by id."""
        path = self._topic_path(tenant, topic, "schedules")
        found = await self._object("GET", path, query=self._topic_query(namespace))
        return list(found["schedules"])

    async def get_schedule(
        self,
        tenant: str,
        topic: str,
        schedule_id: str,
        *,
        next_ticks: int | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """One schedule: its last tick (job id and state), the next ticks (5, or ``next_ticks``)."""
        query = self._topic_query(namespace)
        if next_ticks is not None:
            query["next"] = str(next_ticks)
        path = self._topic_path(tenant, topic, "schedules", schedule_id)
        return await self._object("GET", path, query=query)

    async def update_schedule(
        self,
        tenant: str,
        topic: str,
        schedule_id: str,
        *,
        namespace: str | None = None,
        **changes: Any,
    ) -> dict[str, Any]:
        """Change a schedule's fields (cron, timezone, job, start_at, end_at, catch_up,
        catch_up_max, paused)."""
        path = self._topic_path(tenant, topic, "schedules", schedule_id)
        query = self._topic_query(namespace)
        return await self._object("PATCH", path, body=changes, query=query)

    async def pause_schedule(
        self, tenant: str, topic: str, schedule_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_schedule(tenant, topic, schedule_id, namespace=namespace,
                                          paused=True)  # fmt: skip

    async def resume_schedule(
        self, tenant: str, topic: str, schedule_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Resume a paused schedule: from its next tick after now (paused ticks are not fired)."""
        return await self.update_schedule(tenant, topic, schedule_id, namespace=namespace,
                                          paused=False)  # fmt: skip

    async def delete_schedule(
        self, tenant: str, topic: str, schedule_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        path = self._topic_path(tenant, topic, "schedules", schedule_id)
        return await self._object("DELETE", path, query=self._topic_query(namespace))

    # ------------------------------------------------------------------ attempts (issue 29)

    async def job_attempts(
        self, tenant: str, topic: str, job_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """A job's recorded attempts, oldest first (docs/concepts/attempts.md)."""
        path = self._topic_path(tenant, topic, "jobs", job_id, "attempts")
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def search_jobs(
        self, tenant: str, topic: str, *, namespace: str | None = None, **filters: Any
    ) -> dict[str, Any]:
        """The topic's jobs with retained records: ``state``, ``key``, ``idempotency_key``,
        ``since``, ``until`` (epoch seconds), ``limit``, ``cursor``; ``{"jobs", "next_cursor"}``."""
        query = self._topic_query(namespace)
        query |= {k: str(v) for k, v in filters.items() if v is not None}
        return await self._object("GET", self._topic_path(tenant, topic, "jobs"), query=query)

    async def redeliver(
        self,
        tenant: str,
        topic: str,
        since: float,
        *,
        until: float | None = None,
        rate: float | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Send again, paced, the jobs delivered between ``since`` and ``until``."""
        body: dict[str, Any] = {"since": since}
        body |= {k: v for k, v in (("until", until), ("rate", rate)) if v is not None}
        path = self._topic_path(tenant, topic, "redeliveries")
        return await self._object("POST", path, body=body, query=self._topic_query(namespace))

    async def redeliveries(
        self, tenant: str, topic: str, *, replay_id: str | None = None, namespace: str | None = None
    ) -> dict[str, Any]:
        """One redelivery's progress, or ``{"redeliveries": [...]}``, newest first."""
        extra = ("redeliveries",) if replay_id is None else ("redeliveries", replay_id)
        path = self._topic_path(tenant, topic, *extra)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def redelivery_cancel(
        self, tenant: str, topic: str, replay_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Cancel a redelivery; the redelivery as it stopped."""
        path = self._topic_path(tenant, topic, "redeliveries", replay_id)
        return await self._object("DELETE", path, query=self._topic_query(namespace))

    # ------------------------------------------------------------------ capacity plans (admin)

    async def publish_plan(
        self, plan: Mapping[str, Any], source: str = "publish"
    ) -> dict[str, Any]:
        """Store a capacity plan (``plan.json``) as the API's latest; ``source`` says why:
        ``publish``, ``dry-run`` or ``apply``. Answers its id and how many plans are kept."""
        return await self._object("POST", "v1/plans", body=plan, query={"source": source})

    async def latest_plan(self) -> dict[str, Any]:
        """The latest plan's figures and series and its dry-run diff against the config now."""
        return await self._object("GET", "v1/plans/latest")

    # ------------------------------------------------------------------ operations

    async def health(self) -> dict[str, Any]:
        """``/healthz``: ``{"status": "ok", "redis": "ok", ...}``; 503 raises BackendUnavailable."""
        return await self._object("GET", "healthz")


async def _decode(response: aiohttp.ClientResponse) -> object:
    text = await response.text()
    if response.content_type != JSON_TYPE:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text
