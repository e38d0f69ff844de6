"""The tenant quota and burst fields through the HTTP API: set, shown, removed; bad input is one
clear 4xx that changes nothing."""

from __future__ import annotations

from tests.api.conftest import ADMIN, Api


async def test_a_tenants_cap_is_set_per_namespace_listed_and_removed(api: Api) -> None:
    tenant_auth = await api.tenant("acme")
    r = await api.client.patch("/v1/tenants/acme", json={"qps_cap": 300}, headers=ADMIN)
    assert r.status == 200, await r.text()
    assert (await r.json())["qps_caps"] == {"online": 300}
    r = await api.client.patch(
        "/v1/tenants/acme", json={"qps_cap": 50, "namespace": "sandbox"}, headers=ADMIN
    )
    assert (await r.json())["qps_caps"] == {"online": 300, "sandbox": 50}
    listed = await (await api.client.get("/v1/tenants", headers=ADMIN)).json()
    assert listed["tenants"][0]["qps_caps"] == {"online": 300, "sandbox": 50}

    for body, status in (
        ({"qps_cap": 0}, 422),
        ({"qps_cap": "many"}, 422),
        ({}, 422),
        ({"qps_cap": 10, "extra": 1}, 422),
    ):
        r = await api.client.patch("/v1/tenants/acme", json=body, headers=ADMIN)
        assert r.status == status, (body, await r.text())
        assert (await r.json())["error"]["code"]
    r = await api.client.patch("/v1/tenants/nobody", json={"qps_cap": 10}, headers=ADMIN)
    assert r.status == 404
    r = await api.client.patch("/v1/tenants/acme", json={"qps_cap": 9}, headers=tenant_auth)
    assert r.status == 403  # admin only
    listed = await (await api.client.get("/v1/tenants", headers=ADMIN)).json()
    assert listed["tenants"][0]["qps_caps"] == {"online": 300, "sandbox": 50}  # unchanged

    r = await api.client.patch("/v1/tenants/acme", json={"qps_cap": None}, headers=ADMIN)
    assert (await r.json())["qps_caps"] == {"sandbox": 50}


async def test_topic_weight_and_burst_are_set_shown_and_validated(api: Api) -> None:
    await api.tenant("acme")
    created = await api.topic("acme", "orders", 100, weight=3, burst=20)
    assert (created["weight"], created["burst"]) == (3, 20)
    path = "/v1/tenants/acme/topics/orders"
    r = await api.client.patch(path, json={"burst": 0, "weight": 1}, headers=ADMIN)
    assert ((await r.json())["weight"], (await r.json())["burst"]) == (1, 0)
    for body in ({"weight": 0}, {"burst": -1}, {"weight": 1001}):
        r = await api.client.patch(path, json=body, headers=ADMIN)
        assert r.status == 422, (body, await r.text())
    shown = await (await api.client.get(path, headers=ADMIN)).json()
    assert (shown["weight"], shown["burst"]) == (1, 0)
