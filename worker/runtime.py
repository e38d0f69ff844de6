"""The worker process: the task set, its lifecycle, and the push path.

Which groups it works, and each group's ownership state (CLAIMING, CONTESTED_WAIT, OWNED,
RELEASING, RELEASED, DROPPED), is :class:`worker.ownership.Ownership`'s.

A claim makes this process the group's holder in the store; a release removes it. Every
HOLD_CHECK_S the worker checks its holds in one round trip and tells the assignment source the
store vouches for the rest until the check's send time + HOLD_VALID_S (:mod:`worker.holds`).

Tasks: topic watch, assignment follower, hold checker, fetcher (+ ready-signal listener, due-job
promoter, sweeper), dispatcher, the sender pool (:mod:`worker.senders`: a fixed number counted
against the send limit, more while pushes wait on slow endpoints), the outcome writer, the
checkpointer and the trimmers (:class:`worker.committer.Committer`: delivered entries of every
queue that moved, aged dead letters), the history recorder, metrics. Shutdown, in the order
STYLE.md gives: stop fetching, let the dispatcher drain the buffers within the grace period, wait
for in-flight pushes (then cancel them), write pending retries, the final checkpoint and trim
(shielded), release every group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from emq.core.demand import DemandBoard
from emq.core.endpoints import EndpointBoard
from emq.core.errors import BackendUnavailable, DeliveryError
from emq.core.interfaces import (
    AssignmentSource,
    ConfigStore,
    GroupOwner,
    HistoryStore,
    NotSent,
    OwnedGroups,
    Pusher,
    PushRequest,
    PushResult,
)
from emq.core.jobs import JobStore
from emq.core.model import Namespace, Topic, TopicRef
from emq.core.subscriptions import subscription_secret
from emq.core.supervision import start_supervised
from worker import reenable
from worker.committer import Committer
from worker.dispatch import Dispatcher, Handoff, SendGovernor
from worker.endpoint_report import EndpointCollector, report_loop
from worker.endpoints import follow
from worker.fetch import Fetcher
from worker.groups import (
    LATE_S,
    STARVED_S,
    Buffered,
    GrantLog,
    GroupState,
    SpareLaneLog,
    TopicState,
    grant_window_s,
)
from worker.history import HistoryRecorder
from worker.holds import Holds
from worker.joblog import JobLog
from worker.metrics import WorkerMetrics
from worker.outage import Outage
from worker.outcomes import Outcomes
from worker.ownership import Ownership
from worker.protocol_errors import ProtocolErrorCollector, ProtocolErrors
from worker.regroup import Regroups
from worker.senders import SenderPool
from worker.settings import WorkerSettings
from worker.signing import signature_headers
from worker.tenant_quota import TenantQuota

log = logging.getLogger(__name__)

MIN_HANDOFF = 128  # jobs the dispatcher may leave waiting for a sender, at least

CANCEL_AGAIN_S = 0.5  # a task still running this long after a cancel is cancelled again


class Worker:
    def __init__(
        self,
        worker_id: str,
        namespace: Namespace,
        settings: WorkerSettings,
        *,
        queues: GroupOwner,
        config: ConfigStore,
        assignment: AssignmentSource,
        pusher: Pusher,
        history: HistoryStore | None = None,
        max_group_qps: int = 150,
        jobs: JobStore | None = None,
        endpoints: EndpointBoard | None = None,
        demand: DemandBoard | None = None,
    ) -> None:
        self.id = worker_id
        self.namespace = namespace
        self.settings = settings
        self.queues = queues
        self.config = config
        self.assignment = assignment
        self.pusher = pusher
        # The grant of a late push is looked at when it starts unless its gate is asked right
        # before its write (_gate): a look at both would move most late grants twice.
        self._late_at_push = not pusher.gate_before_write
        # Its writes told at once when late (PushRequest.written): groups get a spare lane.
        self._exact = pusher.exact_writes
        self.max_group_qps = max_group_qps
        self.topics: dict[TopicRef, TopicState] = {}
        self.groups: dict[str, GroupState] = {}
        self.metrics = WorkerMetrics()
        self.outage = Outage()  # every loop that touches Redis pauses through it, none dies
        self.dispatcher = Dispatcher(self._send, settings.tick_s, settings.pace_grid_s)
        self.fetcher = Fetcher(queues, settings, self.groups, self._on_jobs, self.outage)
        # Per-topic histograms and gauges, the buffer bytes and fetches: read at scrape time.
        fetcher = self.fetcher
        self.metrics.watch(self.topics, lambda: fetcher.budget.used, lambda: fetcher.reads)
        self.metrics.registry.register(EndpointCollector(self.topics))
        errors = getattr(pusher, "protocol_errors", None)  # (the two HTTP clients count them)
        if isinstance(errors, ProtocolErrors):
            self.metrics.registry.register(ProtocolErrorCollector(errors, self.topics))
        self.endpoint_board = endpoints  # where endpoint statuses go (worker.endpoint_report)
        self.joblog = JobLog(jobs, worker_id)  # job outcomes and group snapshots (job status)
        self.outcomes = Outcomes(
            queues, self._finish, self._drop, outage=self.outage, joblog=self.joblog
        )
        self.dispatcher.defer = self.outcomes.defer  # (worker.endpoints: overflow, disabled)
        self.dispatcher.claim = self._claim  # (a key's next job straight to a sender)
        self.recorder = HistoryRecorder(
            worker_id, settings.history_interval_s, history, self.metrics, self.outage
        )
        self._sends: Handoff[tuple[GroupState, Buffered]] = Handoff(settings.senders)
        self.governor = SendGovernor(settings.senders, settings.senders_min)
        self.senders = SenderPool(
            self._sends,
            self._push,
            self._push_raised,
            size=settings.senders,
            most=settings.max_in_flight,
            stuck_s=self.governor.stuck_s,
            timeout_s=settings.request_timeout_s,
            period_s=self.governor.period_s,
            keyed_done=self.dispatcher.keyed_done,
        )
        self._govern_at = 0.0
        self.committer = Committer(
            queues, settings, self.groups, self.outage, self._drop, self.joblog.flush
        )
        self._dirty = self.committer.dirty  # the hot path marks finished jobs' groups in it
        self._topics_ready = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._releasing: set[asyncio.Task[int]] = set()  # worker.reenable, one per re-enable
        self._hurried = False  # a second stop signal: no more draining (see hurry)
        self.holds = Holds(worker_id, queues, assignment, self.groups, self._drop)
        # Keys that a quota change moved to a new group wait for their old group's jobs.
        self.regroups = Regroups(
            queues, self.dispatcher.unfence, commit=self.committer.write_checkpoints
        )
        self.tenant_quota = TenantQuota(
            worker_id, namespace, config, self.topics, self._requota, board=demand,
            outage=self.outage,
        )  # fmt: skip
        self.ownership = Ownership(
            worker_id, settings, topics=self.topics, groups=self.groups, assignment=assignment,
            holds=self.holds, fetcher=self.fetcher, committer=self.committer,
            outcomes=self.outcomes, tenant_quota=self.tenant_quota, metrics=self.metrics,
            outage=self.outage, max_group_qps=max_group_qps,
        )  # fmt: skip

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down gracefully."""
        log.info("worker %s starting (namespace %s)", self.id, self.namespace.value)
        self.metrics.send_limit.set(self._sends.limit)
        self._start("topics", self._watch_topics)
        self._start("assignment", partial(self.ownership.follow, self._topics_ready))
        self._start("holds", self.holds.check_loop)
        self._start("fetch", self.fetcher.run)
        if (inbox := self.assignment.inbox()) is not None:  # a fleet addresses hints to owners
            self.fetcher.address_to(inbox)
        self._start("signals", self.fetcher.listen)
        self._start("promote", self.fetcher.promote)
        self._start("sweep", self.fetcher.sweep)
        self._start("dispatch", self._dispatch_loop)
        self._start("senders", self.senders.run)
        self._start("outcomes", self.outcomes.run)
        self._start("checkpoint", self.committer.checkpoint_loop)
        if self.settings.retain_entries >= 0:
            self._start("trim", self.committer.trim_loop)
        self._start("dlq-trim", self.committer.trim_dead_loop)
        self._start("history", partial(self.recorder.run, self.topics))
        self._start("snapshots", partial(self.joblog.run, self.groups))
        self._start("attempt trim", self.joblog.trim)
        if self.endpoint_board is not None:
            self._start(
                "endpoints", partial(report_loop, self.endpoint_board, self.id, self.topics)
            )
        self._start("tenant-quota", self.tenant_quota.run)
        self._start("regroups", self.regroups.run)
        failed = asyncio.ensure_future(self._first_failure())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        try:
            await self.shutdown()
        finally:
            error = failed.result() if failed.done() and not failed.cancelled() else None
            failed.cancel()
        if error is not None:
            raise error

    def _start(self, name: str, run: Callable[[], Awaitable[object]]) -> None:
        """Run ``run()`` as a task for the worker's life, restarted after an outage that
        escapes it (emq.core.supervision); any other error stops the worker."""
        self._tasks[name] = start_supervised(f"worker {name}", run, task_name=f"emq-worker-{name}")

    async def _first_failure(self) -> BaseException | None:
        """Wait until a task dies unexpectedly; a worker with a dead task must not limp on."""
        done, _ = await asyncio.wait(set(self._tasks.values()), return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("worker task %s failed", task.get_name(), exc_info=task.exception())
                return task.exception()
        return None

    async def _cancel(self, *names: str) -> None:
        """Cancel the named tasks and wait for them, cancelling again until each has ended.

        Once is not always enough: on Python 3.11, ``asyncio.wait_for`` (which redis-py uses
        for every write once a socket timeout is set, as redis-py 8 does by default) swallows a
        cancellation that arrives as its write completes, and the task carries on; waiting for
        it then hung the shutdown for good.
        """
        pending = {self._tasks.pop(n) for n in names if n in self._tasks}
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)

    def hurry(self) -> None:
        """Stop draining now (a second SIGTERM/SIGINT): what is still buffered or in flight is
        left to the checkpoint (delivered again by the next owner, never lost); the final
        writes and the release still happen."""
        if not self._hurried:
            self._hurried = True
            log.info("worker %s: asked again to stop, draining no more", self.id)

    def _draining(self, deadline: float) -> bool:
        return not self._hurried and time.monotonic() < deadline

    async def shutdown(self) -> None:
        grace = self.settings.shutdown_grace_s
        deadline = time.monotonic() + grace
        log.info("worker %s stopping: draining buffers for up to %.1f s", self.id, grace)
        await self._cancel("topics", "assignment", "fetch", "signals", "promote", "sweep")
        await self.ownership.stop_waiting()  # (groups in their contested wait: given up)
        while self._buffered() and self._draining(deadline):
            await asyncio.sleep(0.05)
        await self._cancel("dispatch")
        for g in self.groups.values():
            g.drop_buffers()
        while (self._sends.qsize() or self._in_flight()) and self._draining(deadline):
            await asyncio.sleep(0.02)
        await self._cancel("senders")
        await asyncio.shield(self._final_writes())
        await self._cancel(*list(self._tasks))

    async def _final_writes(self) -> None:
        try:
            await self.outcomes.flush()
            await self.checkpoint()
            await self.committer.forget_finished(list(self.groups.values()))
            await self.trim()
            await self.recorder.flush(self.topics)
        except BackendUnavailable as e:
            log.warning(
                "final checkpoint not written (%s): entries after it will be redelivered", e
            )
        await self.holds.release(list(self.groups.values()))
        for g in list(self.groups.values()):
            await self.assignment.release(g.ref, g.epoch)
        log.info("worker %s stopped", self.id)

    def _buffered(self) -> int:
        return sum(g.buffered() for g in self.groups.values() if not g.topic.topic.paused)

    def _in_flight(self) -> int:
        return sum(t.in_flight for t in self.topics.values())

    # ------------------------------------------------------------------ configuration

    async def _watch_topics(self) -> None:
        async for topics in self.config.watch_topics(self.namespace):
            self.apply_topics(topics)
            if not self._topics_ready.is_set():
                await self.tenant_quota.prime()  # (before the first claim)
            self._topics_ready.set()

    def apply_topics(self, topics: Mapping[TopicRef, Topic]) -> None:
        """Take a new topic map: quotas, pauses and priority modes apply at once."""
        for ref, topic in topics.items():
            state = self.topics.get(ref)
            if state is None:
                window_s = grant_window_s(self.pusher.write_margin_s)
                log_class = SpareLaneLog if self._exact else GrantLog
                state = self.topics[ref] = TopicState(topic, window_s, log_class)
                follow(state, self.dispatcher.parking, self.settings.endpoints_per_topic)
                continue
            old, state.topic = state.topic, topic
            if old.endpoints != topic.endpoints:
                follow(state, self.dispatcher.parking, self.settings.endpoints_per_topic)
                self._release_deferred(state, reenable.new_marks(old.endpoints, topic.endpoints))
            if (old.qps, old.groups, old.priority_mode, old.burst, old.weight) != (
                topic.qps,
                topic.groups,
                topic.priority_mode,
                topic.burst,
                topic.weight,
            ):
                self._requota(state)
                log.info("topic %s: quota %d QPS over %d groups", ref, topic.qps, topic.groups)
            if topic.groups > old.groups:
                self.regroups.changed(state, old.groups, topic.groups)
            if old.paused != topic.paused:
                log.info("topic %s %s", ref, "paused" if topic.paused else "resumed")
                now = time.monotonic()
                for g in state.groups.values():
                    self.dispatcher.wake(g, now)

    def _release_deferred(self, state: TopicState, endpoints: list[str]) -> None:
        """Re-enabled endpoints: their jobs deferred to the delayed sets come back now."""
        groups = [g.ref for g in state.groups.values() if not g.dropped]
        if endpoints and groups:
            task = asyncio.create_task(reenable.release(self.queues, groups, endpoints))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    # ------------------------------------------------------------------ ownership (see Ownership)

    @property
    def owned_generation(self) -> int:
        return self.ownership.generation

    async def apply_assignment(self, owned: OwnedGroups) -> None:
        await self.ownership.apply(owned)

    def _requota(self, topic: TopicState) -> None:
        self.ownership.requota(topic)  # (the tenant quota calls it: built before the ownership)

    def _drop(self, group: GroupState, reason: str) -> None:
        self.ownership.drop(group, reason)  # (fenced writes: built before the ownership)

    # ------------------------------------------------------------------ the hot path

    def _on_jobs(self, group: GroupState) -> None:
        self.dispatcher.wake(group, time.monotonic())

    def _send(self, group: GroupState, item: Buffered) -> None:
        self.fetcher.budget.used -= len(item.payload)  # out of the buffers (see ByteBudget)
        group.topic.in_flight += 1
        group.in_flight += 1
        self._sends.put_nowait((group, item))
        self.fetcher.want(group)

    def _claim(self, group: GroupState, item: Buffered) -> None:
        """_send's bookkeeping for a key's next job that the sender whose push just ended takes
        itself (Dispatcher.keyed_done), without the Handoff. (Not shared with _send: one more
        call per job on the unkeyed hot path.)"""
        self.fetcher.budget.used -= len(item.payload)
        group.topic.in_flight += 1
        group.in_flight += 1
        self.fetcher.want(group)

    async def _dispatch_loop(self) -> None:
        # Jobs handed to the senders and not yet taken: as many as may be pushed at once, and at
        # least a tick's worth at full speed (else a small pool idles between ticks). No more:
        # a job waiting here has its quota taken already, and one that waits into the next
        # wall-clock second shows there as one over the quota.
        while True:
            may_dispatch = self._heed_assignment()
            self._sends.catch_up()  # jobs handed out last tick and still waiting for a sender
            budget = max(MIN_HANDOFF, self._sends.limit) - self._sends.qsize()
            mono = time.monotonic()
            if budget > 0 and may_dispatch and self.dispatcher.dispatch(budget, time.time(), mono):
                self._sends.catch_up()  # a sender for each job now: one loop turn, not a chain
            if mono >= self._govern_at:
                self._govern(mono)
            await self.dispatcher.pause(self._sends.unserved() > 0)

    def _govern(self, mono: float) -> None:
        """Let the governor move the number of pushes at once (see SendGovernor)."""
        gov = self.governor
        self._govern_at = mono + gov.period_s
        stuck = self.senders.scan(mono)
        self.metrics.slow_pushes.set(self.senders.detached)
        self.metrics.lagged(self.dispatcher.lag_s)
        limit = gov.update(mono, time.thread_time(), self._sends.qsize(), stuck)
        if limit is not None and limit != self._sends.limit:
            self._sends.set_limit(limit)
            self.metrics.send_limit.set(limit)

    def _heed_assignment(self) -> bool:
        """Pause fetching while the assignment source is cut off from its coordinator; True
        while it vouches for our ownership (a fleet's lease), i.e. while we may dispatch."""
        fetch = self.assignment.may_fetch()
        if fetch == self.fetcher.paused:
            self.fetcher.pause(not fetch)
        return self.assignment.may_dispatch()

    async def _cleared(self, group: GroupState) -> bool:
        """Hold a job taken just before the lease ran out until it is renewed; False (do not
        send) once the group is let go meanwhile: its next owner delivers it from the checkpoint."""
        while not self.assignment.may_dispatch():
            if group.stopped or group.dropped:
                return False
            await asyncio.sleep(self.settings.tick_s)
        return not group.dropped

    async def _push(self, group: GroupState, item: Buffered) -> None:
        if not self.assignment.may_dispatch() and not await self._cleared(group):
            return
        now = time.time()
        if item.lent_by is not None and item.lent_by.stopped and not self._unlend(group, item):
            return  # (its lender let go meanwhile: its budget is its next owner's now)
        late = self._late_at_push and now - item.reserved_at > LATE_S
        if late and not self._reserve_again(group, item, now):
            return
        job = item.delivery
        state = group.topic
        secret = state.topic.secret
        if job.signer is not None and secret:  # an event's delivery: its subscription's secret
            secret = subscription_secret(secret, job.signer)
        if secret:
            body = job.body if job.body is not None else ""
            headers = job.headers | signature_headers(secret, job.id, now, body)
        else:
            headers = dict(job.headers)
        request = PushRequest(
            job.url,
            job.method,
            headers,
            job.body.encode() if job.body is not None else None,
            state.endpoint,
            partial(self._gate, group, item),
            partial(self._written_late, group, item) if self._exact else None,
            state.topic.response_excerpt_bytes,
        )
        try:
            result = await self.pusher.push(request)
        except NotSent:
            return  # back in its buffer, or no longer ours (see _gate)
        except DeliveryError as e:
            if e.retryable:
                raise
            if not group.dropped:  # refused or unsendable: no attempt could succeed
                self.outcomes.dead(group, item, e.message, e.status, job.attempt + 1)
            return
        if group.dropped:
            return  # no longer ours: the new owner delivers it again from its checkpoint
        if not self._exact and result.sent_at - item.reserved_at > state.window_s - 1.0:
            self._written_late(group, item, result.sent_at)  # (sent_at 0.0: not known)
        if state.rates is not None:
            state.rates.pushed(item, result, time.monotonic())  # (its endpoint's rate, streak)
        if 200 <= result.status < 300:
            self.outcomes.delivered(group, item, result)
        else:
            self.outcomes.failed(group, item, result)

    def _gate(self, group: GroupState, item: Buffered) -> bool:
        """Asked by the pusher when a push is about to be written after a wait of its own (a
        new connection: resolving, connecting, a TLS handshake; tens of milliseconds to a far
        host): the late check of :meth:`_push` again, and the lease's, since the wait may have
        outlasted either. False: not sent (back in its buffer, or no longer ours)."""
        if group.dropped:
            return False  # its next owner delivers it from the checkpoint
        if not self.assignment.may_dispatch():
            if group.put_back(item):  # (the dispatcher serves it once the lease is renewed)
                self.dispatcher.wake(group, time.monotonic())
            return False
        now = time.time()
        return now - item.reserved_at <= LATE_S or self._reserve_again(group, item, now)

    def _unlend(self, group: GroupState, item: Buffered) -> bool:
        """A job granted on a sibling's budget whose sibling was let go before it was sent:
        a grant of its own group's now, or back to its buffer."""
        now = time.time()
        item.lent_by = None
        if group.counter.reserve(1, now):
            item.reserved_at = group.counter.newest
            return True
        if group.put_back(item):
            self.dispatcher.wake(group, time.monotonic())
        return False

    def _reserve_again(self, group: GroupState, item: Buffered, now: float) -> bool:
        """A job sent more than LATE_S after its grant's stamp (a slow loop, senders all busy)
        has its grant moved to LATE_S before now (QpsCounter.restamp, back_s: free while the
        grant is less than a window old), or, a second late with no budget left, goes back to
        its buffer in offset order: a reservation never lands outside the window it was counted
        in, whatever the loop's speed (a receiver counting any 1000 ms would see it)."""
        lender = item.lent_by  # (a sibling's grant: worker.lending)
        counter = lender.counter if lender is not None else group.counter
        late_s = now - item.reserved_at
        stamp = counter.restamp(item.reserved_at, now)
        if stamp is not None:
            item.reserved_at = stamp
            if late_s > STARVED_S:  # (moved routinely: counted only when the worker starves)
                group.topic.stats.moved_late_send += 1
            return True
        if group.put_back(item):
            self.dispatcher.wake(group, time.monotonic())
        return False

    def _written_late(self, group: GroupState, item: Buffered, sent_at: float) -> None:
        """A request written later after its grant's stamp than the window allows for (LATE_S
        and the pusher's write margin: the CPU was taken away between its gate and its write)
        has its grant moved to its write, as if it had been granted then: the grant a quota
        later waits a window after it (a second later; the answer comes sooner, or the window
        counts it as it was). Always possible: a stamp moves later (QpsCounter.restamp).

        A client with exact writes tells it right after the write (``PushRequest.written``:
        a write more than its margin after the gate), before anything else runs, so the grant
        is moved before the one a quota later can be made: each group's spare lane relies on
        it (worker.groups ``SpareLaneLog``). Others tell it with the answer (``sent_at``)."""
        window_s = group.topic.window_s
        if sent_at - item.reserved_at <= window_s - 1.0:
            return  # within its window after all (the gate moved its grant, or the margin)
        lender = item.lent_by
        counter = lender.counter if lender is not None else group.counter
        if time.time() - item.reserved_at < window_s:  # (still in its log)
            stamp = counter.restamp(item.reserved_at, sent_at)
            if stamp is not None:
                item.reserved_at = stamp
            group.topic.stats.moved_late_write += 1

    def _push_raised(self, group: GroupState, item: Buffered, error: Exception) -> None:
        """Whatever else a push raised ends that job: text that cannot be encoded (a stored job
        that bypassed the API) or an unreadable entry goes to the DLQ; anything else is one
        failed attempt (retried with backoff, then dead-lettered) carrying the error text."""
        if group.dropped:
            return  # no longer ours: the new owner delivers it again from its checkpoint
        reason = f"{type(error).__name__}: {error}"
        try:
            attempts = item.envelope.attempt + 1
        except Exception:
            log.exception("unreadable job at %s offset %s: dead-lettered", item.queue, item.offset)
            self.outcomes.dead(group, item, f"unreadable job: {reason}", None, 1)
            return
        if isinstance(error, UnicodeError):
            log.warning("job in %s cannot be encoded (%s): dead-lettered", group.ref, reason)
            self.outcomes.dead(group, item, f"undeliverable: {reason}", None, attempts)
            return
        log.exception("push of a job in %s raised; counted as a failed attempt", group.ref)
        try:
            self.outcomes.failed(group, item, PushResult(0, 0.0, error=reason))
        except Exception:  # its retry cannot even be encoded: the DLQ keeps it as stored
            log.exception("retry of a job in %s cannot be written: dead-lettered", group.ref)
            self.outcomes.dead(group, item, f"undeliverable: {reason}", None, attempts)

    def _finish(self, group: GroupState, item: Buffered) -> None:
        if not group.dropped:
            item.progress.finished(item.offset)
            self._dirty.add(group)

    # ------------------------------------------------------------------ progress in the store

    async def checkpoint(self) -> None:
        """Write the committable offset of every queue that moved (see :class:`Committer`)."""
        await self.committer.checkpoint()  # (the job records first: see Committer)

    async def trim(self, group: GroupState | None = None) -> None:
        """Remove delivered entries (see :meth:`Committer.trim`)."""
        await self.committer.trim(group)

    async def trim_dead(self) -> int:
        """Age out the DLQs of owned groups (see :meth:`Committer.trim_dead`)."""
        return await self.committer.trim_dead()
