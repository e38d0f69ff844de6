"""A real 3-node ZooKeeper ensemble losing its quorum (2 of 3 nodes killed), then back: the
config store that serves admin writes (the API's) accepts one within 2 s of the quorum's return,
and a store that follows the topics (a worker's) sees a change made then within 2 s.

kazoo's own reconnection policy doubled its pause after every failed attempt (up to an hour):
after an outage of a few seconds its clients slept for seconds more once the quorum was back,
answering 503 "SUSPENDED" meanwhile. See ``adapters.zk.reconnecting``."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.zk_config import connect
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.rigs.ensemble import ZkEnsemble

pytestmark = pytest.mark.serial  # judges recovery time

OUTAGE_S = 5.0
BOUND_S = 2.0


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZkEnsemble]:
    ens = ZkEnsemble(tmp_path)
    try:
        ens.start()
        ens.wait_quorum()
        yield ens
    except BaseException:
        print(ens.log_tail())
        raise
    finally:
        ens.stop()


async def _first_accepted_write(store: object, ref: TopicRef, qps: int) -> float:
    while True:
        try:
            await store.update_topic(ref, lambda t: dataclasses.replace(t, qps=qps))  # type: ignore[attr-defined]
            return time.time()
        except BackendUnavailable:
            await asyncio.sleep(0.05)


async def test_admin_writes_and_watches_are_back_within_two_seconds_of_the_quorum(
    ensemble: ZkEnsemble,
) -> None:
    api = await connect(ensemble.hosts, session_timeout_s=4.0)
    worker = await connect(ensemble.hosts, session_timeout_s=4.0)
    try:
        ref = TopicRef(Namespace.ONLINE, "t", "a")
        await api.create_tenant(Tenant("t", "t", "0" * 64, time.time()))
        await api.create_topic(Topic(ref, 10, 1))
        seen: dict[int, float] = {}

        async def follow() -> None:
            async for topics in worker.watch_topics(Namespace.ONLINE):
                if ref in topics:
                    seen.setdefault(topics[ref].qps, time.time())

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        assert 10 in seen
        ensemble.kill([2, 3])
        await asyncio.sleep(OUTAGE_S)
        with pytest.raises(BackendUnavailable):  # no quorum: refused at once, nothing written
            await asyncio.wait_for(api.update_topic(ref, lambda t: t), 10)
        ensemble.start([2, 3])
        write = asyncio.create_task(_first_accepted_write(api, ref, 20))
        quorum_at = await asyncio.to_thread(ensemble.wait_quorum)
        accepted_at = await asyncio.wait_for(write, 30)
        assert accepted_at - quorum_at <= BOUND_S
        # A change made after recovery reaches the follower within the bound.
        changed = await _first_accepted_write(api, ref, 30)
        deadline = time.monotonic() + 10
        while 30 not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert 30 in seen and seen[30] - changed <= BOUND_S
        follower.cancel()
    finally:
        await api.aclose()
        await worker.aclose()
