"""The replay mover: paces the fleet's DLQ replays (:mod:`emq.core.replays`).

Every worker runs one :class:`ReplayMover`; each running replay is moved by ONE of them at a
time, the holder of the replay's lease in the store. Every ``refresh_s`` a mover looks for running
replays, takes the lease of those nobody holds and renews its own; every ``tick_s`` it moves
``rate x elapsed`` letters of each replay it holds back into their queues, spread evenly over
the topic's groups (each group is paced by its own quota, so one group is not given the whole
replay). Per replay held::

    (not held) --lease taken--> HELD --every group exhausted--> DONE (lease given up)
                                  | --cancelled (a step finds it so, or it left the running set)
                                  | --lease lost (renewal refused: another mover took it over)
                                  +--> (not held)

Why a mover and not a lane in the dispatcher: the dispatcher's hot path stays as it is, and the
replay is a stream of ordinary jobs entering the live queues at ``rate`` per second, so the
topic's quota still bounds everything it delivers (invariant 2) and the live jobs keep the rest:
with live jobs arriving at L/s and a replay at R/s, a saturated group delivers them in the
proportion they arrive (L : R), so live jobs keep at least ``quota x L / (L + R)``, and never
less than ``quota - R``. Why safe: each step is one atomic script per group (letter appended,
letter deleted, cursor advanced, counted), so a crash loses nothing and repeats nothing, and the
progress lives in the store, so the next lease holder resumes where the last one stopped. Two
movers can overlap only while a stalled holder has not yet noticed its lease expired: the
replay then runs faster for up to ``lease_s``, never twice over a letter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from emq.core.errors import BackendUnavailable
from emq.core.replays import Replay, ReplayState, ReplayStore, Slice
from emq.core.tasks import raise_if_cancelling

log = logging.getLogger(__name__)

TICK_S = 0.1
REFRESH_S = 1.0
LEASE_S = 5.0


@dataclass
class _Held:
    replay: Replay
    last: float  # monotonic time of the last tick
    open: list[int] = field(default_factory=list)  # groups with letters left
    budget: float = 0.0  # letters the pace allows now
    turn: int = 0  # where the next uneven share starts (round robin)

    def share(self, n: int) -> list[tuple[int, int]]:
        """``n`` letters over the open groups: even shares, the remainder round robin."""
        base, extra = divmod(n, len(self.open))
        counts = []
        for i, g in enumerate(self.open):
            k = base + (1 if (i - self.turn) % len(self.open) < extra else 0)
            if k:
                counts.append((g, k))
        self.turn = (self.turn + extra) % len(self.open)
        return counts


class ReplayMover:
    def __init__(
        self,
        store: ReplayStore,
        owner: str,
        *,
        tick_s: float = TICK_S,
        refresh_s: float = REFRESH_S,
        lease_s: float = LEASE_S,
    ) -> None:
        self.store = store
        self.owner = owner
        self.tick_s = tick_s
        self.refresh_s = refresh_s
        self.lease_s = lease_s
        self.held: dict[str, _Held] = {}
        self.moved = 0  # letters this mover put back, in all

    async def run(self) -> None:
        """Pace every replay this mover holds until cancelled; gives its leases up at the end."""
        refreshed = 0.0
        try:
            while True:
                raise_if_cancelling()  # (a cancel the Redis driver swallowed: emq.core.tasks)
                now = time.monotonic()
                try:
                    if now - refreshed >= self.refresh_s:
                        refreshed = now
                        await self.refresh()
                    await self.tick(now)
                except BackendUnavailable as e:  # the store is away: keep trying, never die
                    log.warning("replay mover %s: %s", self.owner, e)
                    await asyncio.sleep(self.refresh_s)
                except Exception:  # unexpected: said once per occurrence, and the mover goes on
                    log.exception("replay mover %s", self.owner)
                    await asyncio.sleep(self.refresh_s)
                await asyncio.sleep(self.tick_s)
        finally:
            await asyncio.shield(self._release_all())

    async def refresh(self) -> None:
        """Take the leases of running replays nobody moves; renew (or lose) ours."""
        running = {r.id: r for r in await self.store.active()}
        for replay_id in list(self.held):
            if replay_id not in running:  # cancelled or finished elsewhere
                await self._drop(replay_id)
        for replay_id, replay in running.items():
            if not await self.store.lease(replay_id, self.owner, self.lease_s):
                if self.held.pop(replay_id, None) is not None:
                    log.warning("replay %s: lease lost to another mover", replay_id)
                continue
            if replay_id not in self.held:
                log.info("replay %s of %s: moving at %g/s", replay_id, replay.topic, replay.rate)
                open_groups = list(range(replay.groups))
                self.held[replay_id] = _Held(replay, time.monotonic(), open_groups)

    async def tick(self, now: float) -> None:
        """Move what the pace allows of every replay held."""
        for replay_id, held in list(self.held.items()):
            rate = held.replay.rate
            # A late tick (a busy loop) catches up; a long pause (an outage) does not become
            # a burst: at most one second's worth at once.
            cap = max(1.0, rate * max(1.0, self.tick_s * 2))
            held.budget = min(cap, held.budget + rate * (now - held.last))
            held.last = now
            if not held.open:  # every group done, but the last finish did not get through
                await self._end(replay_id, ReplayState.DONE)
                continue
            n = int(held.budget)
            if n < 1:
                continue
            counts = held.share(n)
            try:
                slices = await self.store.move(held.replay, counts)
            except BackendUnavailable:
                raise
            except Exception as e:  # a replay that cannot move ends; the worker goes on
                log.exception("replay %s failed", replay_id)
                await self._end(replay_id, ReplayState.FAILED, f"{type(e).__name__}: {e}")
                continue
            await self._account(replay_id, held, slices, [g for g, _ in counts])

    async def _account(
        self, replay_id: str, held: _Held, slices: list[Slice], groups: list[int]
    ) -> None:
        moved = sum(s.moved for s in slices)
        held.budget -= moved
        self.moved += moved
        if any(s.stopped for s in slices):
            await self._drop(replay_id)
            return
        done = {g for g, s in zip(groups, slices, strict=True) if s.exhausted}
        held.open = [g for g in held.open if g not in done]
        if not held.open:
            await self._end(replay_id, ReplayState.DONE)

    async def _end(self, replay_id: str, state: ReplayState, error: str = "") -> None:
        held = self.held.get(replay_id)
        if held is not None:
            await self.store.finish(held.replay, state, error)
        await self._drop(replay_id)

    async def _drop(self, replay_id: str) -> None:
        if self.held.pop(replay_id, None) is not None:
            await self.store.release(replay_id, self.owner)

    async def _release_all(self) -> None:
        for replay_id in list(self.held):
            try:
                await self._drop(replay_id)
            except BackendUnavailable:  # the lease expires by itself
                self.held.pop(replay_id, None)
