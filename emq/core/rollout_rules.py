"""The pure rules of a plan's rollout (``emq plan apply --canary``): flags, the canary choice,
the steps, and the judgement of a topic's signals against its thresholds.

Nothing here does I/O: the CLI (:mod:`emq.cli.rollout`) reads the signals through the API and
asks these functions what to do with them.

**Canary choice.** ``ceil(share x changed topics)`` topics, at least one. Topics are dealt
round-robin across tenants (tenants in name order, each tenant's topics in the order of a stable
hash of their name), so the canary spreads over as many tenants as it can; a tenant's last
changed topic is only taken when no other tenant has one left, so no tenant is canaried whole
when that can be avoided. The same plan gives the same canary on every run.

**Steps.** The rest is split into ``steps`` parts of sizes as equal as possible, in the same
dealing order (each step spread across tenants too).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from emq.core.errors import InvalidInput

T = TypeVar("T")
MAX_STEPS = 20
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_share(text: str, field: str = "--canary") -> float:
    """``10%``, ``10`` or ``0.5%``: a share above 0 and at most 100 %, as a fraction."""
    raw = str(text).strip()
    number = raw[:-1].strip() if raw.endswith("%") else raw
    try:
        pct = float(number)
    except ValueError:
        raise InvalidInput(field, f"must be a percentage such as 10%, got {text!r}") from None
    if not math.isfinite(pct) or not 0 < pct <= 100:
        raise InvalidInput(field, f"must be above 0% and at most 100%, got {text!r}")
    return pct / 100


def parse_duration(text: str, field: str = "--watch") -> float:
    """``5m``, ``30s``, ``1.5h``, ``500ms`` or plain seconds: a duration above 0, in seconds."""
    m = _DURATION_RE.match(str(text))
    if m is None:
        raise InvalidInput(field, f"must be a duration such as 30s or 5m, got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise InvalidInput(field, f"must be above 0, got {text!r}")
    return seconds


def parse_steps(text: str, field: str = "--steps") -> list[float]:
    """``3`` (three equal steps) or ``25,50,100`` (cumulative percentages of the rest, rising,
    the last 100): the share of the rest that is live after each step."""
    raw = str(text).strip()
    if raw.isdigit():
        n = int(raw)
        if not 1 <= n <= MAX_STEPS:
            raise InvalidInput(field, f"must be 1 to {MAX_STEPS} steps, got {text!r}")
        return [(i + 1) / n for i in range(n)]
    shares = [parse_share(p, field) for p in raw.split(",") if p.strip()]
    if not shares or len(shares) > MAX_STEPS:
        raise InvalidInput(field, f"must be a step count or rising percentages, got {text!r}")
    if any(b <= a for a, b in itertools.pairwise(shares)) or shares[-1] != 1:
        raise InvalidInput(field, f"percentages must rise and end at 100%, got {text!r}")
    return shares


def _stable(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def deal(items: Sequence[T], tenant_of: Any, name_of: Any) -> list[T]:
    """``items`` in dealing order: round-robin across tenants (by name), each tenant's items in
    stable-hash order; a tenant's last item comes after every other tenant's but-last ones."""
    by_tenant: dict[str, list[T]] = {}
    for item in items:
        by_tenant.setdefault(str(tenant_of(item)), []).append(item)
    queues = [
        sorted(v, key=lambda i: _stable(str(name_of(i)))) for _, v in sorted(by_tenant.items())
    ]
    firsts = [q[:-1] for q in queues]
    lasts = [q[-1] for q in queues]
    order: list[T] = []
    for rank in range(max((len(f) for f in firsts), default=0)):
        order.extend(f[rank] for f in firsts if rank < len(f))
    return order + lasts


def choose_canary(
    items: Sequence[T], share: float, tenant_of: Any, name_of: Any
) -> tuple[list[T], list[T]]:
    """The canary (``ceil(share x n)``, at least one) and the rest, both in dealing order."""
    order = deal(items, tenant_of, name_of)
    if not order:
        return [], []
    count = min(len(order), max(1, math.ceil(share * len(order) - 1e-9)))
    return order[:count], order[count:]


def split_steps(rest: Sequence[T], shares: Sequence[float]) -> list[list[T]]:
    """``rest`` cut at the cumulative ``shares`` (empty steps dropped)."""
    out: list[list[T]] = []
    done = 0
    for share in shares:
        upto = max(done, min(len(rest), round(share * len(rest))))
        if upto > done:
            out.append(list(rest[done:upto]))
        done = upto
    if done < len(rest):
        out.append(list(rest[done:]))
    return out


# ----------------------------------------------------------------------------- judgement


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a watched topic fails (the docs' table). Each is compared with the topic's own
    baseline (its signals over the same span before the change) where that makes sense."""

    backlog_growth_s: float = 30.0  # backlog rose by more than this many seconds of quota
    oldest_age_rise_s: float = 60.0  # the oldest waiting job got this much older
    failed_share_rise: float = 0.05  # share of failed answers (429/503 ...) rose by this
    throttled_rise_s: float = 30.0  # jobs waiting for quota rose by this many s of quota
    min_delivered_ratio: float = 0.8  # with work waiting, delivered/s under this x expected

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Signals:
    """One topic's figures over a span (from ``GET .../signals``)."""

    backlog: int = 0  # jobs stored and not finished, at the span's end
    oldest_age_s: float = 0.0  # the oldest of them, at the span's end
    delivered: int = 0  # over the span's complete history intervals
    failed: int = 0  # failed answers (429/503, other statuses, timeouts) over them
    throttled: int = 0  # jobs buffered and waiting for quota, at the last interval's end
    covered_s: float = 0.0  # the span the counts cover (whole history intervals)

    @classmethod
    def from_answer(cls, d: dict[str, Any]) -> Signals:
        return cls(
            backlog=int(d.get("backlog") or 0),
            oldest_age_s=float(d.get("oldest_age_s") or 0.0),
            delivered=int(d.get("delivered") or 0),
            failed=int(d.get("failed") or 0),
            throttled=int(d.get("throttled") or 0),
            covered_s=float(d.get("covered_s") or 0.0),
        )

    @property
    def failed_share(self) -> float:
        answered = self.delivered + self.failed
        return self.failed / answered if answered else 0.0

    @property
    def delivered_per_s(self) -> float:
        return self.delivered / self.covered_s if self.covered_s else 0.0


@dataclass(frozen=True, slots=True)
class Breach:
    """One signal past its threshold: what the rollback's reason says."""

    signal: str
    figure: float
    limit: float
    text: str
    op: str = ">"  # the figure is above (">") or below ("<") its limit


def judge(base: Signals, now: Signals, qps: int, limits: Thresholds) -> list[Breach]:
    """The signals of ``now`` (the watch) past ``limits`` against ``base`` (before the change),
    for a topic whose new quota is ``qps``; empty: healthy."""
    out: list[Breach] = []

    def check(signal: str, figure: float, limit: float, what: str) -> None:
        if figure > limit:
            out.append(Breach(signal, round(figure, 3), round(limit, 3), what))

    grew = now.backlog - base.backlog
    check(
        "backlog_growth",
        grew,
        limits.backlog_growth_s * qps,
        f"backlog grew by {grew} jobs (limit {limits.backlog_growth_s:g} s of quota)",
    )
    aged = now.oldest_age_s - base.oldest_age_s
    check(
        "oldest_age",
        aged,
        limits.oldest_age_rise_s,
        f"oldest job {now.oldest_age_s:.1f} s old, {aged:+.1f} s on its baseline",
    )
    share = now.failed_share
    check(
        "failed_share",
        share,
        base.failed_share + limits.failed_share_rise,
        f"{share:.0%} of answers failed (429/503 ...), baseline {base.failed_share:.0%}",
    )
    rose = now.throttled - base.throttled
    check(
        "throttled",
        rose,
        limits.throttled_rise_s * qps,
        f"{now.throttled} jobs waiting for quota, {rose:+d} on its baseline",
    )
    expected = min(float(qps), base.delivered_per_s) * limits.min_delivered_ratio
    if now.backlog > qps and now.covered_s and expected >= 1 and now.delivered_per_s < expected:
        text = f"delivered {now.delivered_per_s:.1f}/s with {now.backlog} jobs waiting"
        out.append(
            Breach("delivered", round(now.delivered_per_s, 3), round(expected, 3), text, "<")
        )
    return out  # fmt: skip


def reason(topic: str, breaches: Sequence[Breach]) -> str:
    """The rollback's why: the topic, each signal with its figure against its limit."""
    parts = [f"{b.signal} {b.figure:g} {b.op} {b.limit:g} ({b.text})" for b in breaches]
    return f"{topic}: " + "; ".join(parts)
