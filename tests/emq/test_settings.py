from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from emq.core.errors import ConfigError
from emq.core.model import Namespace
from emq.core.settings import Settings, load, read_toml, unknown_env


def test_defaults_point_at_the_local_stack() -> None:
    s = load(Settings, {}, None)
    assert s.redis_url == "redis://127.0.0.1:6390/0"
    assert s.zk_hosts == "127.0.0.1:2191"
    assert s.namespace is Namespace.ONLINE
    assert s.api_url == "http://127.0.0.1:8080"
    assert s.max_group_qps == 150
    assert s.push_allow_cidrs == ()


def test_environment_is_parsed_by_type() -> None:
    s = load(
        Settings,
        {
            "EMQ_NAMESPACE": "sandbox",
            "EMQ_MAX_GROUP_QPS": "200",
            "EMQ_ZK_SESSION_TIMEOUT_S": "4.5",
            "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8, ::1/128,",
            "EMQ_ZK_HOSTS": "a:1,b:2/chroot",
        },
    )
    assert s.namespace is Namespace.SANDBOX
    assert s.max_group_qps == 200
    assert s.zk_session_timeout_s == 4.5
    assert s.push_allow_cidrs == (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    )
    assert s.zk_hosts == "a:1,b:2/chroot"


def test_env_wins_over_toml(tmp_path: Path) -> None:
    f = tmp_path / "emq.toml"
    f.write_text('namespace = "sandbox"\nmax_group_qps = 100\npush_allow_cidrs = ["10.0.0.0/8"]\n')
    s = load(Settings, {"EMQ_MAX_GROUP_QPS": "120"}, read_toml(f))
    assert s.namespace is Namespace.SANDBOX
    assert s.max_group_qps == 120
    assert s.push_allow_cidrs == (ipaddress.ip_network("10.0.0.0/8"),)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"EMQ_MAX_GROUP_QPS": "lots"}, "EMQ_MAX_GROUP_QPS"),
        ({"EMQ_MAX_GROUP_QPS": "0"}, "EMQ_MAX_GROUP_QPS"),
        ({"EMQ_NAMESPACE": "prod"}, "EMQ_NAMESPACE"),
        ({"EMQ_REDIS_URL": "http://x"}, "EMQ_REDIS_URL"),
        ({"EMQ_ZK_HOSTS": "no-port"}, "EMQ_ZK_HOSTS"),
        ({"EMQ_API_URL": "localhost:8080"}, "EMQ_API_URL"),
        ({"EMQ_PUSH_ALLOW_CIDRS": "10.0.0.0/33"}, "EMQ_PUSH_ALLOW_CIDRS"),
        ({"EMQ_ZK_SESSION_TIMEOUT_S": "-1"}, "EMQ_ZK_SESSION_TIMEOUT_S"),
        ({"EMQ_LOG_LEVEL": "LOUD"}, "EMQ_LOG_LEVEL"),
        ({"EMQ_REDIS_KEY_PREFIX": "a{b}"}, "EMQ_REDIS_KEY_PREFIX"),
    ],
)
def test_bad_env_value_is_one_line_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(Settings, env)
    message = str(info.value)
    assert message.startswith(named)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("max_group_qps = true\n", "max_group_qps"),
        ('max_group_qps = "x"\n', "max_group_qps"),
        ("redis_url = 5\n", "redis_url"),
        ("push_allow_cidrs = '10.0.0.0/8'\n", "push_allow_cidrs"),
        ("redis_ulr = 'redis://x'\n", "redis_ulr"),
    ],
)
def test_bad_toml_names_the_key(tmp_path: Path, text: str, named: str) -> None:
    f = tmp_path / "emq.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load(Settings, {}, read_toml(f), source=f"config file {f}")


def test_unreadable_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        read_toml(bad)


def test_unknown_emq_variables_are_reported() -> None:
    env = {"EMQ_REDIS_ULR": "x", "EMQ_REDIS_URL": "redis://a", "EMQ_CONFIG": "f", "HOME": "/"}
    assert unknown_env(env, [Settings]) == ["EMQ_REDIS_ULR"]


def test_admin_token_is_not_in_the_repr() -> None:
    s = load(Settings, {"EMQ_ADMIN_TOKEN": "s3cret"})
    assert s.admin_token == "s3cret"
    assert "s3cret" not in repr(s)
