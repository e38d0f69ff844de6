"""Names of Redis keys and ZooKeeper paths: the one place that spells them.

Redis: every key of a group (its three physical queues, their checkpoints, the owner epoch, the
retry and delayed sets, the DLQ, idempotency markers) carries the same hash tag, ``{ns:tenant:
topic:index}``, so a group lives on one Redis Cluster slot and a Lua script may touch all of its
keys without CROSSSLOT. Each component is escaped (``%`` ``{`` ``}`` ``:`` become ``%25`` ``%7B``
``%7D`` ``%3A``), so no user-supplied text can end the tag early or make two groups share a tag,
even if a name ever bypassed validation. The key prefix (``emq`` by default, a per-test prefix in
tests) comes before the tag and may not contain braces.

ZooKeeper: ``/<root>/<namespace>/running/<worker>``, ``/<root>/<namespace>/assignments``,
``/<root>/<namespace>/leader``, ``/<root>/<namespace>/released/<group>@<epoch>``,
``/<root>/<namespace>/topics/<tenant>/<topic>``,
``/<root>/tenants/<tenant>``. Tenants span namespaces; topics, workers and assignments don't.
"""

from __future__ import annotations

import re

from emq.core.errors import ConfigError, InvalidInput
from emq.core.model import GroupRef, Namespace, QueueRef, TopicRef

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D", ":": "%3A"})
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_ZK_ROOT_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_ZK_NAME_ESCAPES = str.maketrans({"%": "%25", "/": "%2F", "@": "%40"})


def escape(component: str) -> str:
    """Escape one key component so that it contains no ``{``, ``}`` or ``:``."""
    return component.translate(_ESCAPES)


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (its rule: first ``{`` to the next ``}``)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


class RedisKeys:
    """Builds every Redis key EMQ uses, under one prefix."""

    def __init__(self, prefix: str = "emq") -> None:
        if not _PREFIX_RE.match(prefix):
            raise ConfigError(f"redis key prefix {prefix!r} must be 1-64 of A-Za-z0-9_.:-")
        self.prefix = prefix

    def group_tag(self, group: GroupRef) -> str:
        t = group.topic
        parts = (t.namespace.value, t.tenant, t.topic, str(group.index))
        return "{" + ":".join(escape(p) for p in parts) + "}"

    def _group_key(self, group: GroupRef, *suffix: str) -> str:
        return ":".join((self.prefix, "g", self.group_tag(group), *suffix))

    def stream(self, queue: QueueRef) -> str:
        """The append-only log of one physical queue."""
        return self._group_key(queue.group, "q", queue.priority.value)

    def checkpoint(self, queue: QueueRef) -> str:
        """The committed offset of one physical queue, with the epoch that wrote it."""
        return self._group_key(queue.group, "ckpt", queue.priority.value)

    def holder(self, group: GroupRef) -> str:
        """Which worker process claimed the group last and has not released it."""
        return self._group_key(group, "holder")

    def epoch(self, group: GroupRef) -> str:
        """The group's current owner epoch: writes carrying an older one are fenced."""
        return self._group_key(group, "epoch")

    def taken(self, holder: str) -> str:
        """Stamped by every claim that takes a group from ``holder`` (a worker process; spelled
        as given, no escaping: a claim script builds this name from the holder it finds), so
        that the holder's hold check need not read every group's keys while nothing moved.
        Standalone Redis only (see ``adapters.redis_queue.owner``)."""
        return f"{self.prefix}:taken:{holder}"

    def retries(self, group: GroupRef) -> str:
        """Jobs waiting for their next attempt, scored by due time."""
        return self._group_key(group, "retry")

    def delayed(self, group: GroupRef) -> str:
        """Jobs enqueued with ``delay_s``, scored by due time."""
        return self._group_key(group, "delayed")

    def dlq(self, group: GroupRef) -> str:
        """Dead-lettered jobs of the group."""
        return self._group_key(group, "dlq")

    def job_due(self, group: GroupRef) -> str:
        """Hash job id -> due time of the group's jobs parked with ``delay_s`` (status lookup)."""
        return self._group_key(group, "jobdue")

    def job_records(self, bucket: int, shard: int) -> str:
        """Hash job id -> its latest outcome, for one retention bucket and one shard of the job
        ids (expires with the bucket). Not per group: a worker writes a few keys per flush
        however many groups it serves."""
        return f"{self.prefix}:jobs:{bucket}:{shard}"

    def attempts(self, bucket: int, shard: int) -> str:
        """Hash ``<job id>.<attempt>`` -> the attempt's record, for one time slice and one
        shard of the job ids (expires with the job records; emq.core.attempts)."""
        return f"{self.prefix}:att:{bucket}:{shard}"

    def attempt_bytes(self) -> str:
        """Hash time slice -> bytes of attempts written in it (the namespace's byte budget)."""
        return f"{self.prefix}:att:bytes"

    def job_index(self, bucket: int, shard: int, what: str) -> str:
        """Sorted set of the job outcomes of one time slice in one shard of the topics, ordered
        by topic, then time (adapters.redis_attempts): ``what`` a state (``s:dead``), or ``k``
        (by ``key``) or ``i`` (by ``idempotency_key``). Expires with its slice."""
        return f"{self.prefix}:jx:{{{shard}}}:{bucket}:{what}"

    def delivered_log(self, group: GroupRef) -> str:
        """Stream of the group's delivered jobs as delivered (entry id: the delivery time),
        kept for the topic's ``keep_delivered_s`` for redeliveries."""
        return self._group_key(group, "delivered")

    def group_snapshots(self) -> str:
        """Hash ``str(GroupRef)`` -> what the group's owner last said it waits for (with the
        time it said it: an old one says nothing). One field per group ever snapshotted."""
        return f"{self.prefix}:snapshots"

    def idempotency(self, group: GroupRef, idempotency_key: str) -> str:
        """Marks an idempotency key as seen (kept for the de-duplication window)."""
        return self._group_key(group, "idem", escape(idempotency_key))

    def ready(self) -> str:
        """Signals which groups received work, so idle queues need not be polled."""
        return f"{self.prefix}:ready"

    def inbox(self, worker: str) -> str:
        """The ready signals addressed to one worker (:mod:`emq.core.signals`). Its own hash
        tag, shared with :meth:`due_inbox`: a fleet's inboxes spread over the Cluster's slots."""
        return f"{self.prefix}:w:{{{escape(worker)}}}:ready"

    def due_inbox(self, worker: str) -> str:
        """The due index of the groups one worker owns (same shape as :meth:`due_index`)."""
        return f"{self.prefix}:w:{{{escape(worker)}}}:due"

    def due_index(self) -> str:
        """Groups whose delayed set may hold a job, scored by its earliest due time (a hint).

        One sorted set for every group (outside the groups' hash tags): member ``str(group)``,
        score the due epoch milliseconds, never later than the group's earliest delayed job.
        """
        return f"{self.prefix}:due"

    def rates(self) -> str:
        """Current delivered/s per topic and worker, for 'show topic'."""
        return f"{self.prefix}:rates"

    def endpoint_board(self) -> str:
        """Each worker's statuses of each topic's endpoints (adaptive rates, disables)."""
        return f"{self.prefix}:endpoints"

    def latency(self, topic: str, slot: int) -> str:
        """Hash bucket index -> deliveries of ``topic`` (``str(TopicRef)``) counted in one
        time slot (``emq.core.latency``; expires after the window). A topic's slots share a
        hash tag, so one topic's window sits on one Cluster shard."""
        return f"{self.prefix}:lat:{{{escape(topic)}}}:{slot}"

    def plans(self) -> str:
        """The latest capacity plans, newest first (a list trimmed to EMQ_API_PLANS_KEPT)."""
        return f"{self.prefix}:plans"

    def changes(self) -> str:
        """The change log (emq.core.changes): a stream capped in age and length."""
        return f"{self.prefix}:changes"

    def rollout(self, rollout_id: str) -> str:
        """A plan's rollout (emq.core.rollouts) as JSON, expiring after its last update."""
        return f"{self.prefix}:rollout:{rollout_id}"

    def rollouts_latest(self) -> str:
        """The id of the rollout started last."""
        return f"{self.prefix}:rollouts:latest"

    # Subscriptions (emq.core.subscriptions): a topic's subscriptions, their version and its
    # events' records share the topic's hash tag, so one MULTI covers a change and its version.

    def _topic_tag(self, topic: TopicRef) -> str:
        parts = (topic.namespace.value, topic.tenant, topic.topic)
        return "{" + ":".join(escape(p) for p in parts) + "}"

    def subscriptions(self, topic: TopicRef) -> str:
        """Hash: subscription id -> the subscription as JSON."""
        return f"{self.prefix}:subs:{self._topic_tag(topic)}"

    def subscriptions_version(self, topic: TopicRef) -> str:
        """Counter bumped by every change of the topic's subscriptions."""
        return f"{self.prefix}:subs:{self._topic_tag(topic)}:v"

    def event(self, topic: TopicRef, event_id: str) -> str:
        """Hash: an event's type, acceptance time, and subscription id -> delivery job id."""
        return f"{self.prefix}:evt:{self._topic_tag(topic)}:{escape(event_id)}"

    def history_log(self) -> str:
        """The capped stream of traffic-history rows (every topic, every source)."""
        return f"{self.prefix}:history"

    # DLQ replays (emq.core.replays): the replay and its index are global keys; each group's
    # progress sits in the group's hash tag, beside the DLQ the replay's steps move from.

    def replay(self, replay_id: str) -> str:
        """Hash: one replay (topic, rate, selection, state, total, times)."""
        return f"{self.prefix}:replay:{escape(replay_id)}"

    def replay_lease(self, replay_id: str) -> str:
        """Which mover paces the replay (expires unless renewed)."""
        return f"{self.prefix}:replay-lease:{escape(replay_id)}"

    def replays(self, topic: TopicRef) -> str:
        """Sorted set: a topic's replay ids by creation time."""
        parts = (topic.namespace.value, topic.tenant, topic.topic)
        return f"{self.prefix}:replays:" + ":".join(escape(p) for p in parts)

    def replays_running(self) -> str:
        """Set: the ids of every running replay (what the movers look for)."""
        return f"{self.prefix}:replays-running"

    def replay_progress(self, group: GroupRef, replay_id: str) -> str:
        """Hash: a replay's cursor, counts and state in one group."""
        return self._group_key(group, "replay", escape(replay_id))

    def replay_ids(self, group: GroupRef, replay_id: str) -> str:
        """List: the DLQ entries a by-ids replay moves from the group, in the given order."""
        return self._group_key(group, "replay", escape(replay_id), "ids")

    # Transactions (emq.core.transactions): a topic's transactions, their prepared jobs and
    # their lists share the topic's own hash tag, so each transition is one script on one slot;
    # the marker of a transaction's release into a group sits in the group's tag.

    def _tx_key(self, topic: TopicRef, *suffix: str) -> str:
        parts = (topic.namespace.value, topic.tenant, topic.topic)
        tag = "{" + ":".join(escape(p) for p in parts) + "}"
        return ":".join((self.prefix, "tx", tag, *suffix))

    def transaction(self, topic: TopicRef, tx_id: str, part: str) -> str:
        """One transaction's ``rec`` (hash), ``jobs`` (its prepared jobs) or ``log`` (lists)."""
        return self._tx_key(topic, part, escape(tx_id))

    def transactions(self, topic: TopicRef, part: str) -> str:
        """A topic's ``open`` (zset id -> next check ms), ``releasing`` (set), ``all`` (zset id
        -> created ms), ``jobidx`` (hash job id time stamp -> transaction ids), ``prepared``
        (count of prepared jobs)."""
        return self._tx_key(topic, part)

    def tx_released(self, group: GroupRef, tx_id: str) -> str:
        """Set by the atomic step that appends a committed transaction's jobs to the group."""
        return self._group_key(group, "tx", escape(tx_id))

    def tx_index(self) -> str:
        """Sorted set: topics with transactions to look at (member ``str(TopicRef)``, score
        when); its generations (a hash) share its hash tag."""
        return f"{self.prefix}:txi:{{index}}"

    def tx_index_generations(self) -> str:
        return f"{self.prefix}:txi:{{index}}:gen"

    def tenant_demand(self, ns: Namespace, tenant: str) -> str:
        """A capped tenant's demand board: one field per owning worker (tenant quota)."""
        return f"{self.prefix}:tq:{ns.value}:{escape(tenant)}"


def _zk_component(value: str, what: str) -> str:
    if not value or "/" in value or value in (".", ".."):
        raise InvalidInput(what, f"{value!r} cannot be a ZooKeeper path component")
    return value


class ZkPaths:
    """Builds every ZooKeeper path EMQ uses, under one root (``/emq`` by default)."""

    def __init__(self, root: str = "/emq") -> None:
        if not _ZK_ROOT_RE.match(root):
            raise ConfigError(f"ZooKeeper root {root!r} must look like /emq or /a/b")
        self.root = root

    def namespace(self, ns: Namespace) -> str:
        return f"{self.root}/{ns.value}"

    def running(self, ns: Namespace) -> str:
        """Parent of the workers' ephemeral membership nodes."""
        return f"{self.namespace(ns)}/running"

    def worker(self, ns: Namespace, worker_id: str) -> str:
        return f"{self.running(ns)}/{_zk_component(worker_id, 'worker_id')}"

    def assignments(self, ns: Namespace) -> str:
        """The leader's current assignment (groups → worker, with a generation)."""
        return f"{self.namespace(ns)}/assignments"

    def leader(self, ns: Namespace) -> str:
        """The election node of the namespace's leader."""
        return f"{self.namespace(ns)}/leader"

    def epochs(self, ns: Namespace) -> str:
        """Parent of the per-group owner epoch counters."""
        return f"{self.namespace(ns)}/epochs"

    def released(self, ns: Namespace) -> str:
        """Parent of the release markers that former owners leave for the new owners."""
        return f"{self.namespace(ns)}/released"

    def release_marker(self, ns: Namespace, group: str, epoch: int) -> str:
        """``<group>@<epoch>``: the owner holding ``epoch`` will never touch ``group`` again.

        ``group`` is ``str(GroupRef)``; its slashes are escaped (``%2F``) to make one node name.
        """
        name = group.translate(_ZK_NAME_ESCAPES)
        return f"{self.released(ns)}/{_zk_component(name, 'group')}@{int(epoch)}"

    def topics(self, ns: Namespace) -> str:
        return f"{self.namespace(ns)}/topics"

    def tenant_topics(self, ns: Namespace, tenant: str) -> str:
        return f"{self.topics(ns)}/{_zk_component(tenant, 'tenant')}"

    def topic(self, ref: TopicRef) -> str:
        return (
            f"{self.tenant_topics(ref.namespace, ref.tenant)}/{_zk_component(ref.topic, 'topic')}"
        )

    def tenants(self) -> str:
        return f"{self.root}/tenants"

    def tenant(self, tenant: str) -> str:
        return f"{self.tenants()}/{_zk_component(tenant, 'tenant')}"

    def tenants_version(self) -> str:
        """Bumped in the transaction of every tenant write: one watch tells "tenants changed"."""
        return f"{self.root}/tenants-version"

    def config_version(self, ns: Namespace) -> str:
        """Bumped in the transaction of every topic write of ``ns``: one watch per namespace."""
        return f"{self.namespace(ns)}/config-version"
