"""The JSON stored at the config store's ZooKeeper nodes, and the names in version bumps.

Pure functions (no kazoo calls): :mod:`adapters.zk_config` writes and reads with them, and the
mirrors (:mod:`adapters.zk_mirror`) learn from a bump's data which tenant or topic changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]

from adapters import zk
from emq.core.endpoints import EndpointPolicy
from emq.core.errors import BackendUnavailable, InvalidInput
from emq.core.model import Namespace, PriorityMode, RetryPolicy, Tenant, Topic, TopicRef

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

DECODE_ERRORS = (ValueError, KeyError, TypeError)
_RETRY_FIELDS = tuple(f.name for f in dataclasses.fields(RetryPolicy))
_TOPIC_SCALARS = (
    "qps",
    "groups",
    "endpoint_concurrency",
    "max_backlog",
    "paused",
    "secret",
    "dlq_max_entries",  # (absent from topics stored before DLQ retention: the defaults)
    "dlq_max_age_s",
)
# Written only when not the default (a topic without them stores what it did before tenant
# quotas and bursts); absent, the default.
_TOPIC_OPTIONAL: dict[str, object] = {
    "weight": 1,
    "burst": 0,
    "transaction_default": "rollback",
    "response_excerpt_bytes": 0,
    "callback_url": "",
    "failure_callback_url": "",
    "keep_delivered_s": 0,
}


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode_tenant(tenant: Tenant) -> bytes:
    """The JSON stored at a tenant's node (the token only as its SHA-256)."""
    d = dataclasses.asdict(tenant)
    if not d["qps_caps"]:
        del d["qps_caps"]  # (no cap: the node is what it was before tenant quotas)
    return _dump(d)


def decode_tenant(name: str, raw: bytes) -> Tenant:
    """A tenant from its node; the node's name is authoritative. Raises ValueError and kin."""
    d = json.loads(raw)
    return Tenant(
        name=name,
        display_name=str(d.get("display_name", "")),
        token_sha256=str(d.get("token_sha256", "")),
        created_at=float(d.get("created_at", 0.0)),
        qps_caps={str(k): int(v) for k, v in d.get("qps_caps", {}).items()},
    )


def encode_topic(topic: Topic) -> bytes:
    """The JSON stored at a topic's node: every field but ``ref``, which is the node's path."""
    d: dict[str, Any] = {name: getattr(topic, name) for name in _TOPIC_SCALARS}
    d |= {k: v for k, default in _TOPIC_OPTIONAL.items() if (v := getattr(topic, k)) != default}
    d["retry"] = topic.retry.to_dict()
    d["priority_mode"] = topic.priority_mode.value
    if topic.endpoints != EndpointPolicy():  # (topics without the feature stay as they were)
        d["endpoints"] = topic.endpoints.to_dict()
    return _dump(d)


def decode_topic(ref: TopicRef, raw: bytes) -> Topic:
    """A topic from its node. Unknown keys are ignored (a newer writer); missing ones default."""
    d = json.loads(raw)
    retry = d.get("retry", {})
    return Topic(
        ref=ref,
        retry=RetryPolicy(**{k: retry[k] for k in _RETRY_FIELDS if k in retry}),
        priority_mode=PriorityMode(d.get("priority_mode", PriorityMode.STRICT.value)),
        endpoints=EndpointPolicy.from_dict(d.get("endpoints", {})),
        **{k: d[k] for k in (*_TOPIC_SCALARS, *_TOPIC_OPTIONAL) if k in d},
    )


def sort_key(ref: TopicRef) -> tuple[str, str, str]:
    return (ref.namespace.value, ref.tenant, ref.topic)


def topic_of(ns: Namespace, bump: bytes) -> TopicRef | None:
    """The topic a bump of ``ns``'s config-version names (its data is ``ns/tenant/topic``)."""
    parts = bump.decode(errors="replace").split("/")
    if len(parts) != 3 or parts[0] != ns.value:
        return None
    return TopicRef(ns, parts[1], parts[2])


def tenant_of(bump: bytes) -> str | None:
    """The tenant a bump of tenants-version names (its data is the tenant's name)."""
    return bump.decode(errors="replace") or None


def existing(found: Mapping[K, V | None]) -> dict[K, V]:
    return {k: v for k, v in found.items() if v is not None}


def check_same_ref(before: Topic, after: Topic) -> Topic:
    """Refuse a change that would move a topic to another name (it would fork the topic)."""
    if after.ref != before.ref:
        raise InvalidInput("ref", f"a change may not rename topic {before.ref} to {after.ref}")
    return after


@contextlib.contextmanager
def skip_unreadable(path: str) -> Iterator[None]:
    """In a bulk load, skip a corrupt node loudly: one must not blind every reader."""
    try:
        yield
    except DECODE_ERRORS as e:
        log.warning("skipping unreadable config node %s: %s", path, e)


def decode_all(
    what: str,
    keys: Sequence[K],
    paths: Sequence[str],
    outcomes: Sequence[object],
    decode: Callable[[K, bytes], V],
) -> dict[K, V | None]:
    """Decode a batch of reads: None for a missing (or unreadable) node."""
    found: dict[K, V | None] = {}
    for key, path, outcome in zip(keys, paths, outcomes, strict=True):
        found[key] = None
        if not isinstance(outcome, NoNodeError):  # else: deleted since we listed it
            data, _stat = zk.check(outcome, what)
            with skip_unreadable(path):
                found[key] = decode(key, data)
    return found


def decode_one(path: str, decode: Callable[[Any, bytes], V], key: Any, data: bytes) -> V:
    try:
        return decode(key, data)
    except DECODE_ERRORS as e:
        raise BackendUnavailable(f"unreadable config node {path}: {e}") from e
