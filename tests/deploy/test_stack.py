"""``emq stack up|down|status`` and the CLI's front door, run as a user would (subprocesses)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kazoo.client import KazooClient

from emq.stack import _ephemeral_range, free_port


def emq(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emq", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {
        "EMQ_STACK_DIR": str(tmp_path / "stack"),
        "EMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "EMQ_ZK_HOSTS": f"127.0.0.1:{free_port()}",
    }
    yield env
    emq("stack", "down", env=env)


def test_up_twice_status_and_down(stack_env: dict[str, str]) -> None:
    up = emq("stack", "up", "--json", env=stack_env)
    assert up.returncode == 0, up.stderr
    first = json.loads(up.stdout)
    assert first["redis"]["running"] and first["zookeeper"]["running"]

    again = emq("stack", "up", "--json", env=stack_env)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["redis"]["pid"] == first["redis"]["pid"]
    assert second["zookeeper"]["pid"] == first["zookeeper"]["pid"]

    status = emq("stack", "status", env=stack_env)
    assert status.returncode == 0
    redis_port = stack_env["EMQ_REDIS_URL"].rsplit(":", 1)[1].split("/")[0]
    assert f"127.0.0.1:{redis_port}" in status.stdout
    assert status.stdout.count("running") == 2

    client = redis.Redis.from_url(stack_env["EMQ_REDIS_URL"])
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    assert Path(client.config_get("dir")["dir"]).is_relative_to(stack_env["EMQ_STACK_DIR"])
    client.close()
    zk = KazooClient(hosts=stack_env["EMQ_ZK_HOSTS"])
    zk.start(timeout=10)
    zk.ensure_path("/emq/probe")
    assert zk.exists("/emq/probe")
    zk.stop()
    zk.close()

    down = emq("stack", "down", "--json", env=stack_env)
    assert down.returncode == 0, down.stderr
    stopped = json.loads(down.stdout)
    assert not stopped["redis"]["running"] and not stopped["zookeeper"]["running"]
    assert "stopped" in emq("stack", "status", env=stack_env).stdout


def test_data_survives_a_restart_through_aof(stack_env: dict[str, str]) -> None:
    assert emq("stack", "up", env=stack_env).returncode == 0
    client = redis.Redis.from_url(stack_env["EMQ_REDIS_URL"])
    client.xadd("emq:probe", {"n": "1"})
    client.close()
    assert emq("stack", "down", env=stack_env).returncode == 0
    assert emq("stack", "up", env=stack_env).returncode == 0
    client = redis.Redis.from_url(stack_env["EMQ_REDIS_URL"])
    assert client.xlen("emq:probe") == 1
    client.close()


def test_missing_redis_binary_is_one_clear_line(stack_env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    assert bash
    (bin_dir / "bash").symlink_to(bash)
    done = emq("stack", "up", env=stack_env | {"PATH": str(bin_dir)})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "redis-server not found" in lines[0] and "apt-get install -y redis-server" in lines[0]


def test_missing_zookeeper_is_one_clear_line(stack_env: dict[str, str]) -> None:
    done = emq("stack", "up", env=stack_env | {"EMQ_ZK_JAR": "/nonexistent/zookeeper.jar"})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "zookeeper not found" in lines[0] and "apt-get install -y zookeeper" in lines[0]


def test_stack_refuses_a_remote_redis(stack_env: dict[str, str]) -> None:
    done = emq("stack", "up", env=stack_env | {"EMQ_REDIS_URL": "redis://10.1.2.3:6379/0"})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "emq: error: EMQ_REDIS_URL points at 10.1.2.3: the local stack runs on loopback only"
    )
    assert "stopped" in emq("stack", "status", env=stack_env).stdout


def test_help_lists_the_commands(stack_env: dict[str, str]) -> None:
    done = emq("--help", env=stack_env)
    assert done.returncode == 0
    assert "stack" in done.stdout and "EMQ_" in done.stdout
    sub = emq("stack", "--help", env=stack_env)
    assert sub.returncode == 0 and "up" in sub.stdout and "6390" in sub.stdout


@pytest.mark.parametrize(
    ("args", "extra_env", "expected"),
    [
        (["stack", "sideways"], {}, "invalid choice: 'sideways'"),
        (["frobnicate"], {}, "invalid choice: 'frobnicate'"),
        (["stack", "status"], {"EMQ_MAX_GROUP_QPS": "many"}, "EMQ_MAX_GROUP_QPS"),
        (["stack", "status"], {"EMQ_REDIS_ULR": "redis://x"}, "unknown setting EMQ_REDIS_ULR"),
        (["--config", "/nonexistent.toml", "stack", "status"], {}, "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    stack_env: dict[str, str], args: list[str], extra_env: dict[str, str], expected: str
) -> None:
    done = emq(*args, env=stack_env | extra_env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert expected in lines[0]
    assert done.stdout == ""


def test_config_show_reports_effective_settings(stack_env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "emq.toml"
    f.write_text('namespace = "sandbox"\nadmin_token = "hunter2"\n')
    done = emq("--config", str(f), "config", "show", "--json", env=stack_env)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["EMQ_NAMESPACE"] == {
        "section": "core",
        "key": "namespace",
        "value": "sandbox",
        "source": f"config file {f}",
    }
    assert shown["EMQ_ADMIN_TOKEN"]["value"] == "***"
    assert "hunter2" not in done.stdout
    assert shown["EMQ_REDIS_URL"]["value"] == stack_env["EMQ_REDIS_URL"]
    assert shown["EMQ_REDIS_URL"]["source"] == "env"


def test_free_port_is_bindable_and_outside_the_range_outgoing_connections_draw_from() -> None:
    """CI once saw ``emq api`` fail with "Address already in use" on a port from ``free_port``:
    a port of the ephemeral range can be taken by any client's connect before the server binds.
    """
    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(port < low for port in ports), sorted(ports)
    assert len(ports) > 40  # drawn at random, not one port handed out again and again
    for port in list(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()
