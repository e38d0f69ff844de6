"""``emq schedule create|list|show|pause|resume|delete|next`` as subprocesses against a real
``emq api``, whose own firer fires the ticks (issue 28): bad input is one line naming the field."""

from __future__ import annotations

import asyncio

from tests.emq.test_cli_commands import EmqApi, _one_line_error, _tenant, emq_api

__all__ = ["emq_api"]  # the fixture, shared with the other CLI tests


async def test_schedule_commands(emq_api: EmqApi) -> None:
    as_acme = {"EMQ_TOKEN": await _tenant(emq_api)}
    create = ("schedule", "create", "acme", "orders", "--url", "https://example.com/hook")
    bad = await emq_api.run(*create, "--cron", "61 * * * *", **as_acme)
    assert "cron" in _one_line_error(bad)
    made = await emq_api.run(*create, "--id", "beat", "--cron", "* * * * * *", "--timezone",
                             "Europe/Paris", "--header", "X-A: 1", "--json", **as_acme)  # fmt: skip
    assert made.json()["job"]["headers"] == {"X-A": "1"}
    shown: dict[str, object] = {}
    await asyncio.sleep(2)
    for _ in range(60):  # `emq api` fires it (a firer runs in every API process)
        shown = (await emq_api.run("schedule", "show", "acme", "orders", "beat", "--json",
                                   **as_acme)).json()  # fmt: skip
        if shown["fired"]:
            break
        await asyncio.sleep(0.5)
    last = shown["last_tick"]
    assert isinstance(last, dict) and str(last["job_id"]).startswith("msg_"), shown
    nxt = await emq_api.run("schedule", "next", "acme", "orders", "beat", "-n", "3", **as_acme)
    assert nxt.code == 0 and len(nxt.out.splitlines()) == 3
    paused = await emq_api.run("schedule", "pause", "acme", "orders", "beat", **as_acme)
    assert "paused, next -" in paused.out
    deleted = await emq_api.run("schedule", "delete", "acme", "orders", "beat", **as_acme)
    assert deleted.out.strip() == "schedule beat deleted"
