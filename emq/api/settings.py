"""Settings of ``emq api`` (env ``EMQ_API_*``, TOML table ``[api]``).

Apart from :mod:`emq.api.app` so that reading them (``emq config show``, ``emq --help``) does
not import aiohttp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from emq.core.settings import at_least, between, greater_than, setting, validate

_MIB = 1024 * 1024
MAX_WORKERS = 64  # API processes per `emq api`


@dataclass(frozen=True)
class ApiSettings:
    """Limits and tuning of ``emq api`` (env ``EMQ_API_*``)."""

    ENV_PREFIX: ClassVar[str] = "EMQ_API_"

    max_request_bytes: int = setting(16 * _MIB, at_least(1024))
    max_batch_jobs: int = setting(1000, at_least(1))
    max_body_bytes: int = setting(256 * 1024, at_least(1))
    backlog_refresh_s: float = setting(1.0, greater_than(0))
    shutdown_grace_s: float = setting(10.0, at_least(0))
    history_interval_s: float = setting(10.0, greater_than(0))
    # Capacity plans kept for the console (POST /v1/plans, newest first; older ones dropped).
    plans_kept: int = setting(5, at_least(1))
    # Hostile or broken clients (see emq.api.guard): a request's headers must arrive within
    # header_timeout_s of its first byte, its body within body_timeout_s of being read; an
    # idle connection is closed after keepalive_timeout_s; beyond max_connections open at
    # once, a new connection is answered 503 and closed.
    header_timeout_s: float = setting(10.0, greater_than(0))
    body_timeout_s: float = setting(30.0, greater_than(0))
    keepalive_timeout_s: float = setting(75.0, greater_than(0))
    max_connections: int = setting(1000, at_least(1))
    # API processes serving one port (SO_REUSEPORT) under a supervisor (emq.api.supervisor);
    # 1 is a single process, as without the supervisor. ``emq api --workers N`` overrides it.
    workers: int = setting(1, between(1, MAX_WORKERS))
    # Transactions (emq.core.transactions): jobs in one, open ones per topic; the check-back
    # asks at most check_attempts times (waiting check_backoff_s, doubling, between asks that
    # decide nothing; each ask times out after check_timeout_s); every API process runs a
    # runner that looks for due work each runner_interval_s.
    transaction_max_jobs: int = setting(10_000, at_least(1))
    transaction_max_open: int = setting(1_000, at_least(1))
    transaction_check_attempts: int = setting(6, at_least(1))
    transaction_check_backoff_s: float = setting(5.0, greater_than(0))
    transaction_check_timeout_s: float = setting(5.0, greater_than(0))
    transaction_runner_interval_s: float = setting(1.0, greater_than(0))

    def __post_init__(self) -> None:
        validate(self)
