"""``emq topic set-endpoints|enable-endpoint`` and the endpoint lines of ``topic show``, as
subprocesses against a real ``emq api`` (real Redis and ZooKeeper)."""

from __future__ import annotations

from tests.emq.test_cli_commands import ADMIN_TOKEN, EmqApi, emq_api  # noqa: F401  (fixture)


async def test_endpoint_commands(emq_api: EmqApi) -> None:  # noqa: F811
    await emq_api.admin("tenant", "create", "acme")
    await emq_api.admin("topic", "create", "acme", "hooks", "--qps", "50")
    body = await emq_api.admin(
        "topic", "set-endpoints", "acme", "hooks", "--adaptive", "--disable-after", "20"
    )
    assert body["endpoints"]["adaptive"] is True and body["endpoints"]["disable_after"] == 20
    shown = await emq_api.run("topic", "show", "acme", "hooks", EMQ_ADMIN_TOKEN=ADMIN_TOKEN)
    assert shown.code == 0, shown.err
    assert "adaptive (x0.7 on 429/503, +5/s)" in shown.out
    assert "disable after 20 failures over 300 s" in shown.out
    done = await emq_api.run(
        "topic",
        "enable-endpoint",
        "acme",
        "hooks",
        "hooks.example:443",
        EMQ_ADMIN_TOKEN=ADMIN_TOKEN,
    )
    assert done.code == 0 and "hooks.example:443 re-enabled" in done.out, done.err
    # Bad input: one line, a non-zero exit, nothing changed.
    for args in (
        ("topic", "enable-endpoint", "acme", "hooks", "no-port"),
        ("topic", "set-endpoints", "acme", "hooks", "--decrease", "2"),
        ("topic", "set-endpoints", "acme", "hooks"),
    ):
        bad = await emq_api.run(*args, EMQ_ADMIN_TOKEN=ADMIN_TOKEN)
        assert bad.code != 0 and len(bad.err.strip().splitlines()) == 1, (args, bad.err)
    after = await emq_api.admin("topic", "show", "acme", "hooks")
    assert after["endpoints"] == body["endpoints"]
