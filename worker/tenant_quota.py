"""Tenant quota on a worker: a capped tenant's topics share its cap, across the fleet.

A tenant may have a cap per namespace (``Tenant.qps_caps``, docs/concepts/quotas.md). Every
``PERIOD_S`` each worker that owns groups of a capped tenant publishes how each of that tenant's
topics fares on it (backlogged or not, deliveries a second) on the demand board
(:class:`~emq.core.demand.DemandBoard`: one round trip a period for all its tenants, none per
job), reads every owner's posts, and computes the division of the cap among the topics
(:func:`capacity.tenant_share.divide`). All owners compute the same division from the same
posts, so no leader is needed. A topic's share is split over its groups and caps their
:class:`~capacity.rate.QpsCounter` (never above the topic's own quota).

Owners read the board at different moments (up to a period apart), so a share that *falls*
applies at once and one that *rises* only once the division has allowed it for ``HOLD_S``:
by then every owner has lowered the others' shares (a topic that wakes up takes room only after
the busy ones gave it back). Before the first division a topic of a capped tenant gets a
static share, ``cap * weight / weights of all the tenant's topics in the namespace``: safe
whatever the others do.

The caps are read from the config store's cache every ``CAPS_S`` (a change applies within that
plus a period, plus ``HOLD_S`` for a rise); with no capped tenant among those it owns groups of,
a period does nothing else. Without a board (a worker built without one) the division uses
this worker's loads alone: right when it owns all of the tenant's groups (standalone).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from capacity.tenant_share import TopicDemand, divide
from emq.core.demand import DemandBoard, Loads, TopicLoad
from emq.core.errors import BackendUnavailable, NotFound
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, TopicRef
from worker.groups import TopicState
from worker.outage import Outage

log = logging.getLogger(__name__)

PERIOD_S = 0.2  # publish, read and divide this often
STALE_S = 1.0  # a post older than this is ignored (its worker stopped, or lost its groups)
HOLD_S = 0.45  # a share rises only once the division has allowed it this long (> one period)
CAPS_S = 1.0  # the caps of the tenants it owns groups of are read (from the cache) this often

Reconfigure = Callable[[TopicState], None]


class TenantQuota:
    """One worker's part of every capped tenant's division (see the module docstring)."""

    def __init__(
        self,
        worker_id: str,
        namespace: Namespace,
        config: ConfigStore,
        topics: Mapping[TopicRef, TopicState],
        reconfigure: Reconfigure,
        *,
        board: DemandBoard | None = None,
        outage: Outage | None = None,
    ) -> None:
        self._id = worker_id
        self._ns = namespace
        self._config = config
        self._topics = topics
        self._reconfigure = reconfigure
        self._board = board
        self._outage = outage or Outage()
        self.caps: dict[str, int] = {}  # capped tenants (this worker's view of the config)
        self._seen: dict[TopicRef, tuple[float, int]] = {}  # (monotonic, outcomes) last period
        self._allowed: dict[TopicRef, deque[tuple[float, int]]] = {}  # divisions, last HOLD_S
        self._caps_due = 0.0  # (monotonic)

    # ------------------------------------------------------------------ what groups read

    def qps(self, topic: TopicState) -> int:
        """The quota ``topic``'s groups share now: its own, or its share of its tenant's cap."""
        share = topic.tenant_share
        if share is None:
            cap = self.caps.get(topic.ref.tenant)
            if cap is None:
                return topic.topic.qps
            share = topic.tenant_share = self._static_share(topic, cap)
        # (at least 1 per group: a share from before the topic gained groups may be less)
        return max(topic.topic.groups, min(topic.topic.qps, share))

    def _static_share(self, topic: TopicState, cap: int) -> int:
        tenant = topic.ref.tenant
        weights = sum(t.topic.weight for r, t in self._topics.items() if r.tenant == tenant)
        return max(topic.topic.groups, cap * topic.topic.weight // max(1, weights))

    # ------------------------------------------------------------------ the loop

    async def prime(self) -> None:
        """Read every tenant's cap once (before the first claim: no group starts uncapped)."""
        try:
            tenants = await self._config.list_tenants()
        except BackendUnavailable as e:
            log.warning("tenant caps not read yet (%s): read again within %.2f s", e, PERIOD_S)
            return
        self.caps = {t.name: c for t in tenants if (c := t.qps_cap(self._ns)) is not None}

    async def run(self) -> None:
        """Every PERIOD_S: refresh the caps, exchange loads, divide, apply."""
        while True:
            await asyncio.sleep(PERIOD_S)
            try:
                await self.step(time.monotonic())
            except BackendUnavailable as e:
                self._outage.noted("tenant quota", e)  # shares stay as they are meanwhile
            except Exception:  # a bug here must not stop the worker's deliveries
                log.exception("tenant quota: a period failed; shares stay as they are")
            else:
                self._outage.resumed("tenant quota")

    async def step(self, mono: float) -> None:
        """One period (public for tests). Without any capped tenant it costs nothing but the
        caps' refresh every CAPS_S (a worker owning 10 000 idle queues must stay idle)."""
        if mono >= self._caps_due:
            self._caps_due = mono + CAPS_S
            await self._refresh_caps({r.tenant for r, t in self._topics.items() if t.groups})
        if not self.caps:
            return
        capped: dict[str, list[TopicRef]] = {}
        for ref, state in self._topics.items():
            if state.groups and ref.tenant in self.caps:
                capped.setdefault(ref.tenant, []).append(ref)
        mine = {t: self._loads(refs, mono) for t, refs in capped.items()}
        posts = await self._exchange(mine)
        for tenant, refs in capped.items():
            shares = divide(self.caps[tenant], self._demands(tenant, posts.get(tenant, [])))
            for ref in refs:
                self._apply(self._topics[ref], shares.get(ref.topic), mono)

    async def _refresh_caps(self, owned: Iterable[str]) -> None:
        for tenant in owned:
            try:
                cap = (await self._config.get_tenant(tenant)).qps_cap(self._ns)
            except NotFound:
                cap = None
            if cap != self.caps.get(tenant):
                log.info("tenant %s in %s: cap %s QPS", tenant, self._ns.value, cap)
                if cap is None:
                    self._uncap(tenant)
                else:
                    self.caps[tenant] = cap

    def _uncap(self, tenant: str) -> None:
        self.caps.pop(tenant, None)
        for ref, state in self._topics.items():
            if ref.tenant == tenant and state.tenant_share is not None:
                state.tenant_share = None
                self._allowed.pop(ref, None)
                self._reconfigure(state)

    def _loads(self, refs: list[TopicRef], mono: float) -> Loads:
        loads: dict[str, TopicLoad] = {}
        for ref in refs:
            state = self._topics[ref]
            done = state.stats.version()
            at, before = self._seen.get(ref, (mono, done))
            self._seen[ref] = (mono, done)
            rate = (done - before) / (mono - at) if mono > at else 0.0
            backlogged = any(g.buffered() for g in state.groups.values())
            loads[ref.topic] = TopicLoad(backlogged and not state.topic.paused, rate)
        return loads

    async def _exchange(self, mine: dict[str, Loads]) -> dict[str, list[Loads]]:
        if not mine:
            return {}
        if self._board is None:
            return {tenant: [loads] for tenant, loads in mine.items()}
        return await self._board.exchange(self._ns, self._id, mine, STALE_S)

    def _demands(self, tenant: str, posts: list[Loads]) -> dict[str, TopicDemand]:
        """The posts of every owner, per topic (one topic may have groups on several)."""
        seen: dict[str, tuple[bool, float]] = {}
        for loads in posts:
            for name, load in loads.items():
                backlogged, rate = seen.get(name, (False, 0.0))
                seen[name] = (backlogged or load.backlogged, rate + load.rate)
        demands: dict[str, TopicDemand] = {}
        tenant_topics = {r.topic: s.topic for r, s in self._topics.items() if r.tenant == tenant}
        for name, (backlogged, rate) in seen.items():
            topic = tenant_topics.get(name)
            if topic is not None:  # (unknown here yet: the config watch is behind)
                demands[name] = TopicDemand(topic.qps, topic.weight, topic.groups, backlogged, rate)
        return demands

    def _apply(self, state: TopicState, share: int | None, mono: float) -> None:
        if share is None:
            return  # our own post was not read back (a stale clock?): keep the share
        now = state.tenant_share
        allowed = self._allowed.get(state.ref)
        if allowed is None:  # (the share so far counts as a division: a rise waits HOLD_S)
            allowed = self._allowed[state.ref] = deque([(mono, now)] if now is not None else [])
        allowed.append((mono, share))
        while len(allowed) > 1 and allowed[1][0] <= mono - HOLD_S:
            allowed.popleft()  # (the first left is the division in force HOLD_S ago)
        held = min(s for _t, s in allowed)
        # Falls at once; rises only to what every division of the last HOLD_S allowed.
        new = share if now is None or share < now else max(now, held)
        if new != now:
            log.info("topic %s: tenant share %s -> %d QPS", state.ref, now, new)
            state.tenant_share = new
            self._reconfigure(state)
