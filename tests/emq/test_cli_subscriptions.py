"""``emq subscription ...`` and ``emq event ...`` as subprocesses against a real ``emq api``
(which opens its subscription store itself): create (the secret printed once), list, update,
rotate-secret, delete, publish and show an event; bad input is one line."""

from __future__ import annotations

from tests.emq.test_cli_commands import EmqApi, _one_line_error, _tenant, emq_api

__all__ = ["emq_api"]  # the fixture, shared with the other CLI tests


async def test_subscription_and_event_commands(emq_api: EmqApi) -> None:
    as_acme = {"EMQ_TOKEN": await _tenant(emq_api)}
    flags = ["--url", "https://hooks.example/in", "--type", "invoice.*", "--type", "order.paid"]
    made = await emq_api.run("subscription", "create", "acme", "orders", *flags, "--header",
                             "X-Team: a", "--json", **as_acme)  # fmt: skip
    assert made.code == 0, made.err
    sub = made.json()
    assert sub["secret"].startswith("whsec_") and sub["event_types"] == ["invoice.*", "order.paid"]
    listed = await emq_api.run("subscription", "list", "acme", "orders", **as_acme)
    assert sub["id"] in listed.out and "whsec_" not in listed.out
    changed = await emq_api.run("subscription", "update", "acme", "orders", sub["id"],
                                "--disable", "--json", **as_acme)  # fmt: skip
    assert changed.json()["enabled"] is False and changed.json()["headers"] == {"X-Team": "a"}
    rotated = await emq_api.run("subscription", "rotate-secret", "acme", "orders", sub["id"],
                                **as_acme)  # fmt: skip
    assert rotated.code == 0 and "whsec_" in rotated.out and sub["secret"] not in rotated.out
    published = await emq_api.run("event", "publish", "acme", "orders", "--type", "invoice.paid",
                                  "--payload", '{"amount": 3}', "--json", **as_acme)  # fmt: skip
    event = published.json()
    assert event["deliveries"] == 0, published  # disabled: nothing to deliver
    shown = await emq_api.run("event", "show", "acme", "orders", event["event_id"], **as_acme)
    assert "invoice.paid" in shown.out and "no deliveries" in shown.out
    deleted = await emq_api.run("subscription", "delete", "acme", "orders", sub["id"], **as_acme)
    assert deleted.code == 0 and "deleted" in deleted.out
    bad = await emq_api.run("subscription", "create", "acme", "orders", "--url",
                            "https://h.example/", "--type", "a b", **as_acme)  # fmt: skip
    assert "event_types[0]" in _one_line_error(bad)
    nothing = await emq_api.run("subscription", "update", "acme", "orders", sub["id"], **as_acme)
    assert "nothing to change" in _one_line_error(nothing)
