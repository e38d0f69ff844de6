"""Settings of ``emq worker`` (env ``EMQ_WORKER_*``, TOML table ``[worker]``)."""

from __future__ import annotations

from dataclasses import dataclass

from emq.core.errors import ConfigError

METRICS_AUTO = "auto"
METRICS_AUTO_PORTS = range(9101, 9200)  # "auto" takes the first free one: a worker per core


@dataclass(frozen=True)
class WorkerSettings:
    id: str = ""  # empty: <hostname>-<pid>
    metrics_host: str = "127.0.0.1"
    # "auto": the first free port of METRICS_AUTO_PORTS (advertised in the fleet's running node);
    # a number: that port, a one-line error if taken; "0": no metrics server.
    metrics_port: str = METRICS_AUTO
    senders: int = 256  # HTTP sender tasks counted against the send limit
    senders_min: int = 64  # pushes at once when the worker's CPU is the limit (= senders: fixed)
    max_in_flight: int = 10_000  # pushes at once, slow ones included (sockets, memory)
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    max_response_bytes: int = 64 * 1024
    buffer_seconds: float = 2.0  # fetch about this many seconds of a group's quota ahead
    buffer_bytes: int = 256 * 1024 * 1024  # payload bytes held in buffers at most (worker.fetch)
    tick_s: float = 0.005  # dispatcher period
    checkpoint_interval_s: float = 1.0
    history_interval_s: float = 10.0
    sweep_interval_s: float = 30.0  # safety net: re-read every owned queue this often
    retain_entries: int = 0  # entries kept below a checkpoint for replay (-1: never trim)
    trim_interval_s: float = 5.0  # delivered entries are removed this often (see README)
    dlq_trim_interval_s: float = 60.0  # owned groups' DLQs trimmed to retention this often
    shutdown_grace_s: float = 10.0
    aging_s: float = 10.0  # weighted priority: the longest a lower priority waits

    def __post_init__(self) -> None:
        self.metrics_ports()  # validates
        for name in ("senders", "senders_min"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"EMQ_WORKER_{name.upper()} must be at least 1, got {value}")
        if self.max_in_flight < self.senders:
            raise ConfigError(
                f"EMQ_WORKER_MAX_IN_FLIGHT must be at least EMQ_WORKER_SENDERS ({self.senders}),"
                f" got {self.max_in_flight}"
            )
        if self.buffer_bytes < 1024 * 1024:
            raise ConfigError(
                f"EMQ_WORKER_BUFFER_BYTES must be at least 1048576 (1 MiB), got {self.buffer_bytes}"
            )
        if self.retain_entries < -1:
            raise ConfigError(
                "EMQ_WORKER_RETAIN_ENTRIES must be -1 (never trim) or more, "
                f"got {self.retain_entries}"
            )
        for name in ("trim_interval_s", "dlq_trim_interval_s"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"EMQ_WORKER_{name.upper()} must be greater than 0, got {value}")

    def metrics_ports(self) -> range:
        """The ports to try for the metrics server, in order (empty: no server)."""
        value = str(self.metrics_port).strip().lower()
        if value == METRICS_AUTO:
            return METRICS_AUTO_PORTS
        if not value.isdigit() or int(value) > 65535:
            raise ConfigError(
                "EMQ_WORKER_METRICS_PORT must be 'auto' or a port 0-65535, "
                f"got {self.metrics_port!r}"
            )
        port = int(value)
        return range(port, port + 1) if port else range(0)
