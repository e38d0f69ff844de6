"""Settings declared once: every ``EMQ_*`` the code names is a declared setting, the docs give
each a meaning, a bad value is one line naming its variable (or config-file key), and
``emq config show`` prints every setting with its source and no secret."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emq.cli.config import sections
from emq.core.settings import declared_env, mask_url, prefix_of

ROOT = Path(__file__).resolve().parent.parent.parent
CODE = ("emq", "worker", "adapters", "allocator", "capacity", "spark", "deploy")
EMQ_NAME = re.compile(r"\bEMQ_[A-Z0-9_]+")
# Names in the code that are not settings, each with its reason.
NOT_SETTINGS: dict[str, str] = {}
DECLARED = declared_env(sections().values())
PREFIXES = {prefix_of(cls) for cls in sections().values()}
SECRETS = {
    "EMQ_TOKEN": "tenant-tok-s3cret",
    "EMQ_ADMIN_TOKEN": "admin-tok-s3cret",
    "EMQ_REDIS_URL": "redis://app:redis-pw-s3cret@127.0.0.1:6390/0",
    "EMQ_ZK_AUTH": "emq:zk-pw-s3cret",
    "EMQ_ZK_PREVIOUS_AUTH": "emq:zk-old-s3cret",
}


def emq(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emq", *argv],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_emq_name_in_the_code_is_a_declared_setting() -> None:
    named: dict[str, set[str]] = {}
    for package in CODE:
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                text = path.read_text(encoding="utf-8", errors="replace")
                for name in EMQ_NAME.findall(text):
                    named.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert {"EMQ_WORKER_SENDERS", "EMQ_ZK_JAR"} <= set(named)  # the scan sees code and deploy/
    undeclared = {
        name: sorted(where)
        for name, where in named.items()
        if name not in DECLARED and name not in NOT_SETTINGS and name not in PREFIXES
    }
    assert not undeclared


def test_the_docs_give_every_setting_a_meaning() -> None:
    """The configuration reference is generated from the declarations (docs/hooks/emq_docs.py);
    the one thing written by hand is each setting's meaning, and there is one for each."""
    meanings = yaml.safe_load((ROOT / "docs/data/settings.yml").read_text(encoding="utf-8"))
    assert set(meanings) == DECLARED
    assert all(isinstance(text, str) and text.strip() for text in meanings.values())


def test_config_show_lists_every_setting_and_no_secret(tmp_path: Path) -> None:
    f = tmp_path / "emq.toml"
    f.write_text('namespace = "sandbox"\n[worker]\nsenders = 300\nmax_in_flight = 400\n')
    env = SECRETS | {"EMQ_API_URL": "https://u:url-pw-s3cret@api.example:8443"}
    shown = emq("--config", str(f), "config", "show", "--json", **env)
    text = emq("--config", str(f), "config", "show", **env)
    for done in (shown, text):
        assert done.returncode == 0, done.stderr
        assert "s3cret" not in done.stdout + done.stderr
    doc = json.loads(shown.stdout)
    assert set(doc) == DECLARED
    assert all(var in text.stdout for var in DECLARED)
    assert doc["EMQ_REDIS_URL"]["value"] == "redis://app:***@127.0.0.1:6390/0"
    assert doc["EMQ_API_URL"]["value"] == "https://u:***@api.example:8443"
    for var in ("EMQ_TOKEN", "EMQ_ADMIN_TOKEN", "EMQ_ZK_AUTH", "EMQ_ZK_PREVIOUS_AUTH"):
        assert doc[var] == {
            "section": "core",
            "key": var[4:].lower(),
            "value": "***",
            "source": "env",
        }
    assert doc["EMQ_NAMESPACE"]["source"] == f"config file {f}"
    assert doc["EMQ_WORKER_SENDERS"] == {
        "section": "worker",
        "key": "senders",
        "value": 300,
        "source": f"config file {f} [worker]",
    }
    assert doc["EMQ_FLEET_WEIGHT"]["source"] == "default"
    assert doc["EMQ_CONFIG"] == {
        "section": "files",
        "key": "",
        "value": str(f),
        "source": "--config",
    }


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("EMQ_WORKER_SENDERS", "x", "EMQ_WORKER_SENDERS: must be an integer, got 'x'"),
        ("EMQ_WORKER_SENDERS", "0", "EMQ_WORKER_SENDERS: must be at least 1, got 0"),
        ("EMQ_WORKER_BUFFER_SECONDS", "0", "EMQ_WORKER_BUFFER_SECONDS: must be greater than 0"),
        ("EMQ_WORKER_METRICS_PORT", "70000", "EMQ_WORKER_METRICS_PORT: must be 'auto' or a port"),
        ("EMQ_WORKER_TICK_S", "2", "EMQ_WORKER_TICK_S: must be from 0.0001 to 1, got 2.0"),
        ("EMQ_API_MAX_CONNECTIONS", "-1", "EMQ_API_MAX_CONNECTIONS: must be at least 1, got -1"),
        ("EMQ_FLEET_WEIGHT", "1.5", "EMQ_FLEET_WEIGHT: must be an integer, got '1.5'"),
        ("EMQ_FLEET_BALANCE", "0.9", "EMQ_FLEET_BALANCE: must be at least 1.0, got 0.9"),
        ("EMQ_DURABILITY", "always", "EMQ_DURABILITY: must be one of default, fsync, replica"),
        ("EMQ_REDIS_CLUSTER", "maybe", "EMQ_REDIS_CLUSTER: must be true or false, got 'maybe'"),
        ("EMQ_ZK_ROOT", "emq", "EMQ_ZK_ROOT: must be an absolute ZooKeeper path"),
        ("EMQ_CLIENT_RETRY_S", "-1", "EMQ_CLIENT_RETRY_S: must be at least 0, got -1.0"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(var: str, value: str, expected: str) -> None:
    done = emq("config", "show", **{var: value})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(f"emq: error: {expected}")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("var", "value"),
    [("EMQ_ZK_AUTH", "no-colon-s3cret"), ("EMQ_ADMIN_TOKEN", "two words-s3cret")],
)
def test_a_bad_secret_is_named_but_not_shown(var: str, value: str) -> None:
    done = emq("config", "show", **{var: value})
    assert done.returncode == 1
    assert done.stderr.startswith(f"emq: error: {var}: must be")
    assert "s3cret" not in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[worker]\nsenders = 0\n", " [worker]: senders: must be at least 1, got 0"),
        ("[fleet]\nvnodes = 'many'\n", " [fleet]: vnodes: must be an integer, got 'many'"),
        (
            "[api]\nbody_timeout_s = -2\n",
            " [api]: body_timeout_s: must be greater than 0, got -2.0",
        ),
        ("max_group_qps = 0\n", ": max_group_qps: must be at least 1, got 0"),
        ("api = 3\n", ": api must be a table ([api])"),
        ("[worker]\nsendrs = 3\n", " [worker]: unknown key 'sendrs'"),
    ],
)
def test_a_bad_config_file_key_is_one_line_naming_it(
    tmp_path: Path, text: str, expected: str
) -> None:
    f = tmp_path / "emq.toml"
    f.write_text(text)
    done = emq("--config", str(f), "config", "show")
    assert done.returncode == 1
    assert done.stderr == f"emq: error: config file {f}{expected}\n"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:pw@host", "redis://user:***@host"),
        ("rediss://user:p%40ss@h:1/2?x=1", "rediss://user:***@h:1/2?x=1"),
        ("redis://user@host", "redis://user@host"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("a:b@c", "a:b@c"),
        ("", ""),
    ],
)
def test_url_passwords_are_masked(url: str, masked: str) -> None:
    assert mask_url(url) == masked
