"""Settings of fleet membership and assignment (env ``EMQ_FLEET_*``, TOML table ``[fleet]``).

The ZooKeeper session timeout is shared with every EMQ process (``EMQ_ZK_SESSION_TIMEOUT_S``) and
sets the fleet's timing: ZooKeeper vouches for a worker's groups ``2/3`` of it after it last
heard from ZooKeeper (the store vouches for them too, see :mod:`allocator.fleet`), and a dead
worker's groups move once its session expired: a killed worker's groups deliver again about a
session timeout (+ 2 s) after the kill. Every worker of a namespace should use the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from emq.core.errors import ConfigError
from emq.core.settings import at_least, greater_than, setting, validate

SELF_FENCE_FRACTION = 2.0 / 3.0  # of the session timeout: kazoo's own read timeout


@dataclass(frozen=True)
class FleetSettings:
    ENV_PREFIX: ClassVar[str] = "EMQ_FLEET_"

    # capacity weight: a weight-2 worker is given twice the groups
    weight: int = setting(1, at_least(1))
    vnodes: int = setting(160, at_least(1))  # ring points per unit of weight
    # a member is given at most this times its share of groups...
    balance: float = setting(1.05, at_least(1.0))
    # ...but keeps up to this many before any is moved away
    keep_balance: float = setting(1.10, at_least(1.0))
    # an extra wait after a former owner's node is gone
    handover_grace_s: float = setting(0.0, at_least(0))
    # the leader waits this long after a change before recomputing
    coalesce_s: float = setting(0.05, at_least(0))
    request_timeout_s: float = setting(5.0, greater_than(0))  # one ZooKeeper request

    def __post_init__(self) -> None:
        validate(self)
        if self.balance > self.keep_balance:
            raise ConfigError(
                f"EMQ_FLEET_KEEP_BALANCE: must be at least EMQ_FLEET_BALANCE ({self.balance}),"
                f" got {self.keep_balance}"
            )


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
