"""A 3-node ZooKeeper ensemble on loopback, for the quorum-loss test and fault trial.

Each node is a :class:`~emq.stack.Service` of ``deploy/zookeeper.sh`` (the script an operator
runs) with its own directory and client port, started as node ``MYID`` of the ensemble. A
trial stops a majority (:meth:`ZkEnsemble.kill`) and brings it back (:meth:`ZkEnsemble.start`);
:meth:`ZkEnsemble.wait_quorum` tells when the ensemble serves writes again, as seen from a
client of its own, so a trial can time what EMQ's processes do after that moment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from kazoo.client import KazooClient

from emq.stack import Service, free_port

PROBE = "/ensemble-probe"


class ZkEnsemble:
    """Three ZooKeeper nodes under ``tmp`` (ids 1, 2, 3); ``hosts`` is the connect string."""

    def __init__(self, tmp: Path, tick_ms: int = 500, size: int = 3) -> None:
        ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
        peers = ",".join(f"{i + 1}:{q}:{e}" for i, (_, q, e) in enumerate(ports))
        self.nodes = [
            Service("zookeeper", "zookeeper.sh", tmp / f"zk{i + 1}", client,
                    (str(tick_ms), str(i + 1), peers))
            for i, (client, _, _) in enumerate(ports)
        ]  # fmt: skip
        self.hosts = ",".join(node.address for node in self.nodes)

    def start(self, ids: Iterable[int] | None = None) -> None:
        """Start nodes ``ids`` (1-based; all by default); a running one is left alone."""
        for node in self._nodes(ids):
            node.start()

    def kill(self, ids: Iterable[int]) -> None:
        """``kill -9`` nodes ``ids``: no goodbye to the others, as a crashed machine."""
        for node in self._nodes(ids):
            try:  # the script's pid file: no round trip to a node that may not answer
                pid = int((node.data_dir / "zookeeper.pid").read_text())
            except (OSError, ValueError):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid)

    def stop(self) -> None:
        """``kill -9`` every node (a throwaway ensemble needs no clean shutdown) and clean up."""
        with contextlib.suppress(Exception):
            self.kill(range(1, len(self.nodes) + 1))
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()

    def wait_quorum(self, timeout_s: float = 60.0) -> float:
        """Block until a fresh client can write through any node; the time.time() it could.

        Each attempt is a new session with a short timeout, so this measures the ensemble,
        not a client's reconnection policy.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            client = KazooClient(hosts=self.hosts, timeout=2.0)
            try:
                client.start(timeout=1.0)
                client.set(PROBE, b"") if client.exists(PROBE) else client.create(PROBE)
                return time.time()
            except Exception:  # no quorum yet: kazoo times out or the server refuses
                time.sleep(0.05)
            finally:
                with contextlib.suppress(Exception):
                    client.stop()
                    client.close()
        raise TimeoutError(f"the ZooKeeper ensemble {self.hosts} had no quorum in {timeout_s} s")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(f"--- {n.data_dir.name}\n{n.log_tail(lines)}" for n in self.nodes)

    def _nodes(self, ids: Iterable[int] | None) -> list[Service]:
        return self.nodes if ids is None else [self.nodes[i - 1] for i in ids]


def _wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as fh:  # a killed child not yet reaped is gone too
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (ProcessLookupError, FileNotFoundError):
            return
        time.sleep(0.02)
