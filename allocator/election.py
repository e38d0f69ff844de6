"""Leader election on the event loop: the protocol of kazoo's ``Election``/``Lock`` recipes.

Use case: exactly one worker of a namespace computes and writes the assignment. kazoo's recipe
blocks a thread in ``run()``; this one awaits kazoo's async calls instead, so the leader's work
runs on the loop and a cancel ends the campaign at once.

Each contender creates an ephemeral sequential node ``<leader>/<uuid>__lock__<seq>`` whose data is
its worker id (the names and data kazoo's recipe uses, so ``Election(...).contenders()`` reads
them). The lowest sequence leads; every other contender watches only the node just before its
own, so a departure wakes one contender, not the herd.

States and transitions::

    IDLE --campaign()--> CONTENDING --lowest node--> LEADING
                             |  ^ predecessor gone        | own node gone (session lost,
                             |  +-- re-check -------------+   deleted) -> the holder's
                             v                               guarded writes fail: DEPOSED
    any --resign() / cancel--> IDLE (own node deleted if the session still holds it)

The node a leader holds is what its writes are guarded by: every assignment write is a
transaction that first checks this node still exists (:attr:`node`), so a leader that lost its
session (and maybe does not know it yet) cannot overwrite its successor's work.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]

from adapters import zk
from emq.core.errors import BackendUnavailable

log = logging.getLogger(__name__)

LOCK_MARK = "__lock__"


def sequence_of(name: str) -> int:
    """The sequence number at the end of a contender node's name (-1 if it has none)."""
    _, mark, seq = name.rpartition(LOCK_MARK)
    return int(seq) if mark and seq.isdigit() else -1


def ordered(children: list[str]) -> list[str]:
    """Contender nodes by sequence, lowest (the leader) first."""
    return sorted((c for c in children if sequence_of(c) >= 0), key=sequence_of)


class Election:
    """One contender for leadership under ``path`` (see the module docstring)."""

    def __init__(
        self, client: KazooClient, path: str, identifier: str, *, request_timeout_s: float
    ) -> None:
        self._client = client
        self._path = path
        self._id = identifier
        self._timeout_s = request_timeout_s
        self._prefix = uuid.uuid4().hex + LOCK_MARK
        self.node: str | None = None  # full path of our contender node, once created

    async def campaign(self) -> str:
        """Contend until this contender leads; returns the path of the node that proves it."""
        await self._one(self._client.ensure_path_async(self._path), "creating the election node")
        if self.node is None:
            self.node = await self._create()
        poke = zk.Poke()
        try:
            while True:
                children = ordered(await self._children())
                mine = self.node.rsplit("/", 1)[1]
                if mine not in children:
                    self.node = await self._create()  # our node went with an old session
                    continue
                index = children.index(mine)
                if index == 0:
                    log.info("%s leads (election node %s)", self._id, self.node)
                    return self.node
                before = f"{self._path}/{children[index - 1]}"
                if await self._one(self._client.exists_async(before, watch=poke), "watching"):
                    await poke.wait(self._timeout_s * 4)  # a re-check now and then costs little
        finally:
            poke.closed = True

    async def resign(self) -> None:
        """Give up leadership or the candidacy: delete our node if our session still has it."""
        node, self.node = self.node, None
        if node is None:
            return
        try:
            await self._one(self._client.delete_async(node), "resigning")
        except NoNodeError:
            pass
        except BackendUnavailable as e:  # the session's end will remove it
            log.debug("could not delete election node %s: %s", node, e)

    async def leader(self) -> str | None:
        """The current leader's identifier (its node's data), or None if nobody contends."""
        for name in ordered(await self._children()):
            try:
                data, _ = await self._one(self._client.get_async(f"{self._path}/{name}"), "reading")
            except NoNodeError:
                continue
            return bytes(data).decode(errors="replace")
        return None

    async def _create(self) -> str:
        path = f"{self._path}/{self._prefix}"
        pending = self._client.create_async(path, self._id.encode(), ephemeral=True, sequence=True)
        try:
            return str(await self._one(pending, "creating the contender node"))
        except BackendUnavailable:
            # The create may have landed before the connection broke (kazoo's Lock does the
            # same search): a node left behind would win the election for a dead candidacy.
            for name in await self._children():
                if name.startswith(self._prefix):
                    return f"{self._path}/{name}"
            raise

    async def _children(self) -> list[str]:
        children = await self._one(self._client.get_children_async(self._path), "listing")
        return list(children)

    async def _one(self, pending: Any, what: str) -> Any:
        return await zk.one(pending, f"{what} ({self._path})", self._timeout_s)
