"""``emq fleet workers`` prints the API's view as a table (the JSON form is in the e2e test)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from emq.cli import fleet as fleet_commands
from emq.cli.main import build_parser
from emq.core.settings import Settings

BODY = {
    "namespace": "online",
    "generation": 1732000000123,
    "leader": "w1",
    "assigned_at": 1732000000.1,
    "workers": [
        {
            "id": "w1",
            "host": "h1",
            "pid": 11,
            "weight": 1,
            "started_at": 1.0,
            "leader": True,
            "group_count": 4,
            "groups": [{"group": f"online/acme/t/g{i}", "epoch": 7} for i in range(4)],
            "delivered_per_s": 12.5,
            "topics_per_s": {"online/acme/t": 12.5},
        }
    ],
    "orphans": [{"group": "online/acme/u/g0", "worker": "w9"}],
}


def test_workers_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fake_run(args: argparse.Namespace, settings: Settings, work: Any) -> Any:
        return BODY

    monkeypatch.setattr(fleet_commands, "run", fake_run)
    args = build_parser().parse_args(["fleet", "workers"])
    assert args.func(args, Settings()) == 0
    out = capsys.readouterr().out
    assert "generation 1732000000123  leader w1" in out
    assert "* w1" in out and "online/acme/t/g0@7" in out and "..." in out
    assert "1 group(s) still assigned to departed workers" in out
