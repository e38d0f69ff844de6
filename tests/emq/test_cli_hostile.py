"""``emq`` commands stay usable when stored data is hostile (written before the API refused it)."""

from __future__ import annotations

import time

from emq.compose import open_config
from emq.core.model import Tenant
from emq.core.settings import Settings
from tests.emq.test_cli_commands import ADMIN_TOKEN, EmqApi, emq_api  # noqa: F401 - a fixture


async def test_tenant_list_prints_names_it_cannot_show_as_escapes(
    emq_api: EmqApi,  # noqa: F811 - the fixture imported above
    settings: Settings,
) -> None:
    config = await open_config(settings)
    try:
        await config.create_tenant(Tenant("evil", "A\ud800\x1b[31mB", "0" * 64, time.time()))
    finally:
        await config.aclose()
    listed = await emq_api.run("tenant", "list", EMQ_ADMIN_TOKEN=ADMIN_TOKEN)
    assert listed.code == 0, listed.err
    assert "evil" in listed.out and "A\\ud800\\x1b[31mB" in listed.out
    as_json = await emq_api.run("tenant", "list", "--json", EMQ_ADMIN_TOKEN=ADMIN_TOKEN)
    assert as_json.code == 0 and as_json.json()["tenants"][0]["name"] == "A\ud800\x1b[31mB"
