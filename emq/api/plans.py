"""The latest capacity plan: ``POST /v1/plans`` stores one, ``GET /v1/plans/latest`` shows it.

``emq plan apply`` (and ``--dry-run``) sends the plan it reads; the API keeps the latest
``EMQ_API_PLANS_KEPT`` (:mod:`emq.core.plans`). The answer of ``latest`` holds the report's
figures and series as stored and the **dry-run diff** against the configuration *now*: each
planned topic's current quota and groups and what applying would do (``raise``, ``lower``,
``needs-force`` for a drop by more than half, ``unchanged``, ``unknown``), the same rules as
``emq plan apply``. It costs one topic listing per namespace the plan names (the configuration
store's), whatever the plan's size; the rows are capped at ``DIFF_ROWS``.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from capacity.plan import change_pct, is_big_decrease
from emq.api.plan_answers import Action, PlanChange, PlanDiff, PlanStored, PlanView
from emq.core import schema
from emq.core.errors import BackendUnavailable, NotFound
from emq.core.model import Namespace, Topic, TopicRef
from emq.core.plan_schema import PlanIn, PlanQuery
from emq.core.plans import PlanStore, StoredPlan

if TYPE_CHECKING:
    from emq.api.app import Api

DIFF_ROWS = 200
ACTIONS: tuple[Action, ...] = ("raise", "lower", "needs-force", "unchanged", "unknown")


class Plans:
    """The plan routes, with the API's dependencies and the plan store."""

    def __init__(self, api: Api, store: PlanStore | None) -> None:
        self.api = api
        self.store = store

    def _store(self) -> PlanStore:
        if self.store is None:
            raise BackendUnavailable("this API keeps no capacity plans (no plan store)")
        return self.store

    async def publish(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        query = schema.query(PlanQuery, request.query)
        plan = schema.validate(PlanIn, await self.api.read_object(request))
        stored = StoredPlan(
            id=f"plan_{int(time.time() * 1000)}_{secrets.token_hex(3)}",
            stored_at=round(time.time(), 3),
            source=query.source,
            plan=plan.model_dump(mode="json"),
        )
        kept = await self._store().save(stored, self.api.api.plans_kept)
        answer: PlanStored = {
            "id": stored.id,
            "stored_at": stored.stored_at,
            "source": stored.source,
            "topics": len(plan.topics),
            "kept": kept,
        }
        return web.json_response(answer, status=201)

    async def latest(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        stored = await self._store().latest()
        if stored is None:
            raise NotFound("no capacity plan stored yet: run 'emq plan apply --dry-run PLAN.json'")
        plan = stored.plan
        topics = plan.get("topics") or []
        live = await self._live({t["namespace"] for t in topics})
        answer: PlanView = {
            "id": stored.id,
            "stored_at": stored.stored_at,
            "source": stored.source,
            "kept": stored.kept,
            "generated_at": plan.get("generated_at", ""),
            "history": plan.get("history") or {},
            "parameters": plan.get("parameters") or {},
            "fleet": plan.get("fleet") or {},
            "series": plan.get("series"),
            "topics": len(topics),
            "diff": diff(topics, live),
        }
        return web.json_response(answer)

    async def _live(self, namespaces: set[str]) -> dict[TopicRef, Topic]:
        out: dict[TopicRef, Topic] = {}
        for name in sorted(namespaces):
            for topic in await self.api.config.list_topics(Namespace(name)):
                out[topic.ref] = topic
        return out


def diff(planned: list[dict[str, Any]], live: dict[TopicRef, Topic]) -> PlanDiff:
    """Every planned topic against ``live`` (what ``emq plan apply`` would do without --force);
    rows for the ones that would change or are unknown, the largest change first."""
    counts: dict[Action, int] = dict.fromkeys(ACTIONS, 0)
    rows: list[PlanChange] = []
    for t in planned:
        row = _change(t, live.get(TopicRef(Namespace(t["namespace"]), t["tenant"], t["topic"])))
        counts[row["action"]] += 1
        if row["action"] != "unchanged":
            rows.append(row)
    rows.sort(key=_weight, reverse=True)
    return {
        "counts": counts,
        "changes": rows[:DIFF_ROWS],
        "limit": DIFF_ROWS,
        "truncated": len(rows) > DIFF_ROWS,
    }


def _change(t: dict[str, Any], topic: Topic | None) -> PlanChange:
    qps = int(t["qps"])
    current = None if topic is None else topic.qps
    action: Action
    if current is None:
        action = "unknown"
    elif current == qps:
        action = "unchanged"
    elif qps > current:
        action = "raise"
    else:
        action = "needs-force" if is_big_decrease(current, qps) else "lower"
    return {
        "namespace": t["namespace"],
        "tenant": t["tenant"],
        "topic": t["topic"],
        "current_qps": current,
        "current_groups": None if topic is None else topic.groups,
        "qps": qps,
        "groups": int(t["groups"]),
        "change_pct": change_pct(current, qps) if current else None,
        "action": action,
        "p99_rps": (t.get("rates") or {}).get("p99"),
        "max_wait_s": (t.get("dry_run") or {}).get("max_wait_s"),
    }


def _weight(row: PlanChange) -> tuple[int, float]:
    """Needs-force first, then by how much the quota moves; unknown topics last."""
    if row["action"] == "unknown":
        return (0, float(row["qps"]))
    moved = abs(row["qps"] - (row["current_qps"] or 0))
    return (2 if row["action"] == "needs-force" else 1, float(moved))


def add_routes(app: web.Application, api: Api, store: PlanStore | None) -> None:
    """Register the plan routes on the API's app."""
    plans = Plans(api, store)
    app.router.add_routes(
        [web.post("/v1/plans", plans.publish), web.get("/v1/plans/latest", plans.latest)]
    )
