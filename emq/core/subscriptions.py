"""Subscriptions and events: publish once, deliver to every endpoint subscribed to the type.

A topic has up to :data:`MAX_SUBSCRIPTIONS` subscriptions ``{id, url, event_types, headers,
enabled}``. An event ``{type, payload, ...}`` published to the topic becomes one ordinary job per
enabled subscription whose patterns match its type (:func:`Snapshot.matching`), so each delivery
has its topic's quota, priority, key order, retries, DLQ and job status.

**Patterns.** An event type is 1-128 of ``A-Za-z0-9_.:-``; a pattern is the same with ``*``
wildcards, each matching any run of characters (dots included): ``invoice.*`` matches
``invoice.paid`` and ``invoice.paid.late``, ``*`` matches every type.

**Signing secrets.** Each subscription has its own Standard Webhooks secret, derived rather than
stored: ``HMAC-SHA256(topic key, "emq-subscription:" + signer)`` where ``signer`` is
``<subscription id>.<key id>`` and the key id is random, made at creation and at every rotation
(:func:`subscription_secret`). A delivery job carries only its ``signer`` (the envelope's ``s``);
the worker, which already holds the topic's secret, derives the same key. So no secret is stored
in a queue, in Redis or in a subscription record, and signing costs the worker nothing more than
a topic's job (the derivation is cached). Consequences, documented in docs/concepts/events.md:
whoever holds the topic's secret can derive its subscriptions' secrets (the topic and its
subscriptions belong to one tenant), a subscription's secret is shown once (at creation and at
rotation), and a delivery is signed with the secret that was current when its event was
accepted (a change applies to events accepted after it, rotation included).

Nothing here does I/O; the stores are :class:`SubscriptionStore` implementations in ``adapters``.
"""

from __future__ import annotations

import abc
import base64
import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from emq.core.errors import ConfigConflict, InvalidInput, NotFound
from emq.core.refs import TopicRef

MAX_SUBSCRIPTIONS = 1000  # per topic
MAX_TYPE_CHARS = 128  # an event type, and a pattern
MAX_PATTERNS = 32  # patterns per subscription
TYPE_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
EVENT_TYPES_PATTERN = r"^[A-Za-z0-9_.:\-*]{1,128}$"
SUBSCRIPTION_ID_PATTERN = r"^sub_[0-9a-f]{16}$"
EVENT_ID_PATTERN = r"^evt_[0-9a-f]{32}$"
EVENT_ID_HEADER = "emq-event-id"
EVENT_TYPE_HEADER = "emq-event-type"
EVENT_HEADERS = frozenset({EVENT_ID_HEADER, EVENT_TYPE_HEADER})
_SUB_ID_RE = re.compile(SUBSCRIPTION_ID_PATTERN)
_EVENT_ID_RE = re.compile(EVENT_ID_PATTERN)


def new_subscription_id() -> str:
    return "sub_" + os.urandom(8).hex()


def new_key_id() -> str:
    """The random part of a signer: a new one per creation and per rotation."""
    return os.urandom(6).hex()


def new_event_id() -> str:
    return "evt_" + os.urandom(16).hex()


def idempotent_event_id(ref: TopicRef, idempotency_key: str) -> str:
    """The event id of an event given an idempotency key: the same for every repeat."""
    digest = hashlib.blake2b(f"{ref}\0{idempotency_key}".encode(), digest_size=16).hexdigest()
    return "evt_" + digest


def is_subscription_id(text: str) -> bool:
    return _SUB_ID_RE.match(text) is not None


def is_event_id(text: str) -> bool:
    return _EVENT_ID_RE.match(text) is not None


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if p == "*" else re.escape(p) for p in re.split(r"(\*)", pattern))
    )


def matches(pattern: str, event_type: str) -> bool:
    """Whether ``pattern`` (``*`` = any run of characters) matches ``event_type`` whole."""
    if "*" not in pattern:
        return pattern == event_type
    return _compiled(pattern).fullmatch(event_type) is not None


@dataclass(frozen=True, slots=True)
class Subscription:
    """An endpoint subscribed to a topic's events whose type matches one of ``event_types``."""

    id: str
    url: str
    event_types: tuple[str, ...]
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    key_id: str = ""  # the signer's random part (see the module): rotated with the secret
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def signer(self) -> str:
        """What a delivery carries to be signed with this subscription's secret."""
        return f"{self.id}.{self.key_id}"

    def wants(self, event_type: str) -> bool:
        return self.enabled and any(matches(p, event_type) for p in self.event_types)

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "url": self.url,
            "event_types": list(self.event_types),
            "headers": dict(self.headers),
            "enabled": self.enabled,
            "key_id": self.key_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Subscription:
        return cls(
            str(d["id"]),
            str(d["url"]),
            tuple(d["event_types"]),  # type: ignore[arg-type]
            dict(d.get("headers") or {}),  # type: ignore[call-overload]
            bool(d.get("enabled", True)),
            str(d.get("key_id", "")),
            float(d.get("created_at", 0.0)),  # type: ignore[arg-type]
            float(d.get("updated_at", 0.0)),  # type: ignore[arg-type]
        )

    def rotated(self, now: float | None = None) -> Subscription:
        return replace(self, key_id=new_key_id(), updated_at=now or time.time())


class Snapshot:
    """A topic's subscriptions as of one version; :meth:`matching` remembers its answers per
    event type (a topic publishes few types, each many times)."""

    __slots__ = ("_matched", "subscriptions", "version")

    def __init__(self, version: int, subscriptions: Sequence[Subscription]) -> None:
        self.version = version
        self.subscriptions = tuple(sorted(subscriptions, key=lambda s: s.created_at))
        self._matched: dict[str, tuple[Subscription, ...]] = {}

    def matching(self, event_type: str) -> tuple[Subscription, ...]:
        found = self._matched.get(event_type)
        if found is None:
            found = tuple(s for s in self.subscriptions if s.wants(event_type))
            if len(self._matched) < 1024:
                self._matched[event_type] = found
        return found


def _key_of(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret (prefix and padding optional)."""
    return base64.b64decode(secret.removeprefix("whsec_") + "==")


@lru_cache(maxsize=8192)
def subscription_secret(topic_secret: str, signer: str) -> str:
    """The Standard Webhooks secret of the subscription ``signer`` names (see the module)."""
    if not topic_secret:
        raise ConfigConflict(
            "the topic has no signing secret, so its subscriptions cannot have one"
        )
    mac = hmac.new(_key_of(topic_secret), b"emq-subscription:" + signer.encode(), "sha256")
    return "whsec_" + base64.b64encode(mac.digest()).decode()


@dataclass(frozen=True, slots=True)
class EventRecord:
    """What ``GET .../events/{id}`` starts from: the event's type, when it was accepted, and
    the delivery job of each subscription it matched."""

    id: str
    type: str
    accepted_ms: int
    deliveries: Mapping[str, str]  # subscription id -> job id


class SubscriptionLimit(InvalidInput):
    """A topic already has :data:`MAX_SUBSCRIPTIONS` subscriptions (HTTP 422, field named)."""

    code = "limit"


class SubscriptionStore(abc.ABC):
    """Where a topic's subscriptions and its events' records live."""

    @abc.abstractmethod
    async def create(self, ref: TopicRef, sub: Subscription, limit: int) -> None:
        """Store a new subscription; :class:`SubscriptionLimit` if the topic has ``limit``."""

    @abc.abstractmethod
    async def list(self, ref: TopicRef) -> list[Subscription]:
        """Every subscription of the topic, oldest first."""

    async def get(self, ref: TopicRef, sub_id: str) -> Subscription:
        """One subscription; :class:`NotFound` if the topic has none by that id."""
        for sub in await self.list(ref):
            if sub.id == sub_id:
                return sub
        raise NotFound(f"no subscription {sub_id} in topic {ref}")

    @abc.abstractmethod
    async def update(
        self, ref: TopicRef, sub_id: str, change: Callable[[Subscription], Subscription]
    ) -> Subscription:
        """Apply ``change`` to the stored subscription atomically; :class:`NotFound`."""

    @abc.abstractmethod
    async def delete(self, ref: TopicRef, sub_id: str) -> None:
        """Remove it; :class:`NotFound` if there is none. Deliveries already made stay."""

    @abc.abstractmethod
    async def snapshot(self, ref: TopicRef) -> Snapshot:
        """The topic's subscriptions as of now: a change stored before this call returns is in
        it (an event is matched against this, so a change applies to events accepted after)."""

    def cached(self, ref: TopicRef) -> Snapshot | None:
        """The last snapshot this store read of the topic, if any (no I/O; maybe stale)."""
        return None

    async def record_if_current(
        self, ref: TopicRef, version: int, records: Sequence[EventRecord]
    ) -> bool:
        """Write ``records`` and say whether the topic's subscriptions are still at
        ``version`` (as :meth:`snapshot` would read it now). Records written for a version that
        is no longer current are left to expire (their event ids are never given out)."""
        current = (await self.snapshot(ref)).version == version
        await self.record_events(ref, records)
        return current

    @abc.abstractmethod
    async def record_events(self, ref: TopicRef, records: Sequence[EventRecord]) -> None:
        """Remember each event's deliveries (for a retention); a repeat adds to what is known."""

    @abc.abstractmethod
    async def event(self, ref: TopicRef, event_id: str) -> EventRecord:
        """The record of an event; :class:`NotFound` if unknown or no longer kept."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release what the store holds."""
