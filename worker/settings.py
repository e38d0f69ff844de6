"""Settings of ``emq worker`` (env ``EMQ_WORKER_*``, TOML table ``[worker]``).

Every field is checked (:func:`emq.core.settings.validate`), with a one-line error naming its
variable; the checks that relate two fields follow in ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from emq.core.errors import ConfigError
from emq.core.settings import at_least, between, greater_than, matching, setting, validate

METRICS_AUTO = "auto"
METRICS_AUTO_PORTS = range(9101, 9200)  # "auto" takes the first free one: a worker per core
_MIB = 1024 * 1024
HTTP_CLIENTS = ("lean", "aiohttp")  # worker.pushers: the push executor of each


def _metrics_port(value: Any) -> None:
    text = str(value).strip().lower()
    if text != METRICS_AUTO and not (text.isdigit() and int(text) <= 65535):
        raise ValueError("must be 'auto' or a port 0-65535")


@dataclass(frozen=True)
class WorkerSettings:
    ENV_PREFIX: ClassVar[str] = "EMQ_WORKER_"

    id: str = setting("", matching(r"[^\s/]{0,200}", "at most 200 characters, no spaces or /"))
    metrics_host: str = setting("127.0.0.1", matching(r"\S+", "a host name or address"))
    # "auto": the first free port of METRICS_AUTO_PORTS (advertised in the fleet's running node);
    # a number: that port, a one-line error if taken; "0": no metrics server.
    metrics_port: str = setting(METRICS_AUTO, _metrics_port)
    senders: int = setting(256, at_least(1))  # HTTP sender tasks counted against the send limit
    # pushes at once when the worker's CPU is the limit (= senders: fixed)
    senders_min: int = setting(64, at_least(1))
    max_in_flight: int = setting(10_000, at_least(1))  # pushes at once, slow ones included
    connect_timeout_s: float = setting(5.0, greater_than(0))
    request_timeout_s: float = setting(10.0, greater_than(0))
    max_response_bytes: int = setting(64 * 1024, at_least(0))
    # A response's head (status line, header fields, 1xx heads before it) is bounded: its bytes
    # in all, each field's bytes (name or value; aiohttp's 8 KiB limit) and its field count
    # (aiohttp's). Past one, the request fails as a protocol error (docs/design/push-client.md).
    max_response_head_bytes: int = setting(64 * 1024, at_least(1024))
    max_response_field_bytes: int = setting(8190, at_least(256))
    max_response_headers: int = setting(128, at_least(1))
    # the push executor (worker.pushers): "lean" (asyncio protocols + httptools) or "aiohttp"
    http_client: str = setting("lean", matching("|".join(HTTP_CLIENTS), "lean or aiohttp"))
    # fetch about this many seconds of a group's quota ahead
    buffer_seconds: float = setting(2.0, greater_than(0))
    # payload bytes held in buffers at most (worker.fetch)
    buffer_bytes: int = setting(256 * _MIB, at_least(_MIB))
    tick_s: float = setting(0.005, between(0.0001, 1))  # dispatcher period
    # quota-limited groups come back on a shared grid this fine (0: each exactly when due)
    pace_grid_s: float = setting(0.02, between(0, 0.03))
    checkpoint_interval_s: float = setting(1.0, greater_than(0))
    history_interval_s: float = setting(10.0, greater_than(0))
    # safety net: re-read every owned queue this often
    sweep_interval_s: float = setting(30.0, greater_than(0))
    # entries kept below a checkpoint for replay (-1: never trim)
    retain_entries: int = setting(0, at_least(-1))
    trim_interval_s: float = setting(5.0, greater_than(0))  # delivered entries removed this often
    # owned groups' DLQs trimmed to retention this often
    dlq_trim_interval_s: float = setting(60.0, greater_than(0))
    shutdown_grace_s: float = setting(10.0, at_least(0))
    aging_s: float = setting(10.0, greater_than(0))  # weighted priority: a lower one waits at most
    # endpoints followed per topic with an endpoint policy (worker.endpoints; bounds metrics)
    endpoints_per_topic: int = setting(64, between(1, 10_000))

    def __post_init__(self) -> None:
        validate(self)
        if self.max_in_flight < self.senders:
            raise ConfigError(
                f"EMQ_WORKER_MAX_IN_FLIGHT: must be at least EMQ_WORKER_SENDERS ({self.senders}),"
                f" got {self.max_in_flight}"
            )
        if self.max_response_field_bytes > self.max_response_head_bytes:
            raise ConfigError(
                "EMQ_WORKER_MAX_RESPONSE_FIELD_BYTES: must be at most"
                f" EMQ_WORKER_MAX_RESPONSE_HEAD_BYTES ({self.max_response_head_bytes}),"
                f" got {self.max_response_field_bytes}"
            )

    def metrics_ports(self) -> range:
        """The ports to try for the metrics server, in order (empty: no server)."""
        value = str(self.metrics_port).strip().lower()
        if value == METRICS_AUTO:
            return METRICS_AUTO_PORTS
        port = int(value)
        return range(port, port + 1) if port else range(0)
