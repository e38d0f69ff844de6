"""Commands packed by hiredis are the bytes redis-py's own packer makes, bad arguments fail as
they did, and a client packed so talks to a real Redis as before (adapters.redis_packing)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from adapters.redis_packing import HiredisPacking, packed_by_hiredis, packing_class

COMMANDS: list[tuple[Any, ...]] = [
    ("HSET", "k", "job_1", b'{"s":"delivered"}', "job_é", b"\x00\xff"),
    ("XADD", b"stream", "*", "d", b"x" * 10_000),  # past redis-py's buffer cutoff
    ("EVALSHA", "abc", 2, "k1", "k2", 1.5, 0.1, -3, 10**20, 1e20),
    ("SCRIPT LOAD", "return 1"),  # a command name with words is split
    (b"CLIENT SETNAME", b"me"),
    ("GET", memoryview(b"view")),
]


def _python_packed(args: tuple[Any, ...]) -> bytes:
    return b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: str(a[0]))
def test_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    fast = packing_class(Connection)()
    assert b"".join(fast.pack_command(*args)) == _python_packed(args)


def test_a_pipeline_is_the_same_bytes() -> None:
    fast = packing_class(Connection)()
    expected = b"".join(_python_packed(c) for c in COMMANDS)
    assert b"".join(fast.pack_commands(COMMANDS)) == expected


@pytest.mark.parametrize("bad", [None, True, object(), [1]], ids=["none", "bool", "object", "list"])
def test_a_bad_argument_fails_as_redis_py_makes_it(bad: Any) -> None:
    fast = packing_class(Connection)()
    with pytest.raises(DataError):
        fast.pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        fast.pack_commands([("GET", "k"), ("SET", "k", bad)])


def test_one_class_per_connection_kind() -> None:
    assert packing_class(Connection) is packing_class(Connection)
    unix = packing_class(UnixDomainSocketConnection)
    assert issubclass(unix, UnixDomainSocketConnection) and issubclass(unix, HiredisPacking)
    assert packing_class(unix) is unix


def test_a_client_with_another_encoding_keeps_its_packer() -> None:
    client = aioredis.Redis(encoding="latin-1")
    assert packed_by_hiredis(client).connection_pool.connection_class is Connection


async def test_a_packed_client_works_against_redis(redis_url: str, test_id: str) -> None:
    client = packed_by_hiredis(aioredis.Redis.from_url(redis_url))
    assert issubclass(client.connection_pool.connection_class, HiredisPacking)
    try:
        key = f"{test_id}:h"
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("HSET", key, "a", b"1", "é", 2.5)
        pipe.hgetall(key)
        pipe.delete(key)
        added, fields, deleted = await pipe.execute()
        assert (added, deleted) == (2, 1)
        assert fields == {b"a": b"1", "é".encode(): b"2.5"}
        assert await client.echo(b"x" * 100_000) == b"x" * 100_000
        with pytest.raises(DataError):
            await client.set(f"{test_id}:k", None)  # type: ignore[arg-type]
        assert await client.ping()  # the connection survived the refused command
    finally:
        await client.aclose()
