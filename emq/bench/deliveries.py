"""A sink's delivery log as records: one :class:`Delivery` per request the sink got, and a
topic's :class:`Quota` (the promise checker, :mod:`emq.bench.promises`, judges them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs


@dataclass(frozen=True, slots=True)
class Delivery:
    """One request as the sink saw it (``status`` 0: never answered, e.g. a hanging endpoint)."""

    at: float
    job_id: str
    topic: str
    status: int = 200
    group: int | None = None
    priority: str | None = None
    key: str | None = None
    enqueued: float | None = None  # ``e``: epoch seconds when the client enqueued the job
    delay_s: float = 0.0  # ``d``: the job's ``delay_s``
    seq: int | None = None  # ``s``: the job's place in its key's enqueue order
    # Epoch seconds when the API's answer accepting the job reached the enqueuing client (the
    # job was stored by then); not in the URL: the client learns it after the URL was written.
    accepted: float | None = None

    @property
    def ready(self) -> float | None:
        """When the job was surely deliverable: its delay after it was enqueued, or after it
        was surely stored if that is known and later (a batch of 1000 takes the API a while
        under load: a job still on its way in waits for nothing); None: neither carried."""
        if self.enqueued is None:
            return None if self.accepted is None else self.accepted + self.delay_s
        start = self.enqueued if self.accepted is None else max(self.enqueued, self.accepted)
        return start + self.delay_s

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class Quota:
    """What a topic may deliver: ``qps`` per second, +1 of slack per group, and with a
    ``burst`` (docs/concepts/quotas.md) that many more in any window: ``qps + burst + groups``."""

    qps: int
    groups: int = 1
    burst: int = 0

    @property
    def limit(self) -> int:
        return self.qps + self.burst + self.groups


def parse_log(rows: Iterable[Sequence[Any]]) -> list[Delivery]:
    """Records from the sink's ``/_log`` rows: ``[at, topic, webhook_id, status, query]``.

    The query carries what the enqueuing client knew: ``g`` group, ``p`` priority, ``k`` key,
    ``s`` sequence within the key, ``e`` enqueue time (epoch seconds), ``d`` delay in seconds.
    """
    out = []
    for at, topic, job_id, status, query in rows:
        q = {k: v[0] for k, v in parse_qs(query or "").items()}
        out.append(
            Delivery(
                float(at), job_id, topic, int(status), _int(q.get("g")), q.get("p"), q.get("k"),
                _float(q.get("e")), _float(q.get("d")) or 0.0, _int(q.get("s")),
            )
        )  # fmt: skip
    return out


def with_accepted(log: Iterable[Delivery], accepted_at: Mapping[str, float]) -> list[Delivery]:
    """``log`` with each record's ``accepted`` time from ``accepted_at`` (by job id)."""
    return [
        d if (at := accepted_at.get(d.job_id)) is None else replace(d, accepted=at) for d in log
    ]


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
