"""The one kazoo seam: making a client, starting and stopping it, awaiting its results.

Both ZooKeeper users go through it: the config store (:mod:`adapters.zk_config`) and the fleet
(:mod:`allocator`), which may not import each other; the layering test lets ``allocator``
import this module and nothing else of ``adapters``.

* **Clients.** :func:`client_factory` is how every EMQ process makes a kazoo client: plain, or,
  with digest credentials, one that authenticates with each and creates every node with an ACL
  granting all to those identities only (kazoo applies ``default_acl`` to every create,
  transactions and ``ensure_path`` included). :func:`reconnecting` is the retry policy of a
  session that must survive a server restart.
* **Lifecycle.** :func:`start` connects without blocking the loop (kazoo's start blocks) and
  cannot be abandoned half-way; :func:`stop` ends the session. :class:`SessionStates` hands
  kazoo's connection states to the loop.
* **Results.** kazoo calls back on its own threads; nothing here blocks one. A result is
  awaited by linking a callback that only does ``loop.call_soon_threadsafe`` (the bridge is
  :mod:`emq.core.threads`); a watch likewise only sets an :class:`asyncio.Event` through the
  loop (:class:`Poke`).
* **Errors.** Those that mean "ZooKeeper cannot answer now" (connection loss, expired session,
  a request that timed out, refused access) become :class:`~emq.core.errors.BackendUnavailable`;
  the ones callers give a meaning to (no node, node exists, bad version, not empty) are raised
  as kazoo's own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import (  # type: ignore[import-untyped]
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.security import make_digest_acl  # type: ignore[import-untyped]

from emq.core import threads
from emq.core.errors import BackendUnavailable
from emq.core.threads import call_soon

__all__ = [
    "MEANINGFUL",
    "NO_AUTH_HINT",
    "RECONNECT_MAX_S",
    "ClientFactory",
    "Poke",
    "SessionStates",
    "call_soon",
    "check",
    "client_factory",
    "digest_acl",
    "failed_op",
    "one",
    "plain_client",
    "reconnecting",
    "settle",
    "start",
    "stop",
    "unavailable",
]

MEANINGFUL = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)
NO_AUTH_HINT = (
    "the node's ACL wants other credentials (set EMQ_ZK_AUTH to the ones the EMQ tree was "
    "secured with)"
)
ClientFactory = Callable[..., KazooClient]


# --------------------------------------------------------------------------- clients


def digest_acl(credentials: Sequence[str]) -> list[object]:
    """All permissions to each ``user:password`` digest identity, nothing to anyone else."""
    acl = []
    for credential in credentials:
        user, _, password = credential.partition(":")
        acl.append(make_digest_acl(user, password, all=True))
    return acl


RECONNECT_MAX_S = 0.5  # how long a client may wait between attempts to reach ZooKeeper


def client_factory(credentials: Sequence[str] = ()) -> ClientFactory:
    """``KazooClient`` that reconnects promptly (:func:`reconnecting`), with credentials one
    that also authenticates with them and secures every node it creates to them (the first to
    write, the others while rotating). A caller's own ``connection_retry`` wins."""
    options: dict[str, Any] = {
        "connection_retry": reconnecting(RECONNECT_MAX_S),
        "command_retry": reconnecting(RECONNECT_MAX_S),
    }
    if credentials:
        options["auth_data"] = [("digest", c) for c in credentials]
        options["default_acl"] = digest_acl(credentials)
    return functools.partial(KazooClient, **options)


def reconnecting(max_delay_s: float) -> dict[str, float]:
    """kazoo retry options: retry for ever, at least every ``max_delay_s``.

    kazoo's own connection policy doubles its pause after every failed attempt up to an hour:
    while an ensemble has no quorum every attempt fails, so a 30 s outage left clients asleep
    for 10-30 s after the quorum was back (the API answering 503, sessions expiring meanwhile).
    A session survives an outage only if its client is back within its timeout of the
    server's return, so the pause is capped at ``max_delay_s``.
    """
    return {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": max_delay_s}


plain_client = client_factory()  # without credentials: the default of every ZooKeeper user


def hosts_of(client: KazooClient) -> str:
    return ",".join(f"{host}:{port}" for host, port in client.hosts)


# --------------------------------------------------------------------------- lifecycle


async def start(client: KazooClient, timeout_s: float) -> None:
    """Connect the session in a thread; ``BackendUnavailable`` if it cannot within ``timeout_s``.

    A cancelled caller still waits for the thread: a start left running would race the
    caller's stop and close (kazoo's start stops and closes the client on a time-out). A failed
    start stops the client, or kazoo would keep connecting in the background.
    """
    task = asyncio.ensure_future(asyncio.to_thread(_start_blocking, client, timeout_s))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what our caller gets
        raise
    except Exception as e:
        raise BackendUnavailable(
            f"cannot connect to ZooKeeper at {hosts_of(client)}: {type(e).__name__} {e}"
        ) from e


def _start_blocking(client: KazooClient, timeout_s: float) -> None:
    try:
        client.start(timeout_s)
    except Exception:
        client.stop()
        raise


async def stop(client: KazooClient) -> None:
    """End the session and free the client (in a thread: both calls block)."""
    await asyncio.to_thread(_stop_blocking, client)


def _stop_blocking(client: KazooClient) -> None:
    client.stop()
    client.close()


class SessionStates:
    """kazoo's connection states (``CONNECTED``, ``SUSPENDED``, ``LOST``), handed to the loop.

    The listener runs on a kazoo thread and only queues the state through the loop.
    """

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._loop = asyncio.get_running_loop()
        self._states: asyncio.Queue[str] = asyncio.Queue()
        client.add_listener(self._listener)

    def _listener(self, state: str) -> None:
        call_soon(self._loop, self._states.put_nowait, state)

    async def next(self) -> str:
        """The next state change, in the order kazoo saw them."""
        return await self._states.get()

    def close(self) -> None:
        self._client.remove_listener(self._listener)


# --------------------------------------------------------------------------- results


def unavailable(error: BaseException, what: str) -> BackendUnavailable:
    """The seam's translation of every kazoo error that is not a caller's business."""
    if isinstance(error, NoAuthError):  # a process without (or with other) EMQ_ZK_AUTH
        return BackendUnavailable(f"ZooKeeper refused access while {what}: {NO_AUTH_HINT}")
    return BackendUnavailable(f"ZooKeeper failed while {what}: {type(error).__name__} {error}")


async def settle(pending: Sequence[Any], what: str, timeout_s: float) -> list[object]:
    """Await kazoo async results; each outcome is its value or its exception (not raised)."""
    try:
        return await threads.settle(pending, timeout_s)
    except TimeoutError as e:
        raise BackendUnavailable(
            f"ZooKeeper did not answer within {timeout_s:g} s while {what}"
        ) from e


def check(outcome: object, what: str) -> Any:
    """The value of one outcome; meaningful kazoo errors re-raised, the others translated."""
    if isinstance(outcome, MEANINGFUL):
        raise outcome
    if isinstance(outcome, BaseException):
        raise unavailable(outcome, what) from outcome
    return outcome


async def one(pending: Any, what: str, timeout_s: float) -> Any:
    """Await one kazoo async call and return its value (see :func:`check`)."""
    [outcome] = await settle([pending], what, timeout_s)
    return check(outcome, what)


def failed_op(results: Sequence[object]) -> tuple[int, BaseException] | None:
    """The first failed operation of a committed transaction, or None if it succeeded."""
    for index, result in enumerate(results):
        # ZooKeeper reports the operations around the failed one as rolled back.
        if isinstance(result, BaseException) and not isinstance(result, RolledBackError):
            return index, result
    return None


class Poke:
    """An asyncio.Event that kazoo watches may set from their threads."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        self.closed = False

    def __call__(self, *_args: object) -> bool | None:
        """A kazoo watch callback: never blocks; False (for recipes) once closed."""
        if self.closed or not call_soon(self._loop, self.event.set):
            return False
        return None

    def set(self) -> None:
        self.event.set()

    async def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until poked (True) or ``timeout_s`` passed (False); clears the event."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True
