"""The console's files and its overview read over HTTP, without a browser."""

from __future__ import annotations

import re

from emq.api.ui import ASSETS
from tests.console.conftest import ADMIN, Console


async def test_the_console_files_load_without_auth_with_a_strict_policy(
    console: Console,
) -> None:
    r = await console.client.get("/ui", allow_redirects=False)
    assert r.status == 302 and r.headers["Location"] == "/ui/"
    weight = 0
    for path, kind in (("/ui/", "text/html"), ("/ui/app.js", "javascript"), ("/ui/app.css", "css")):
        r = await console.client.get(path)
        assert r.status == 200 and kind in r.headers["Content-Type"], path
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        weight += len(await r.read())
    # The shell, uncompressed: the page, its main script and styles (each view past the first
    # ones has a script of its own, loaded with the page but not counted here).
    assert weight < 48_000, weight
    for path in ("/ui/index.html.bak", "/ui/..%2Fapp.py", "/ui/%2e%2e/app.py"):
        r = await console.client.get(path)
        assert r.status == 404, path


def test_the_console_requests_nothing_outside_its_own_origin() -> None:
    for name in ("index.html", "app.js", "app.css"):
        text = (ASSETS / name).read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]", text), name


async def test_the_overview_is_scoped_to_the_caller(console: Console) -> None:
    r = await console.client.get("/v1/topics")
    assert r.status == 401
    acme = await console.tenant("acme")
    globex = await console.tenant("globex")
    await console.topic("acme", "orders", 10)
    await console.topic("globex", "invoices", 10)
    status, body = await console.get("/v1/topics")
    assert status == 200
    assert {(t["tenant"], t["topic"]) for t in body["topics"]} == {
        ("acme", "orders"),
        ("globex", "invoices"),
    }
    row = body["topics"][0]
    assert {"qps", "paused", "backlog", "delayed", "delivered_per_s"} <= set(row)
    assert "secret" not in row
    for token, tenant in ((acme, "acme"), (globex, "globex")):
        status, body = await console.get("/v1/topics", token)
        assert status == 200 and body["tenant"] == tenant
        assert [t["tenant"] for t in body["topics"]] == [tenant]
    r = await console.client.get("/v1/topics?namespace=nope", headers=ADMIN)
    assert r.status == 422
