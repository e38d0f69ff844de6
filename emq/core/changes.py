"""The change log: who changed a quota, split, weight or cap, when, from what, to what, and why.

Every admin mutation of those fields (``PATCH`` of a topic or a tenant, by any route: the API
itself, the CLI, ``emq plan apply``; and a revert) is recorded as one :class:`Change` holding
the changed fields' values before and after. A change can be reverted: its ``before`` values
applied again through the same mutation path, itself recorded as a change.

The log is bounded twice: entries older than ``retention_s`` are dropped (and never answered),
and beyond ``max_entries`` the oldest go first. A :class:`ChangeLog` implementation
(``adapters``: Redis, in-memory) assigns each entry its id, ``<ms>-<seq>``: ids sort by the time
they were recorded, so the newest-first listing pages by id (``cursor``: the last id of a page).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from emq.core.interfaces import AsyncResource
from emq.core.model import Namespace, Tenant, Topic

CHANGE_ID_PATTERN = r"^[0-9]{1,15}-[0-9]{1,19}$"
CHANGE_ID_RE = re.compile(CHANGE_ID_PATTERN)
MAX_REASON_CHARS = 500
# A listing reads at most this many entries per page, whatever its filters: a filter that
# matches few entries answers a short page with a cursor to go on from.
SCAN_ENTRIES = 2000

# The fields recorded. A topic's groups follow its quota (they never shrink), so they are
# recorded with it but not set back by a revert; the others are set back.
TOPIC_FIELDS = ("qps", "groups", "weight", "burst")
TOPIC_SETTABLE = ("qps", "weight", "burst")
TENANT_FIELDS = ("qps_cap",)


class ChangeRoute(Enum):
    """How a change reached the API: its own client, the ``emq`` CLI, or ``emq plan apply``."""

    API = "api"
    CLI = "cli"
    PLAN = "plan"


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded mutation. ``topic`` is ``None`` for a tenant's cap (``namespace`` is the
    cap's); ``before``/``after`` hold only the fields that changed; ``id`` is ``""`` until the
    log assigns one."""

    at: float
    actor: str
    route: ChangeRoute
    namespace: str
    tenant: str
    topic: str | None
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    reason: str = ""
    revert_of: str | None = None
    id: str = ""

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.after)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "route": self.route.value,
            "namespace": self.namespace,
            "tenant": self.tenant,
            "topic": self.topic,
            "before": dict(self.before),
            "after": dict(self.after),
            "reason": self.reason,
            "revert_of": self.revert_of,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Change:
        return cls(
            at=float(d["at"]),
            actor=str(d["actor"]),
            route=ChangeRoute(d["route"]),
            namespace=str(d["namespace"]),
            tenant=str(d["tenant"]),
            topic=d.get("topic"),
            before=dict(d["before"]),
            after=dict(d["after"]),
            reason=str(d.get("reason", "")),
            revert_of=d.get("revert_of"),
            id=str(d.get("id", "")),
        )


@dataclass(frozen=True, slots=True)
class ChangeFilter:
    """What a listing asks for: every field optional; ``since`` (epoch seconds) is compared with
    the time the log recorded an entry (its id's); ``cursor`` is the last id of the page before
    (entries older than it follow)."""

    namespace: str | None = None
    tenant: str | None = None
    topic: str | None = None
    since: float | None = None
    cursor: str | None = None
    limit: int = 50

    def matches(self, change: Change) -> bool:
        return (
            (self.namespace is None or change.namespace == self.namespace)
            and (self.tenant is None or change.tenant == self.tenant)
            and (self.topic is None or change.topic == self.topic)
        )


@dataclass(frozen=True, slots=True)
class ChangePage:
    """A page of a listing, newest first; ``next_cursor`` is ``None`` on the last page."""

    changes: list[Change] = field(default_factory=list)
    next_cursor: str | None = None


class ChangeLog(AsyncResource):
    """The recorded changes, newest first, bounded in age and in number."""

    @abc.abstractmethod
    async def append(self, change: Change) -> Change:
        """Record ``change``; returns it with its id. Drops what is past the bounds."""

    @abc.abstractmethod
    async def get(self, change_id: str) -> Change:
        """The change with this id; ``NotFound`` if there is none (or it has expired)."""

    @abc.abstractmethod
    async def page(self, query: ChangeFilter) -> ChangePage:
        """The changes matching ``query``, newest first, at most ``query.limit``; reads at
        most :data:`SCAN_ENTRIES` entries (a page may be short; its cursor goes on)."""


def id_key(change_id: str) -> tuple[int, int]:
    """An id as a sortable pair (ms, seq)."""
    ms, _, seq = change_id.partition("-")
    return int(ms), int(seq)


def topic_fields(topic: Topic) -> dict[str, Any]:
    """The recorded fields of a topic."""
    return {name: getattr(topic, name) for name in TOPIC_FIELDS}


def tenant_fields(tenant: Tenant, namespace: Namespace) -> dict[str, Any]:
    """The recorded fields of a tenant in one namespace."""
    return {"qps_cap": tenant.qps_cap(namespace)}


def diff(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields whose value differs, as (before, after); both empty when nothing changed."""
    changed = [k for k in after if before.get(k) != after[k]]
    return {k: before.get(k) for k in changed}, {k: after[k] for k in changed}


def stale_fields(
    change: Change, current: Mapping[str, Any], settable: tuple[str, ...]
) -> list[str]:
    """The settable fields of ``change`` whose current value is no longer its ``after``."""
    return [k for k in change.after if k in settable and current.get(k) != change.after[k]]
