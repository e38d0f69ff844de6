"""The client's methods for the change log (mixed into :class:`emq.client.Client`).

A client made with ``change_route`` and ``change_reason`` says so on every request
(``X-EMQ-Change-Route``, ``X-EMQ-Change-Why``): the API records both with the quota, split,
weight and cap changes the client makes (:mod:`emq.api.changes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from emq.client.client import Client

    _Base = Client
else:
    _Base = object

ROUTE_HEADER = "X-EMQ-Change-Route"
WHY_HEADER = "X-EMQ-Change-Why"


def change_headers(route: str | None, reason: str | None) -> dict[str, str]:
    """The headers that tell the API how a change came and why (the reason percent-encoded:
    a header carries ASCII only)."""
    out = {ROUTE_HEADER: route} if route else {}
    return out | ({WHY_HEADER: quote(reason, safe=" ")} if reason else {})


class ChangeMethods(_Base):
    """The recorded changes of quotas, splits, weights and caps (admin)."""

    async def changes(
        self,
        *,
        namespace: str | None = None,
        tenant: str | None = None,
        topic: str | None = None,
        since: float | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of changes, newest first: ``{"changes": [...], "next_cursor"}``."""
        given = {
            "namespace": namespace,
            "tenant": tenant,
            "topic": topic,
            "since": since,
            "limit": limit,
            "cursor": cursor,
        }
        query = {k: str(v) for k, v in given.items() if v is not None}
        return await self._object("GET", "v1/changes", query=query)

    async def change(self, change_id: str) -> dict[str, Any]:
        """One recorded change."""
        return await self._object("GET", "v1/changes/" + quote(change_id, safe=""))

    async def revert_change(self, change_id: str, *, force: bool = False) -> dict[str, Any]:
        """Set a change's fields back (409 if they changed since, unless ``force``)."""
        path = "v1/changes/" + quote(change_id, safe="") + "/revert"
        query = {"force": "true"} if force else None
        return await self._object("POST", path, query=query)
