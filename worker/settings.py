"""Settings of ``emq worker`` (env ``EMQ_WORKER_*``, TOML table ``[worker]``)."""

from __future__ import annotations

from dataclasses import dataclass

from emq.errors import ConfigError


@dataclass(frozen=True)
class WorkerSettings:
    id: str = ""  # empty: <hostname>-<pid>
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9101  # 0 turns the metrics server off
    senders: int = 256  # fixed pool of HTTP sender tasks
    senders_min: int = 64  # pushes at once when the worker's CPU is the limit (= senders: fixed)
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    max_response_bytes: int = 64 * 1024
    buffer_seconds: float = 2.0  # fetch about this many seconds of a group's quota ahead
    tick_s: float = 0.005  # dispatcher period
    checkpoint_interval_s: float = 1.0
    history_interval_s: float = 10.0
    sweep_interval_s: float = 30.0  # safety net: re-read every owned queue this often
    retain_entries: int = 0  # entries kept below a checkpoint for replay (-1: never trim)
    trim_interval_s: float = 5.0  # delivered entries are removed this often (see README)
    shutdown_grace_s: float = 10.0
    aging_s: float = 10.0  # weighted priority: the longest a lower priority waits

    def __post_init__(self) -> None:
        for name in ("senders", "senders_min"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"EMQ_WORKER_{name.upper()} must be at least 1, got {value}")
        if self.retain_entries < -1:
            raise ConfigError(
                "EMQ_WORKER_RETAIN_ENTRIES must be -1 (never trim) or more, "
                f"got {self.retain_entries}"
            )
        if self.trim_interval_s <= 0:
            raise ConfigError(
                f"EMQ_WORKER_TRIM_INTERVAL_S must be greater than 0, got {self.trim_interval_s}"
            )
