"""Settings of fleet membership and assignment (env ``EMQ_FLEET_*``, TOML table ``[fleet]``).

The ZooKeeper session timeout is shared with every EMQ process (``EMQ_ZK_SESSION_TIMEOUT_S``) and
sets the fleet's timing: ZooKeeper vouches for a worker's groups ``2/3`` of it after it last
heard from ZooKeeper (the store vouches for them too, see :mod:`allocator.fleet`), and a dead
worker's groups move once its session expired: a killed worker's groups deliver again about a
session timeout (+ 2 s) after the kill. Every worker of a namespace should use the same one.
"""

from __future__ import annotations

from dataclasses import dataclass

from emq.core.errors import ConfigError

SELF_FENCE_FRACTION = 2.0 / 3.0  # of the session timeout: kazoo's own read timeout


@dataclass(frozen=True)
class FleetSettings:
    weight: int = 1  # capacity weight: a weight-2 worker is given twice the groups
    vnodes: int = 160  # ring points per unit of weight
    balance: float = 1.05  # a member is given at most this times its share of groups...
    keep_balance: float = 1.10  # ...but keeps up to this many before any is moved away
    handover_grace_s: float = 0.0  # an extra wait after a former owner's node is gone
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
    """The wait after a former owner's node is gone before its groups may be claimed.

    None is needed (0, the default): the node goes only when the session expired, a full
    session timeout after ZooKeeper last heard from the owner, and its ZooKeeper lease ended
    a third of a session timeout before that; what it may still push on the store's word is
    fenced by the claim itself (see :mod:`allocator.fleet`, Vouching). A positive setting adds a
    wait, for operators who want one.
    """
    return settings.handover_grace_s
