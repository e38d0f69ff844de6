"""Redis commands packed by hiredis: the asyncio client's own packer is pure Python.

redis-py's synchronous client packs commands with hiredis when it is installed; its asyncio
client (8.1) always packs in Python, one ``Encoder.encode`` and two joins per argument. A worker
sends thousands of arguments a second (job records, checkpoints, fetches), and that packing
was a sixth of its own CPU per job (``emq bench dispatch --workload W2 --noop``).

:func:`packed_by_hiredis` gives a client's connections hiredis's packer instead. The bytes on
the wire are the same: hiredis encodes ``str`` as UTF-8 and ``int`` and ``float`` as their
``repr``, as the Python packer does for a client without ``encoding`` options. An argument
hiredis refuses (``None``, a ``bool``, any other type) falls back to the Python packer, which
raises redis-py's own ``DataError`` for it. A client with another encoding keeps the Python
packer, and so does a Cluster client (its nodes make their own connections).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

_C = TypeVar("_C")
_SPACE = b" "
_classes: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # A command name with words ("SCRIPT LOAD") goes as separate arguments, as redis-py's does.
    first = args[0]
    if isinstance(first, str):
        if " " in first:
            return tuple(first.encode().split()) + args[1:]
    elif isinstance(first, bytes) and _SPACE in first:
        return tuple(first.split()) + args[1:]
    return args


class HiredisPacking:
    """Mixed into a redis-py asyncio connection class ahead of it (see the module)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        try:
            return [hiredis.pack_command(_args(args))]
        except TypeError:
            return super().pack_command(*args)  # type: ignore[misc,no-any-return]

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> list[bytes]:
        pack = hiredis.pack_command
        out = []
        for command in commands:
            args = tuple(command)
            try:
                out.append(pack(_args(args)))
            except TypeError:
                out.extend(super().pack_command(*args))  # type: ignore[misc]
        return [b"".join(out)]


def packing_class(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` with :class:`HiredisPacking` ahead of it (one class per base)."""
    made = _classes.get(base)
    if made is None:
        if issubclass(base, HiredisPacking):
            return base
        made = type(f"Hiredis{base.__name__}", (HiredisPacking, base), {})
        _classes[base] = made
    return made


def packed_by_hiredis(client: _C) -> _C:
    """``client`` (not yet connected) with hiredis packing its commands; a Cluster client, or
    one with a non-default encoding, is returned as it is."""
    if not isinstance(client, aioredis.Redis):
        return client
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("encoding", "utf-8").lower() not in ("utf-8", "utf8"):
        return client
    if kwargs.get("encoding_errors", "strict") != "strict":
        return client
    pool.connection_class = packing_class(pool.connection_class)
    return client
