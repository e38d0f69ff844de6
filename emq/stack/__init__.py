"""The local stack: Redis and ZooKeeper on loopback, driven by the service scripts.

The scripts (``redis.sh``, ``zookeeper.sh``, ``redis-cluster.sh``) ship inside the package, in
``emq/stack/scripts/``, so an EMQ installed from a wheel starts its stack as a checkout does
(``deploy/`` links to them). ``emq stack up|down|status`` and the test fixtures both use
:class:`Service`, so what the tests start is what an operator starts. The ports come from the
settings (``EMQ_REDIS_URL`` and ``EMQ_ZK_HOSTS``), so the defaults of every other command point
at the stack ``up`` started.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from emq.core.errors import BackendUnavailable, ConfigError
from emq.core.settings import Durability, Settings

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
NOT_RUNNING = 3  # the scripts' "stopped" status, as in LSB init scripts


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    address: str
    data_dir: str

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "running": self.running,
            "pid": self.pid,
            "address": self.address,
            "data_dir": self.data_dir,
        }


@dataclass(frozen=True)
class Service:
    """One server process managed by a service script (start/stop/status DIR PORT ...)."""

    name: str
    script: str
    data_dir: Path
    port: int
    extra_args: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, action: str, *args: str) -> subprocess.CompletedProcess[str]:
        path = SCRIPTS_DIR / self.script
        if not path.is_file():
            raise ConfigError(f"{path} not found: this EMQ install is incomplete; reinstall it")
        argv = ["bash", str(path), action, str(self.data_dir), str(self.port), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def start(self) -> int:
        """Start the server (a running one is left alone); returns its pid."""
        done = self._run("start", *self.extra_args)
        if done.returncode != 0:
            reason = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
            raise BackendUnavailable(f"{self.name}: {reason}")
        return _pid_of(done.stdout)

    def stop(self) -> None:
        done = self._run("stop")
        if done.returncode != 0:
            raise BackendUnavailable(f"{self.name}: could not stop: {done.stderr.strip()}")

    def status(self) -> ServiceStatus:
        done = self._run("status")
        if done.returncode not in (0, NOT_RUNNING):
            raise BackendUnavailable(f"{self.name}: status failed: {done.stderr.strip()}")
        running = done.returncode == 0
        pid = _pid_of(done.stdout) if running else None
        return ServiceStatus(self.name, running, pid, self.address, str(self.data_dir))

    def log_tail(self, lines: int = 50) -> str:
        """The end of the server's log, for failure reports."""
        log = self.data_dir / f"{self.name}.log"
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {log})"


def _pid_of(stdout: str) -> int:
    words = stdout.split()
    if len(words) >= 2 and words[-2] == "running" and words[-1].isdigit():
        return int(words[-1])
    raise BackendUnavailable(f"unexpected answer from a service script: {stdout.strip()!r}")


def _loopback_port(host: str | None, port: int | None, variable: str, default_port: int) -> int:
    if host != "localhost":
        try:
            loopback = host is not None and ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(f"{variable} points at {host}: the local stack runs on loopback only")
    return port or default_port


def local_stack(settings: Settings) -> tuple[Service, Service]:
    """The Redis and ZooKeeper services that serve ``settings`` on this machine."""
    base = Path(settings.stack_dir)
    url = urlsplit(settings.redis_url)
    redis_port = _loopback_port(url.hostname, url.port, "EMQ_REDIS_URL", 6379)
    first = settings.zk_hosts.split("/", 1)[0].split(",")
    if len(first) != 1:
        raise ConfigError("EMQ_ZK_HOSTS names several servers: the local stack runs one")
    zk_host, _, zk_port = first[0].rpartition(":")
    zk = _loopback_port(zk_host, int(zk_port), "EMQ_ZK_HOSTS", 2181)
    # EMQ_DURABILITY=fsync runs only against a server that fsyncs every write: start it so.
    fsync = ("--appendfsync", "always") if settings.durability is Durability.FSYNC else ()
    return (
        Service("redis", "redis.sh", base / "redis", redis_port, fsync),
        Service("zookeeper", "zookeeper.sh", base / "zookeeper", zk),
    )


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
FREE_PORT_TRIES = 200


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A TCP port nobody uses on loopback right now (for tests and throwaway servers).

    Picked at random *below* the kernel's ephemeral range. ``bind(0)`` would hand out a port of
    that range, which every outgoing connection of every process also draws its local port from:
    between this call and the server's bind, a client elsewhere (a parallel test, a worker) could
    take it, and the server would fail with "Address already in use". Below the range only
    another ``free_port`` caller can race, one chance in thousands.
    """
    low, _ = _ephemeral_range()
    first = 10_000 if low > 12_000 else 1_024
    for _ in range(FREE_PORT_TRIES):
        port = random.randrange(first, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range below is full: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen
