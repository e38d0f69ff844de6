"""``emq api --workers N`` for real: N processes on one port (SO_REUSEPORT) over the test's slice
of the real Redis and ZooKeeper, under the supervisor (``emq.api.supervisor``): both children
take requests, a killed child is restarted, SIGTERM (or the supervisor's death) stops every
child, and bad values or a port in use are one line and a non-zero exit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from emq.api.app import PROCESS_HEADER
from emq.core.settings import Settings
from emq.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"Authorization": "Bearer test-admin-token"}
START_S = 30
JOB = {"url": "https://example.com/hook", "body": {"n": 1}}


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return (
        base
        | {
            "EMQ_REDIS_URL": settings.redis_url,
            "EMQ_ZK_HOSTS": settings.zk_hosts,
            "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
            "EMQ_ADMIN_TOKEN": settings.admin_token,
            "EMQ_API_SHUTDOWN_GRACE_S": "3",
            "EMQ_LOG_LEVEL": "INFO",
        }
        | extra
    )


@dataclass
class Supervised:
    """A running ``emq api --workers N``: its process, its URL and its stderr, line by line."""

    process: asyncio.subprocess.Process
    url: str
    lines: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip())
            self.changed.set()

    async def wait_line(self, pattern: str, unless: Collection[str] = ()) -> re.Match[str]:
        """The first stderr line that matches ``pattern``, its group 1 not in ``unless``."""
        async with asyncio.timeout(START_S):
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found and (not found.groups() or found.group(1) not in unless):
                        return found
                self.changed.clear()
                await self.changed.wait()

    def children(self) -> set[int]:
        """The pids of the supervisor's live children (zombies not counted)."""
        pids = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[1]) == self.process.pid and stat[0] != "Z":
                        pids.add(int(entry))
        return pids


async def _answering_pids(url: str, connections: int = 40) -> set[int]:
    """The pids that answer ``/healthz``, each request on a new connection (the kernel picks a
    listener per connection)."""
    pids = set()
    for _ in range(connections):
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as s, s.get(url + "/healthz") as r:
            assert r.status == 200, await r.text()
            pids.add(int(r.headers[PROCESS_HEADER]))
    return pids


@pytest.fixture
async def supervised(settings: Settings) -> AsyncIterator[Supervised]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emq",
        "api",
        "--workers",
        "2",
        "--port",
        str(port),
        cwd=ROOT,
        env=_env(settings, EMQ_API_URL=f"http://127.0.0.1:{port}"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    api = Supervised(process, f"http://127.0.0.1:{port}")
    reader = asyncio.create_task(api.read_stderr())
    try:
        assert process.stdout is not None
        async with asyncio.timeout(START_S):
            line = (await process.stdout.readline()).decode()
        assert f"emq api listening on http://127.0.0.1:{port} (2 processes)" in line, api.lines
        yield api
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await reader


async def test_two_processes_serve_restart_and_stop(supervised: Supervised) -> None:
    api = supervised
    children = api.children()
    assert len(children) == 2
    assert await _answering_pids(api.url) == children  # the kernel spreads connections

    async with aiohttp.ClientSession(api.url, headers=ADMIN) as s:  # each serves the API
        async with s.post("/v1/tenants", json={"tenant": "acme"}) as r:
            assert r.status == 201, await r.text()
        async with s.post("/v1/tenants/acme/topics", json={"topic": "orders", "qps": 10}) as r:
            assert r.status == 201, await r.text()
        async with s.post("/v1/tenants/acme/topics/orders/jobs", json=JOB) as r:
            assert r.status == 202, await r.text()

    killed = min(children)
    os.kill(killed, signal.SIGKILL)
    await api.wait_line(r"exited unexpectedly \(killed by signal 9\); restarting")
    found = await api.wait_line(
        r"emq api process \d \(pid (\d+)\) listening", {str(pid) for pid in children}
    )
    replacement = int(found.group(1))
    assert api.children() == children - {killed} | {replacement}
    assert replacement in await _answering_pids(api.url)

    api.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(15):
        assert await api.process.wait() == 0, "\n".join(api.lines)
    assert api.children() == set()
    assert not any(_alive(pid) for pid in children | {replacement})


async def test_children_stop_when_the_supervisor_dies(supervised: Supervised) -> None:
    children = supervised.children()
    assert len(children) == 2
    supervised.process.kill()  # no SIGTERM to forward: the children see their lifeline close
    await supervised.process.wait()
    async with asyncio.timeout(15):
        while any(_alive(pid) for pid in children):
            await asyncio.sleep(0.05)  # (no event reports another process's exit to us)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _emq_api(settings: Settings, *args: str, **env: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emq",
        "api",
        *args,
        cwd=ROOT,
        env=_env(settings, **env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(START_S):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (("--workers", "0"), {}, 1, "emq: error: --workers must be from 1 to 64, not 0"),
        (("--workers", "65"), {}, 1, "emq: error: --workers must be from 1 to 64, not 65"),
        (("--workers", "two"), {}, 2, "invalid int value: 'two'"),
        ((), {"EMQ_API_WORKERS": "100"}, 1, "EMQ_API_WORKERS"),
    ],
)
async def test_bad_workers_value_is_one_line(
    settings: Settings, args: tuple[str, ...], env: dict[str, str], code: int, message: str
) -> None:
    status, out, err = await _emq_api(settings, *args, **env)
    assert (status, out) == (code, ""), err
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_port_in_use_is_one_line(settings: Settings, workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, out, err = await _emq_api(
            settings, "--workers", workers, "--port", str(port), EMQ_LOG_LEVEL="WARNING"
        )
    assert (status, out) == (1, ""), err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0] == f"emq: error: cannot listen on 127.0.0.1:{port}: Address already in use"
