"""A fault trial's rig on a Redis Cluster with a replica per master (``cluster_failover``).

:class:`ClusterRig` is :class:`~emq.bench.rig.Rig` with its Redis replaced by six nodes of
``deploy/redis-cluster.sh`` (three masters, one replica each, ``cluster-node-timeout 5000``)
and every process it starts told ``EMQ_REDIS_CLUSTER=true``. :class:`ClusterNodes` reads the
topology (``CLUSTER NODES`` through ``redis-cli``, as an operator would) so that a trial can
kill a shard's master and time its replica's promotion.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from emq.bench.rig import Rig
from emq.core.errors import BackendUnavailable
from emq.stack import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "redis-cluster.sh"
NODES = 6  # three masters and their replicas


@dataclass(frozen=True)
class Node:
    """One line of ``CLUSTER NODES``: a node's port, role and (for a master) its slot ranges."""

    node_id: str
    port: int
    master: bool
    failed: bool
    master_id: str
    slots: tuple[tuple[int, int], ...]

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


def parse_nodes(text: str) -> list[Node]:
    """``CLUSTER NODES`` output as :class:`Node` records (slot migration markers skipped)."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 8:
            continue
        port = int(words[1].split("@", 1)[0].rsplit(":", 1)[1])
        flags = set(words[2].split(","))
        slots = []
        for word in words[8:]:
            if word.startswith("["):
                continue
            low, _, high = word.partition("-")
            slots.append((int(low), int(high or low)))
        out.append(
            Node(
                words[0], port, "master" in flags, bool(flags & {"fail", "fail?"}),
                words[3], tuple(slots),
            )
        )  # fmt: skip
    return out


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_base(nodes: int = NODES) -> int:
    """A base port whose ``nodes`` node ports and their bus ports (+10000) are all free."""
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20_000, 53_000)
        if all(_free(base + i) and _free(base + i + 10_000) for i in range(nodes)):
            return base
    raise BackendUnavailable("no free port range for a Redis Cluster with replicas")


class ClusterNodes:
    """The six nodes of a trial's cluster, with the ``start``/``stop`` a rig's Redis has."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.base = free_base()
        self.killed: set[int] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.base}"

    def _script(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["bash", str(SCRIPT), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)

    def start(self, attempts: int = 3) -> None:
        """Start the six nodes; a port taken meanwhile by someone else (the free range was
        picked a moment earlier) means another range, up to ``attempts`` times."""
        for attempt in range(attempts):
            self.data_dir.mkdir(parents=True, exist_ok=True)
            done = self._script("start", str(self.data_dir), str(self.base), "1")
            if done.returncode == 0:
                return
            reason = done.stderr.strip() or done.stdout
            self.stop()
            if "Address already in use" not in reason or attempt == attempts - 1:
                raise BackendUnavailable(f"redis cluster: {reason}")
            self.base = free_base()

    def stop(self) -> None:
        self._script("stop", str(self.data_dir), str(self.base))

    def pid(self, port: int) -> int:
        return int((self.data_dir / f"node-{port}" / "redis.pid").read_text())

    def nodes(self) -> list[Node]:
        """The topology as a live node sees it (the first that answers)."""
        for port in range(self.base, self.base + NODES):
            if port in self.killed:
                continue
            argv = ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "cluster", "nodes"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            if done.returncode == 0 and "master" in done.stdout:
                return parse_nodes(done.stdout)
        raise BackendUnavailable("no node of the cluster answers CLUSTER NODES")

    def masters(self) -> list[Node]:
        return sorted((n for n in self.nodes() if n.master and n.slots), key=lambda n: n.slots)

    def kill(self, node: Node) -> None:
        """``kill -9`` a node (no shutdown: its clients see their connections reset)."""
        os.kill(self.pid(node.port), signal.SIGKILL)
        self.killed.add(node.port)

    def promoted_within(self, old: Node, timeout_s: float) -> float | None:
        """Seconds until a live master serves ``old``'s slots again (None: not within
        ``timeout_s``); polled every 0.1 s from the moment of the call."""
        started = time.monotonic()
        first = old.slots[0][0]
        while time.monotonic() - started < timeout_s:
            try:
                live = [n for n in self.nodes() if n.master and not n.failed]
            except BackendUnavailable:
                live = []
            if any(n.port != old.port and n.serves(first) for n in live):
                return time.monotonic() - started
            time.sleep(0.1)
        return None


class ClusterRig(Rig):
    """:class:`Rig` on a Redis Cluster with a replica per master (see the module docstring)."""

    def __init__(self, tmp: Path, session_s: float = 4.0) -> None:
        super().__init__(tmp, session_s)
        self.cluster = ClusterNodes(tmp / "redis-cluster")
        self.redis = self.cluster  # type: ignore[assignment]  # (start/stop: what the rig uses)
        self.settings = dataclasses.replace(
            self.settings, redis_url=f"redis://{self.cluster.address}/0", redis_cluster=True
        )

    def _start_servers(self) -> None:
        super()._start_servers()
        # A port range taken meanwhile made the nodes start on another one: the URL follows.
        self.settings = dataclasses.replace(
            self.settings, redis_url=f"redis://{self.cluster.address}/0"
        )

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(EMQ_REDIS_CLUSTER="true", **extra)
