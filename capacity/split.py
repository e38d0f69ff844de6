"""The split rule: a topic's quota becomes groups of at most ``max_group_qps`` each.

A topic with quota ``q`` gets ``ceil(q / max_group_qps)`` groups. The group quotas differ by at
most one request per second, sum exactly to ``q`` and none exceeds the cap: with ``n`` groups,
``base = q // n`` and the first ``q % n`` groups get one more. (``base + 1 <= cap`` whenever
there is a remainder, because ``q < n * cap`` then.)
"""

from __future__ import annotations

from emq.core.errors import InvalidInput

DEFAULT_MAX_GROUP_QPS = 150


def _check(qps: int, max_group_qps: int) -> None:
    if isinstance(qps, bool) or not isinstance(qps, int) or qps < 1:
        raise InvalidInput("qps", f"must be a positive integer, got {qps!r}")
    if isinstance(max_group_qps, bool) or not isinstance(max_group_qps, int) or max_group_qps < 1:
        raise InvalidInput("max_group_qps", f"must be a positive integer, got {max_group_qps!r}")


def group_count(qps: int, max_group_qps: int = DEFAULT_MAX_GROUP_QPS) -> int:
    """How many groups a topic with quota ``qps`` is split into."""
    _check(qps, max_group_qps)
    return -(-qps // max_group_qps)


def kept_cap(qps: int, groups: int, max_group_qps: int) -> int:
    """The group cap a topic of ``qps`` over ``groups`` groups is split under: the configured cap,
    or more when the topic kept its groups while the cap was lowered later (never an impossible
    split). The API's views and the workers' quotas both use it."""
    return max(max_group_qps, -(-qps // groups))


def split_quota(
    qps: int, max_group_qps: int = DEFAULT_MAX_GROUP_QPS, groups: int | None = None
) -> tuple[int, ...]:
    """The per-group quotas (index order) of a topic with quota ``qps``.

    ``groups`` overrides the count when a topic keeps more groups than its quota needs (a quota
    was lowered; its queued jobs stay where they are). It must lie between the rule's count and
    ``qps``, so every group keeps at least 1 QPS and none exceeds the cap.
    """
    n = group_count(qps, max_group_qps)
    if groups is not None:
        if isinstance(groups, bool) or not isinstance(groups, int) or not n <= groups <= qps:
            raise InvalidInput(
                "groups", f"must be between {n} and {qps} for {qps} QPS, got {groups!r}"
            )
        n = groups
    base, extra = divmod(qps, n)
    return tuple(base + 1 if i < extra else base for i in range(n))
