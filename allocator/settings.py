"""Settings of fleet membership and assignment (env ``EMQ_FLEET_*``, TOML table ``[fleet]``).

The ZooKeeper session timeout is shared with every EMQ process (``EMQ_ZK_SESSION_TIMEOUT_S``) and
sets the fleet's timing: a worker self-fences ``2/3`` of it after it last heard from ZooKeeper,
and a new owner waits a grace period of at least that long after a former owner's running node is
gone. Every worker of a namespace should use the same session timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from emq.errors import ConfigError

SELF_FENCE_FRACTION = 2.0 / 3.0  # of the session timeout: kazoo's own read timeout


@dataclass(frozen=True)
class FleetSettings:
    weight: int = 1  # capacity weight: a weight-2 worker is given twice the groups
    vnodes: int = 160  # ring points per unit of weight
    balance: float = 1.05  # a member is given at most this times its share of groups...
    keep_balance: float = 1.10  # ...but keeps up to this many before any is moved away
    handover_grace_s: float = 0.0  # after a former owner's node is gone; 0: the self-fence time
    coalesce_s: float = 0.05  # the leader waits this long after a change before recomputing
    request_timeout_s: float = 5.0  # one ZooKeeper request

    def __post_init__(self) -> None:
        if self.weight < 1 or self.vnodes < 1:
            raise ConfigError("fleet weight and vnodes must be at least 1")
        if not 1.0 <= self.balance <= self.keep_balance:
            raise ConfigError("fleet balance must satisfy 1 <= balance <= keep_balance")
        if self.handover_grace_s < 0 or self.coalesce_s < 0 or self.request_timeout_s <= 0:
            raise ConfigError("fleet grace, coalesce and request times must not be negative")


def self_fence_s(session_timeout_s: float) -> float:
    """How long after its last contact with ZooKeeper a worker stops dispatching."""
    return session_timeout_s * SELF_FENCE_FRACTION


def grace_s(settings: FleetSettings, session_timeout_s: float) -> float:
    """The wait after a former owner's node is gone: never shorter than its self-fence time."""
    return max(settings.handover_grace_s, self_fence_s(session_timeout_s))
