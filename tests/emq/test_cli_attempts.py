"""``emq topic set-record``, ``emq job list|attempts`` and ``emq redelivery start|list`` as
subprocesses against a real ``emq api`` (docs/concepts/attempts.md); bad input is one line."""

from __future__ import annotations

import time

from tests.emq.test_cli_commands import EmqApi, _one_line_error, _tenant, emq_api

__all__ = ["emq_api"]  # the fixture, shared with the other CLI tests


async def test_attempt_commands(emq_api: EmqApi) -> None:
    as_acme = {"EMQ_TOKEN": await _tenant(emq_api, qps=100)}
    set_ = await emq_api.admin(
        "topic", "set-record", "acme", "orders", "--keep-delivered-s", "600",
        "--response-excerpt-bytes", "64", "--callback-url", "https://cb.example/done",
    )  # fmt: skip
    assert (set_["keep_delivered_s"], set_["response_excerpt_bytes"]) == (600, 64)
    assert set_["callback_url"] == "https://cb.example/done"
    listed = await emq_api.run("job", "list", "--tenant", "acme", "--topic", "orders", "--state",
                               "dead", "--json", **as_acme)  # fmt: skip
    assert listed.json() == {"jobs": [], "next_cursor": None}
    since = str(time.time() - 60)
    started = await emq_api.run("redelivery", "start", "acme", "orders", "--since", since,
                                "--rate", "5", "--json", **as_acme)  # fmt: skip
    assert started.code == 0, started.err
    assert (started.json()["total"], started.json()["rate"]) == (0, 5)
    old = await emq_api.run("redelivery", "start", "acme", "orders", "--since", "2020-01-01",
                            **as_acme)  # fmt: skip
    assert "retention" in _one_line_error(old)
