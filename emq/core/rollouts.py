"""A plan's rollout as the API keeps it (``/v1/rollouts``): what ``emq plan apply --canary``
is doing, for the console's Plan view and for whoever runs ``emq plan apply`` next.

The CLI drives the rollout; the API only stores what it is told. States::

    running --all steps healthy--> done
    running --a signal past its threshold--> rolled-back (every applied topic set back)
    running --a rollback that could not set every topic back--> failed
    running --no PATCH within 3 x heartbeat_s--> abandoned (read-time: the CLI died)

A topic's status: ``pending`` → ``applied`` → ``watching`` → ``healthy`` | ``breached``; after a
rollback each applied one is ``rolled-back`` (or ``rollback-failed``).

Stored rollouts expire ``retention_s`` after their last update, so the store stays bounded.
"""

from __future__ import annotations

import abc
from typing import Any

from emq.core.interfaces import AsyncResource

STATES = ("running", "done", "rolled-back", "failed", "abandoned")
TOPIC_STATUSES = (
    "pending", "applied", "watching", "healthy", "breached", "rolled-back", "rollback-failed",
)  # fmt: skip
STALE_BEATS = 3  # a running rollout not updated for this many heartbeats is abandoned
RETENTION_S = 7 * 86_400
ID_RE = r"ro_[0-9]{1,15}_[0-9a-f]{6}"
ID_PATTERN = f"^{ID_RE}$"


def shown(rollout: dict[str, Any], now: float) -> dict[str, Any]:
    """``rollout`` as answered at ``now``: a running one whose CLI stopped beating reads
    ``abandoned``, with the age of its last heartbeat in its reason."""
    out = dict(rollout)
    beat = float(out.get("heartbeat_s") or 5.0)
    age = now - float(out.get("updated_at") or 0.0)
    if out.get("state") == "running" and age > STALE_BEATS * beat:
        out["state"] = "abandoned"
        out["reason"] = (
            f"no heartbeat for {age:.0f} s (expected every {beat:g} s): the emq plan apply "
            "that ran it stopped; topics it applied keep their values (see emq changes list)"
        )
    done = sum(1 for t in out.get("topics") or [] if t.get("status") in ("healthy",))
    out["topics_done"] = done
    return out


def merged(rollout: dict[str, Any], patch: dict[str, Any], now: float) -> dict[str, Any]:
    """``rollout`` with ``patch`` applied: top-level fields replaced, topics merged by name."""
    out = dict(rollout) | {k: v for k, v in patch.items() if k != "topics" and v is not None}
    by_name = {t["name"]: dict(t) for t in rollout.get("topics") or []}
    for t in patch.get("topics") or []:
        if t["name"] in by_name:
            by_name[t["name"]].update({k: v for k, v in t.items() if v is not None})
    out["topics"] = list(by_name.values())
    out["updated_at"] = round(now, 3)
    return out


class RolloutStore(AsyncResource):
    """Rollouts by id, and which one was started last."""

    @abc.abstractmethod
    async def save(self, rollout: dict[str, Any], latest: bool = False) -> None:
        """Store ``rollout`` (its ``id`` is the key); ``latest``: it is the newest one."""

    @abc.abstractmethod
    async def get(self, rollout_id: str) -> dict[str, Any] | None:
        """The stored rollout (None: unknown or expired)."""

    @abc.abstractmethod
    async def latest(self) -> dict[str, Any] | None:
        """The rollout started last (None: none kept)."""
