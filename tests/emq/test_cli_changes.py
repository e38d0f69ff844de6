"""``emq changes``: the pure parts (``--since``, how a change reads) and the refusals made before
any request (the end-to-end run is ``tests/api/test_changes_api.py``)."""

from __future__ import annotations

import pytest

from emq.cli.changes import since_epoch, what
from emq.cli.common import CommandFailed
from emq.cli.main import main

NOW = 1_764_388_800.0


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("90m", NOW - 5400),
        ("2h", NOW - 7200),
        ("7d", NOW - 7 * 86_400),
        ("1764300000.5", 1_764_300_000.5),
        ("2025-11-29", 1_764_374_400.0),
        ("2025-11-29T01:00:00+01:00", 1_764_374_400.0),
    ],
)
def test_since_takes_ago_epoch_or_iso(text: str, epoch: float) -> None:
    assert since_epoch(text, NOW) == epoch


def test_a_bad_since_is_one_error_naming_the_flag() -> None:
    with pytest.raises(CommandFailed, match="--since") as caught:
        since_epoch("last tuesday", NOW)
    assert "\n" not in str(caught.value)


def test_a_change_reads_as_before_and_after() -> None:
    base = {"namespace": "online", "tenant": "acme", "topic": "orders"}
    quota = base | {"before": {"qps": 100, "groups": 1}, "after": {"qps": 300, "groups": 2}}
    assert what(quota) == "qps 100 -> 300, groups 1 -> 2"
    cap = base | {"topic": None, "before": {"qps_cap": None}, "after": {"qps_cap": 500}}
    assert what(cap) == "qps_cap none -> 500"
    created = base | {"before": {}, "after": {"qps": 100, "groups": 1}}
    assert what(created) == "created: qps 100, groups 1"


def test_revert_without_yes_and_without_a_terminal_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMQ_API_URL", "http://127.0.0.1:9")  # never reached
    assert main(["changes", "revert", "1-0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --yes" in err
