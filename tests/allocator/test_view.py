"""``GET /v1/workers``: members, their groups with epochs, the leader and delivered/s."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from adapters.redis_history import MemoryHistoryStore
from allocator.view import ZkFleetView
from emq.api import ApiSettings, make_app
from emq.compose import open_queues
from tests.allocator.conftest import NS, Fleet, eventually


async def test_workers_route_shows_members_groups_epochs_and_rates(fleet: Fleet) -> None:
    groups = await fleet.topics({"a": 4, "b": 2})
    members = [await fleet.member(f"w{i}", weight=1 + i) for i in range(2)]
    await eventually(lambda: fleet.exactly_once(groups) and len(fleet.leaders()) == 1, 10)
    history = MemoryHistoryStore()
    await history.publish_rates("w0", {"online/acme/a": 12.5, "online/acme/b": 1.0})
    view = ZkFleetView(fleet.settings.zk_hosts, root=fleet.settings.zk_root)
    queues = await open_queues(fleet.settings)
    app = make_app(fleet.settings, ApiSettings(), fleet.config, queues, history, view)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        admin = {"Authorization": f"Bearer {fleet.settings.admin_token}"}
        r = await client.get("/v1/workers", headers=admin)
        assert r.status == 200
        body = await r.json()
        doc = members[0].fleet.document
        assert body["namespace"] == NS.value and body["generation"] == doc.generation
        assert body["leader"] == fleet.leaders()[0].id and body["orphans"] == []
        by_id = {w["id"]: w for w in body["workers"]}
        assert set(by_id) == {"w0", "w1"}
        for m in members:
            w = by_id[m.id]
            assert w["weight"] == int(m.id[1]) + 1 and w["pid"] > 0 and w["host"]
            assert {g["group"]: g["epoch"] for g in w["groups"]} == {
                str(g): e for g, e in m.owned.items()
            }
            assert w["group_count"] == len(m.owned)
        assert by_id["w0"]["delivered_per_s"] == 13.5
        assert by_id["w0"]["topics_per_s"] == {"online/acme/a": 12.5, "online/acme/b": 1.0}
        assert by_id["w1"]["delivered_per_s"] == 0
        assert (await client.get("/v1/workers")).status == 401
        bad = await client.get("/v1/workers", headers=admin, params={"namespace": "nope"})
        assert bad.status == 422
    finally:
        await client.close()
        await view.aclose()
        await queues.aclose()


async def test_without_a_fleet_view_the_route_is_unavailable(fleet: Fleet) -> None:
    queues = await open_queues(fleet.settings)
    client = TestClient(TestServer(make_app(fleet.settings, ApiSettings(), fleet.config, queues)))
    await client.start_server()
    try:
        admin = {"Authorization": f"Bearer {fleet.settings.admin_token}"}
        r = await client.get("/v1/workers", headers=admin)
        assert r.status == 503 and (await r.json())["error"]["code"] == "unavailable"
    finally:
        await client.close()
        await queues.aclose()
