"""The Cluster client's error handling (adapters.redis_cluster) and the seam's translation of
what redis-py leaks in a failover (adapters.redis_conn): unit tests, no server."""

from __future__ import annotations

import pytest
from redis import exceptions as rex

from adapters.redis_cluster import ShardedCluster, cluster_from_url, cluster_options
from adapters.redis_conn import client_options, translated
from emq.core.errors import BackendUnavailable

CLOSED = "unable to perform operation on <TCPTransport closed=True>; the handler is closed"


def _raiser(filename: str, error: str) -> object:
    """A function that raises ``error`` from a frame of ``filename`` (a driver's module)."""
    namespace: dict[str, object] = {"rex": rex}
    exec(compile(f"def boom():\n    raise {error}\n", filename, "exec"), namespace)
    return namespace["boom"]


@pytest.mark.parametrize(
    "error",
    [
        f"RuntimeError({CLOSED!r})",
        "AttributeError(\"'NoneType' object has no attribute 'writelines'\")",
        "rex.ClusterDownError('CLUSTERDOWN The cluster is down')",
        "rex.ConnectionError('Connection closed by server.')",
    ],
)
def test_what_a_failover_leaks_is_unavailable_at_the_seam(error: str) -> None:
    boom = _raiser("/venv/lib/python3.11/site-packages/redis/asyncio/connection.py", error)
    with pytest.raises(BackendUnavailable, match="during read"), translated("read"):
        boom()  # type: ignore[operator]


def test_the_same_runtime_error_from_our_code_stays_a_bug() -> None:
    with pytest.raises(RuntimeError), translated("read"):
        raise RuntimeError(CLOSED)
    with pytest.raises(RuntimeError), translated("read"):
        _raiser("/src/worker/fetch.py", f"RuntimeError({CLOSED!r})")()  # type: ignore[operator]


class _Nodes:
    def __init__(self) -> None:
        self.closed: list[str] = []

    async def aclose(self, attr: str = "nodes_cache") -> None:
        self.closed.append(attr)


def _client() -> tuple[ShardedCluster, list[str]]:
    """A client that never connects: its slot re-reads are counted instead."""
    client = cluster_from_url("redis://127.0.0.1:7000/0", **cluster_options())
    relearned: list[str] = []

    async def relearn() -> None:
        relearned.append("slots")

    client.relearn_slots = relearn  # type: ignore[method-assign]
    return client, relearned


async def test_redis_py_closing_the_client_after_one_node_failed_closes_nothing() -> None:
    """redis-py calls its own aclose() after a ConnectionError in a pipeline, a CLUSTERDOWN or
    repeated MOVED: on ShardedCluster that only re-reads the slots; the other nodes'
    connections, in use by other tasks, stay open. The owner's aclose() still closes all."""
    client, relearned = _client()
    nodes = _Nodes()
    client.nodes_manager = nodes  # type: ignore[assignment]
    client._initialize = False
    internal: dict[str, object] = {"__name__": "redis.asyncio.cluster"}
    exec("async def after_error(client):\n    await client.aclose()\n", internal)
    await internal["after_error"](client)  # type: ignore[operator]
    assert relearned == ["slots"] and nodes.closed == []
    await client.aclose()
    assert nodes.closed == ["nodes_cache", "startup_nodes"]


def test_a_cluster_client_leaves_retries_to_its_callers() -> None:
    options = client_options(cluster=True)
    assert options["retry"].get_retries() == 0
    assert options["require_full_coverage"] is False
    client = cluster_from_url("redis://127.0.0.1:7000/0", **options)
    assert isinstance(client, ShardedCluster)
    assert client.retry.get_retries() == 0
    assert client.nodes_manager.require_full_coverage is False


async def test_an_xread_is_routed_without_asking_a_node() -> None:
    """redis-py asks a node (COMMAND GETKEYS) where an XREAD goes; the node it asks may be the
    dead master: ours reads the keys from the command."""
    client, _ = _client()
    keys = await client.commands_parser.get_keys(
        "XREAD", "COUNT", 10, "BLOCK", 1000, "STREAMS", b"p:w:{w1}:ready", "0-0"
    )
    assert keys == (b"p:w:{w1}:ready",)
    assert await client.commands_parser.get_keys("XREAD", "STREAMS", "a", "b", "1-0", "2-0") == (
        "a",
        "b",
    )


@pytest.mark.parametrize("fails", ["raised", "replied"])
async def test_a_pipeline_that_met_a_dead_node_has_the_slots_read_again(fails: str) -> None:
    """Without retries, redis-py's pipeline would keep routing a failed master's slots to it
    after its replica took over: ours re-reads the slots."""
    client, relearned = _client()
    pipe = client.pipeline(transaction=False)
    dead = rex.ConnectionError("Error 111 connecting to 127.0.0.1:7001. Connection refused.")

    async def execute(raise_on_error: bool = True, allow_redirections: bool = True) -> list[object]:
        if fails == "raised":
            raise dead
        return [b"OK", dead]

    pipe._execution_strategy.execute = execute  # type: ignore[method-assign]
    if fails == "raised":
        with pytest.raises(rex.ConnectionError):
            await pipe.execute(raise_on_error=False)
    else:
        assert (await pipe.execute(raise_on_error=False))[1] is dead
    assert relearned == ["slots"]
