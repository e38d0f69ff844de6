"""The real parts of a fault trial, on loopback: Redis, ZooKeeper, the recording sink, workers, API.

:class:`Rig` starts Redis (``deploy/redis.sh``: AOF, ``appendfsync everysec``) and ZooKeeper
(``deploy/zookeeper.sh``, 500 ms ticks so that sessions of a few seconds are allowed) on free
ports in a temporary directory, and the sink (:class:`emq.rigs.procs.SinkProcess`, recording).
It creates topics in the real config store and enqueues through the real
:class:`~emq.api.enqueue.Enqueuer`, as the API does. Workers (``emq worker``) and the API
(``emq api``) run as :class:`~emq.rigs.procs.Proc`: real processes that a trial may
``kill -9``, ``SIGSTOP`` or restart. The servers themselves can be killed and restarted the same
way (:meth:`Rig.kill`).

Everything is stopped however the trial ends: ``async with Rig.running(tmp) as rig``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp

from capacity import group_count
from emq.api.enqueue import Enqueuer
from emq.bench.promises import Delivery, Quota, parse_log
from emq.compose import open_config, open_queues
from emq.core.errors import BackendUnavailable, EmqError
from emq.core.interfaces import ConfigStore, PutItem, QueueBackend
from emq.core.model import (
    Envelope,
    Job,
    Namespace,
    RetryPolicy,
    Tenant,
    Topic,
    TopicRef,
    new_job_id,
)
from emq.core.naming import RedisKeys
from emq.core.settings import Settings
from emq.rigs.procs import Proc, SinkProcess
from emq.stack import Service, free_port

TENANT = "faults"
ADMIN_TOKEN = "faults-admin-token"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ZK_TICK_MS = "500"
BODY = '{"fault":true}'


class Rig:
    """Redis, ZooKeeper, the recording sink and the trial's processes (see the module docstring)."""

    def __init__(self, tmp: Path, session_s: float = 4.0) -> None:
        self.tmp = tmp
        self.session_s = session_s
        self.redis = Service("redis", "redis.sh", tmp / "redis", free_port())
        self.zk = Service("zookeeper", "zookeeper.sh", tmp / "zk", free_port(), (ZK_TICK_MS,))
        self.settings = Settings(
            redis_url=f"redis://{self.redis.address}/0",
            zk_hosts=self.zk.address,
            redis_key_prefix="faults",
            admin_token=ADMIN_TOKEN,
            zk_session_timeout_s=session_s,
        )
        self.sink_port = free_port()
        self.sink_base = f"http://127.0.0.1:{self.sink_port}"
        self.procs: list[Proc] = []
        self.quotas: dict[str, Quota] = {}
        self.accepted: set[str] = set()
        self._sink = SinkProcess(self.sink_port, tmp / "sink.log", record=True)
        self._http: aiohttp.ClientSession | None = None
        self._queues: QueueBackend | None = None
        self._config: ConfigStore | None = None
        self._log: list[Delivery] = []
        self._log_next = 0
        self._topics: dict[str, Topic] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, tmp: Path, session_s: float = 4.0) -> AsyncIterator[Rig]:
        rig = cls(tmp, session_s)
        try:
            await rig._start()
            yield rig
        finally:
            await rig._stop()

    async def _start(self) -> None:
        self._start_servers()
        await self._sink.start()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._queues = await open_queues(self.settings)
        self._config = await open_config(self.settings)
        await self._config.create_tenant(Tenant(TENANT, "Fault trials", "0" * 64, time.time()))

    def _start_servers(self) -> None:
        self.redis.start()
        self.zk.start()

    async def _stop(self) -> None:
        # Every step runs even if an earlier one fails: nothing may be left running.
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.stop()
        for resource in (self._queues, self._config):
            with contextlib.suppress(Exception):
                if resource is not None:
                    await asyncio.wait_for(resource.aclose(), 10)
        with contextlib.suppress(Exception):
            if self._http is not None:
                await self._http.close()
        with contextlib.suppress(Exception):
            await self._sink.stop()
        # The servers' data is the rig's own temporary directory, thrown away next: killed, not
        # shut down (ZooKeeper's shutdown takes seconds, Redis's writes its AOF once more).
        for service in (self.zk, self.redis):
            with contextlib.suppress(Exception):
                self.kill(service)
            with contextlib.suppress(Exception):
                service.stop()

    # ----------------------------------------------------------------------- servers

    def kill(self, service: Service) -> None:
        """``kill -9`` Redis or ZooKeeper (no shutdown, no final AOF rewrite)."""
        status = service.status()
        if status.pid is not None:
            os.kill(status.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(status.pid):
                time.sleep(0.02)

    # ----------------------------------------------------------------------- topics, jobs

    @property
    def queues(self) -> QueueBackend:
        assert self._queues is not None
        return self._queues

    @property
    def config(self) -> ConfigStore:
        assert self._config is not None
        return self._config

    @property
    def sink(self) -> SinkProcess:
        """The recording sink process (``GET /_stats``, ``/_log``)."""
        return self._sink

    def ref(self, name: str) -> TopicRef:
        return TopicRef(Namespace.ONLINE, TENANT, name)

    def url(self, name: str, kind: str = "t", query: str = "") -> str:
        """The sink's URL for topic ``name``: ``t`` answers at once, ``hang`` never, ``slow/MS``
        after MS milliseconds."""
        return f"{self.sink_base}/{kind}/{name}" + (f"?{query}" if query else "")

    async def topic(self, name: str, qps: int, retry: RetryPolicy | None = None) -> Topic:
        groups = group_count(qps, self.settings.max_group_qps)
        topic = Topic(self.ref(name), qps, groups, retry=retry or RetryPolicy(), secret=SECRET)
        await self.config.create_topic(topic)
        self.quotas[name] = Quota(qps, groups)
        self._topics[name] = topic
        return topic

    def adopt(self, topic: Topic) -> None:
        """Count a topic created elsewhere (through the API) as one of the rig's."""
        name = topic.ref.topic
        self.quotas[name] = Quota(topic.qps, topic.groups, topic.burst)
        self._topics[name] = topic

    async def enqueue(self, name: str, count: int, url: str | None = None) -> list[str]:
        """``count`` jobs for topic ``name`` through the real enqueue path, in batches of 1000."""
        enqueuer = Enqueuer(self.config, self.queues)
        job = {"url": url or self.url(name), "body": BODY}
        ids: list[str] = []
        for start in range(0, count, 1000):
            batch = [job] * min(1000, count - start)
            ids += (await enqueuer.enqueue(self.ref(name), batch, batch=True)).ids
        self.accepted.update(ids)
        return ids

    async def put_raw(self, name: str, jobs: Sequence[Job], group: int = 0) -> list[str]:
        """Jobs stored straight into a group's queues, past the API's checks (poison jobs)."""
        queue = self.ref(name).group(group)
        items = []
        for job in jobs:
            job_id = new_job_id()
            envelope = Envelope(job_id, job, int(time.time() * 1000))
            items.append(PutItem(queue.queue(job.priority), job_id, envelope.encode()))
        await self.queues.put(items)
        return [item.job_id for item in items]

    async def dead_ids(self, names: Sequence[str] | None = None) -> set[str]:
        """The job ids in the dead-letter queues of ``names`` (every topic of the rig if None);
        a trial's own client may meet a Redis that just restarted: it tries again meanwhile."""
        for attempt in range(20):
            try:
                return await self._dead_ids(names)
            except BackendUnavailable:
                if attempt == 19:
                    raise
                await asyncio.sleep(0.5)
        return set()

    async def _dead_ids(self, names: Sequence[str] | None) -> set[str]:
        out: set[str] = set()
        for name in names or list(self._topics):
            for group in self._topics[name].group_refs():
                after: str | None = None
                while True:
                    letters = await self.queues.list_dead(group, after, 1000)
                    out.update(Envelope.decode(letter.payload).id for letter in letters)
                    if len(letters) < 1000:
                        break
                    after = letters[-1].id
        return out

    async def stored_ids(self) -> set[str]:
        """The ids of jobs still stored and not done: stream entries after their queue's
        checkpoint, and the delayed and retry sets. A run whose drain wait ended before every
        job was delivered (a keyed topic is limited to one request per key in flight, and a
        starved machine is slow) has these still waiting: not delivered, and not lost either."""
        import redis.asyncio as aioredis  # (bench only: the rig reads the keys as they are)

        keys = RedisKeys(self.settings.redis_key_prefix)
        client = aioredis.Redis.from_url(self.settings.redis_url)
        out: set[str] = set()
        try:
            for topic in self._topics.values():
                for group in topic.group_refs():
                    for queue in group.queues():
                        done = await client.hget(keys.checkpoint(queue), "o")
                        start = "(" + done.decode() if done else "-"
                        for _, fields in await client.xrange(keys.stream(queue), start, "+"):
                            out.add(Envelope.decode(fields[b"d"]).id)
                    for zset in (keys.delayed(group), keys.retries(group)):
                        for member in await client.zrange(zset, 0, -1):
                            payload = member if member[:1] == b"{" else member.partition(b"|")[2]
                            out.add(Envelope.decode(payload).id)
        finally:
            await client.aclose()
        return out

    # ----------------------------------------------------------------------- the sink

    async def deliveries(self) -> list[Delivery]:
        """The sink's delivery log so far (fetched incrementally)."""
        page = await self._sink.get(f"/_log?from={self._log_next}")
        self._log += parse_log(page["log"])
        self._log_next = page["next"]
        return self._log

    async def wait_delivered(self, ids: set[str], timeout_s: float, dead: bool = False) -> float:
        """Wait until every id of ``ids`` was delivered with a 2xx (or, with ``dead``, is in a
        DLQ); seconds waited."""
        started = time.monotonic()
        while True:
            done = {d.job_id for d in await self.deliveries() if d.ok}
            if dead and not ids <= done:
                done |= await self.dead_ids()
            if ids <= done or time.monotonic() - started > timeout_s:
                return time.monotonic() - started
            await asyncio.sleep(0.25)

    # ----------------------------------------------------------------------- processes

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        return (
            base
            | {
                "EMQ_REDIS_URL": self.settings.redis_url,
                "EMQ_ZK_HOSTS": self.settings.zk_hosts,
                "EMQ_REDIS_KEY_PREFIX": self.settings.redis_key_prefix,
                "EMQ_ADMIN_TOKEN": ADMIN_TOKEN,
                "EMQ_ZK_SESSION_TIMEOUT_S": str(self.session_s),
                "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
                "EMQ_WORKER_METRICS_PORT": "0",
                "EMQ_LOG_LEVEL": "INFO",
            }
            | extra
        )

    def worker(self, worker_id: str, standalone: bool = False, **env: str) -> Proc:
        argv = ["worker", "--id", worker_id] + (["--standalone"] if standalone else [])
        proc = Proc(worker_id, argv, self.env(**env), self.tmp / f"{worker_id}.log")
        self.procs.append(proc)
        return proc

    async def api(self) -> str:
        """Start ``emq api`` on a free port; its base URL once it answers."""
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = Proc("api", ["api"], self.env(EMQ_API_URL=base), self.tmp / "api.log")
        self.procs.append(proc)
        assert self._http is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not proc.alive:
                raise EmqError(f"emq api exited: {proc.log()}")
            with contextlib.suppress(aiohttp.ClientError):
                async with self._http.get(base + "/healthz") as r:
                    if r.status == 200:
                        return base
            await asyncio.sleep(0.2)
        raise EmqError(f"emq api did not answer within 30 s: {proc.log()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of ours stays a zombie until reaped; daemons (Redis) are reparented.
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True
