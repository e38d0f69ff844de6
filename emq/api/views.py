"""Answers built from the core's records (no aiohttp): a dead letter as the API shows it, the DLQ
page cursor, the fleet's view, dead-letter ids by group. The handlers in :mod:`emq.api.app`
call these; the answer types are in :mod:`emq.api.answers`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emq.api import answers
from emq.core.errors import InvalidInput
from emq.core.interfaces import DeadLetter, FleetState
from emq.core.model import Envelope


def dlq_cursor(raw: str | None) -> tuple[int, str | None]:
    """A DLQ cursor is ``<group>:<id>``: where the previous page ended."""
    if not raw:
        return 0, None
    group, sep, letter = raw.partition(":")
    if not sep or not group.isdigit() or not letter:
        raise InvalidInput("cursor", "is not a cursor returned by this API")
    return int(group), letter


def ids_by_group(ids: list[str]) -> dict[int, list[str]]:
    """Dead-letter ids (``<group>:<entry>``, the schema's pattern) by group."""
    out: dict[int, list[str]] = {}
    for text in ids:
        group, _, letter = text.partition(":")
        out.setdefault(int(group), []).append(letter)
    return out


def fleet_view(state: FleetState, rates: Mapping[str, Mapping[str, float]]) -> answers.Fleet:
    workers: list[answers.FleetWorker] = []
    for m in state.members:
        topics = {t: round(r, 3) for t, r in sorted(rates.get(m.id, {}).items())}
        workers.append(
            {
                "id": m.id,
                "host": m.host,
                "pid": m.pid,
                "weight": m.weight,
                "started_at": m.started_at,
                "metrics": m.metrics,
                "leader": m.leader,
                "group_count": len(m.groups),
                "groups": [{"group": g, "epoch": e} for g, e in sorted(m.groups.items())],
                "delivered_per_s": round(sum(topics.values()), 3),
                "topics_per_s": topics,
            }
        )
    return {
        "namespace": state.namespace.value,
        "generation": state.generation,
        "leader": state.leader,
        "assigned_at": state.assigned_at,
        "workers": workers,
        "orphans": [{"group": g, "worker": w} for g, w in sorted(state.orphans.items())],
    }


def letter_view(group: int, letter: DeadLetter) -> answers.DeadLetter:
    try:
        envelope = Envelope.decode(letter.payload)
        job: dict[str, Any] = {"job_id": envelope.id, "job": envelope.job.to_dict()}
    except (ValueError, KeyError, TypeError, AttributeError):
        # An entry the worker could not read (written into Redis by other means): shown as is.
        raw = letter.payload.decode(errors="replace")
        job = {"job_id": None, "job": None, "raw": raw}
    return {  # type: ignore[typeddict-item]
        "id": f"{group}:{letter.id}",
        **job,
        "priority": letter.priority.value,
        "error": letter.error,
        "status": letter.status,
        "attempts": letter.attempts,
        "failed_at": letter.failed_at_ms / 1000,
    }
