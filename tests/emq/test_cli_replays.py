"""``emq dlq replay --rate|--paced``, ``emq dlq replays``, ``emq dlq cancel`` as subprocesses
against a real ``emq api`` (issue 16, item 4): start, show, list, cancel; bad input is one line."""

from __future__ import annotations

import json

from emq.compose import open_queues
from emq.core.settings import Settings
from tests.emq.support import JOB, dead_letter_everything
from tests.emq.test_cli_commands import EmqApi, _one_line_error, _tenant, emq_api

__all__ = ["emq_api"]  # the fixture, shared with the other CLI tests


async def test_paced_replay_commands(emq_api: EmqApi, settings: Settings) -> None:
    as_acme = {"EMQ_TOKEN": await _tenant(emq_api, qps=300)}  # two groups
    jobs = "".join(json.dumps(JOB | {"body": str(i)}) + "\n" for i in range(6))
    sent = await emq_api.run("enqueue", "acme", "orders", "--file", "-", stdin=jobs.encode(),
                             **as_acme)  # fmt: skip
    assert sent.code == 0, sent.err
    queues = await open_queues(settings)
    try:
        assert await dead_letter_everything(queues, "acme", "orders", groups=2) == 6
    finally:
        await queues.aclose()
    started = await emq_api.run("dlq", "replay", "acme", "orders", "--paced", **as_acme)
    assert started.code == 0 and "6 dead letters moved back at 15/s" in started.out, started
    replay_id = started.out.split()[1]
    one = await emq_api.run("dlq", "replays", "acme", "orders", "--id", replay_id, "--json",
                            **as_acme)  # fmt: skip
    assert (one.json()["state"], one.json()["total"], one.json()["rate"]) == ("running", 6, 15)
    second = await emq_api.run(
        "dlq",
        "replay",
        "acme",
        "orders",
        "--rate",
        "2",
        "--since",
        "2023-01-01",
        "--json",
        **as_acme,
    )
    assert second.json()["mode"] == "window" and second.json()["rate"] == 2
    listed = await emq_api.run("dlq", "replays", "acme", "orders", **as_acme)
    assert listed.out.count("\n") == 3 and replay_id in listed.out  # header + 2 rows
    cancelled = await emq_api.run("dlq", "cancel", "acme", "orders", replay_id, **as_acme)
    assert cancelled.code == 0 and f"replay {replay_id}: cancelled" in cancelled.out
    bad = await emq_api.run("dlq", "replay", "acme", "orders", "--rate", "0", **as_acme)
    assert "rate" in _one_line_error(bad)
    both = await emq_api.run("dlq", "replay", "acme", "orders", "--paced", "--limit", "3",
                             **as_acme)  # fmt: skip
    assert "--limit" in _one_line_error(both)
    unknown = await emq_api.run("dlq", "cancel", "acme", "orders", "rpl_" + "0" * 20, **as_acme)
    assert "not_found" in _one_line_error(unknown)
