"""``emq tenant|topic|enqueue|dlq`` as subprocesses against a real ``emq api`` subprocess (over the
test's slice of the real Redis and ZooKeeper), and ``emq api``'s graceful SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from emq.api.enqueue import topic_backlog
from emq.compose import open_config, open_queues
from emq.core.model import Namespace, TopicRef
from emq.core.settings import Settings
from emq.stack import free_port
from tests.emq.support import JOB, dead_letter_everything

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "test-admin-token"
START_TIMEOUT_S = 20
SHUTDOWN_GRACE_S = 5


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


@dataclass
class EmqApi:
    """A running ``emq api`` and a way to run ``emq`` commands against it."""

    process: asyncio.subprocess.Process
    url: str
    log: Path
    emq: Path  # the fork server's ``emq`` (conftest's emq_shim): each command a process of its own

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        return base | {"EMQ_API_URL": self.url, "EMQ_LOG_LEVEL": "WARNING"} | extra

    async def run(self, *args: str, stdin: bytes | None = None, **env: str) -> Result:
        """``emq ARGS`` with EMQ_API_URL set; pass EMQ_ADMIN_TOKEN / EMQ_TOKEN as keywords."""
        proc = await asyncio.create_subprocess_exec(
            self.emq,
            *args,
            cwd=ROOT,
            env=self.env(**env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin), 30)
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def admin(self, *args: str, **env: str) -> Any:
        return (await self.run(*args, "--json", EMQ_ADMIN_TOKEN=ADMIN_TOKEN, **env)).json()


def _tail(log: Path) -> str:
    return log.read_text()[-5000:]


def _server_env(settings: Settings, url: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return base | {
        "EMQ_REDIS_URL": settings.redis_url,
        "EMQ_ZK_HOSTS": settings.zk_hosts,
        "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "EMQ_ADMIN_TOKEN": settings.admin_token,
        "EMQ_API_URL": url,
        "EMQ_API_SHUTDOWN_GRACE_S": str(SHUTDOWN_GRACE_S),
    }


async def _wait_listening(process: asyncio.subprocess.Process, log: Path) -> None:
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_S)
    except TimeoutError:
        line = b""
    if b"emq api listening on" not in line:
        process.kill()
        await process.wait()
        pytest.fail(f"emq api did not start: {line!r}\n{_tail(log)}")


async def _stop(process: asyncio.subprocess.Process, log: Path) -> int:
    """SIGTERM and wait; the exit status."""
    with contextlib.suppress(ProcessLookupError):  # it exited already: its status tells
        process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"emq api did not stop on SIGTERM\n{_tail(log)}")


@pytest.fixture
async def emq_api(settings: Settings, tmp_path: Path, emq_shim: Path) -> AsyncIterator[EmqApi]:
    """``emq api`` on a free port; stopped with SIGTERM at the end, which must exit 0."""
    url = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "api.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            emq_shim / "emq",
            "api",
            cwd=ROOT,
            env=_server_env(settings, url),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        await _wait_listening(process, log)
        async with aiohttp.ClientSession() as session, session.get(url + "/healthz") as r:
            assert r.status == 200, await r.text()
        yield EmqApi(process, url, log, emq_shim / "emq")
    finally:
        code = await _stop(process, log)
    assert code == 0, _tail(log)


async def _tenant(emq: EmqApi, name: str = "acme", qps: int = 300, **flags: str) -> str:
    """Create a tenant with a topic ``orders``; returns the tenant's token."""
    token = (await emq.admin("tenant", "create", name))["token"]
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    await emq.admin("topic", "create", name, "orders", "--qps", str(qps), *extra)
    return str(token)


def _one_line_error(result: Result, code: int = 1) -> str:
    assert result.code == code, (result.code, result.out, result.err)
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


# ------------------------------------------------------------------ happy paths


async def test_admin_commands(emq_api: EmqApi) -> None:
    created = await emq_api.admin("tenant", "create", "acme", "--name", "Acme Corp")
    assert created["name"] == "Acme Corp" and created["token"].startswith("acme.")
    assert [t["tenant"] for t in (await emq_api.admin("tenant", "list"))["tenants"]] == ["acme"]
    topic = await emq_api.admin(
        "topic", "create", "acme", "orders", "--qps", "1000", "--max-attempts", "3",
        "--endpoint-concurrency", "8", "--max-backlog", "5000", "--priority-mode", "weighted",
    )  # fmt: skip
    assert (topic["groups"], topic["retry"]["max_attempts"], topic["max_backlog"]) == (7, 3, 5000)
    assert (topic["endpoint_concurrency"], topic["priority_mode"]) == (8, "weighted")
    sandbox = await emq_api.admin(
        "topic", "create", "acme", "orders", "--qps", "10", "--namespace", "sandbox"
    )
    assert sandbox["namespace"] == "sandbox"
    quota = await emq_api.admin("topic", "set-quota", "acme", "orders", "2000")
    assert (quota["qps"], quota["groups"]) == (2000, 14)
    assert (await emq_api.admin("topic", "pause", "acme", "orders"))["paused"] is True
    assert (await emq_api.admin("topic", "resume", "acme", "orders"))["paused"] is False
    small = await emq_api.admin("topic", "set-quota", "acme", "orders", "20", "--namespace=sandbox")
    assert (small["namespace"], small["qps"]) == ("sandbox", 20)
    readable = await emq_api.run("tenant", "list", EMQ_ADMIN_TOKEN=ADMIN_TOKEN)
    assert readable.code == 0 and "acme" in readable.out and "Acme Corp" in readable.out


async def test_dlq_retention_and_transaction_default_commands(emq_api: EmqApi) -> None:
    token = (await emq_api.admin("tenant", "create", "acme"))["token"]
    create, dlq = ("topic", "create", "acme"), ("--dlq-max-entries=500", "--dlq-max-age-s=3600")
    topic, refunds = await asyncio.gather(
        emq_api.admin(*create, "orders", "--qps", "10", *dlq),
        emq_api.admin(*create, "refunds", "--qps", "10", "--transaction-default", "commit"),
    )
    assert (topic["dlq_max_entries"], topic["dlq_max_age_s"]) == (500, 3600)
    assert (topic["transaction_default"], refunds["transaction_default"]) == ("rollback", "commit")
    changed, decision = await asyncio.gather(
        emq_api.admin("topic", "set-dlq", "acme", "orders", "--max-age-s", "86400"),
        emq_api.admin("topic", "set-transaction-default", "acme", "refunds", "rollback"),
    )
    assert (changed["dlq_max_entries"], changed["dlq_max_age_s"]) == (500, 86400)
    assert decision["transaction_default"] == "rollback"
    set_default = ("topic", "set-transaction-default", "acme")
    bad = await asyncio.gather(
        emq_api.run("topic", "set-dlq", "acme", "orders", EMQ_ADMIN_TOKEN=ADMIN_TOKEN),
        emq_api.run(*set_default, "orders", "maybe"),
        emq_api.run("topic", "create", "acme", "x", "--qps", "1", "--transaction-default", "no"),
        emq_api.run(*set_default, "orders", "commit", EMQ_TOKEN=token),
        emq_api.run(*set_default, "nope", "commit", EMQ_ADMIN_TOKEN=ADMIN_TOKEN),
    )
    assert "give --max-entries and/or --max-age-s" in _one_line_error(bad[0])
    assert "invalid choice: 'maybe'" in _one_line_error(bad[1], code=2)
    assert "invalid choice: 'no'" in _one_line_error(bad[2], code=2)
    assert _one_line_error(bad[3]).startswith("emq: error: unauthorized: ")
    assert _one_line_error(bad[4]).startswith("emq: error: not_found: ")
    shown, refunds_shown, listed = await asyncio.gather(
        emq_api.run("topic", "show", "acme", "orders", EMQ_TOKEN=token),
        emq_api.admin("topic", "show", "acme", "refunds"),
        emq_api.admin("topic", "list", "acme"),
    )
    assert "dlq_retention         500 letters per group, none older than 86400 s (1 d)" in shown.out
    assert "transaction_default   rollback" in shown.out, shown  # as created: nothing changed it
    assert refunds_shown["transaction_default"] == "rollback"  # as set, not as refused
    assert sorted(t["topic"] for t in listed["topics"]) == ["orders", "refunds"]


async def test_tenant_commands_with_the_tenant_token(emq_api: EmqApi, settings: Settings) -> None:
    token = await _tenant(emq_api)
    as_acme = {"EMQ_TOKEN": token}
    shown = (await emq_api.run("topic", "show", "acme", "orders", "--json", **as_acme)).json()
    assert shown["backlog"] == {"high": 0, "medium": 0, "low": 0} and shown["groups"] == 2
    listed = (await emq_api.run("topic", "list", "acme", "--json", **as_acme)).json()
    assert [t["topic"] for t in listed["topics"]] == ["orders"]
    one = await emq_api.run(
        "enqueue", "acme", "orders", "--url", "https://example.com/hook", "--method", "PUT",
        "--header", "X-Trace: 7", "--header", "X-Other: a:b", "--body", "hello",
        "--priority", "high", "--idempotency-key", "once", "--json", **as_acme,
    )  # fmt: skip
    ids = one.json()["ids"]
    again = await emq_api.run(
        "enqueue", "acme", "orders", "--url", "https://example.com/x", "--idempotency-key", "once",
        "--json", **as_acme,
    )  # fmt: skip
    assert again.json() == {"ids": ids, "duplicates": 1}
    body_file = Path(settings.stack_dir).parent / "body.json"
    body_file.write_text('{"n": 2}')
    file_job = await emq_api.run(
        "enqueue", "acme", "orders", "--url", "https://example.com/y", "--body-file",
        str(body_file), "--delay", "60", "--key", "user-1", **as_acme,
    )  # fmt: skip
    assert file_job.code == 0 and file_job.out.startswith("accepted job ")
    shown = (await emq_api.run("topic", "show", "acme", "orders", "--json", **as_acme)).json()
    assert shown["backlog"]["high"] == 1 and shown["delayed"] == 1
    readable = await emq_api.run("topic", "show", "acme", "orders", **as_acme)
    assert "acme/orders" in readable.out and "high 1" in readable.out


async def test_dlq_commands(emq_api: EmqApi, settings: Settings) -> None:
    token = await _tenant(emq_api)
    as_acme = {"EMQ_TOKEN": token}
    jobs = "".join(json.dumps(JOB | {"body": str(i)}) + "\n" for i in range(4))
    sent = await emq_api.run(
        "enqueue", "acme", "orders", "--file", "-", stdin=jobs.encode(), **as_acme
    )
    assert sent.code == 0, sent.err
    queues = await open_queues(settings)
    try:
        assert await dead_letter_everything(queues, "acme", "orders", groups=2) == 4
    finally:
        await queues.aclose()
    page = (
        await emq_api.run("dlq", "list", "acme", "orders", "--limit", "3", "--json", **as_acme)
    ).json()
    assert len(page["dead"]) == 3 and page["next_cursor"]
    rest = await emq_api.run(
        "dlq", "list", "acme", "orders", "--cursor", page["next_cursor"], "--json", **as_acme
    )
    assert len(rest.json()["dead"]) == 1
    readable = await emq_api.run("dlq", "list", "acme", "orders", **as_acme)
    assert "HTTP 500" in readable.out and readable.out.count("\n") == 5  # header + 4 rows
    first = page["dead"][0]["id"]
    replay = await emq_api.run(
        "dlq", "replay", "acme", "orders", "--id", first, "--json", **as_acme
    )
    assert replay.json() == {"replayed": 1}
    rest_of = await emq_api.run(
        "dlq", "replay", "acme", "orders", "--limit", "10", "--json", **as_acme
    )
    assert rest_of.json() == {"replayed": 3}


async def test_enqueue_a_file_of_2500_jobs(emq_api: EmqApi, tmp_path: Path) -> None:
    token = await _tenant(emq_api, qps=1000)
    path = tmp_path / "jobs.jsonl"
    lines = [json.dumps(JOB | {"body": str(i), "priority": "low"}) for i in range(2500)]
    path.write_text("\n".join(lines) + "\n\n")
    result = await emq_api.run(
        "enqueue", "acme", "orders", "--file", str(path), "--json", EMQ_TOKEN=token
    )
    body = result.json()
    assert len(set(body["ids"])) == 2500 and (body["duplicates"], body["failed"]) == (0, 0)
    shown = await emq_api.run("topic", "show", "acme", "orders", "--json", EMQ_TOKEN=token)
    assert shown.json()["backlog"] == {"high": 0, "medium": 0, "low": 2500}


# ------------------------------------------------------------------ bad input


async def test_bad_input_is_one_line_and_changes_nothing(
    emq_api: EmqApi, snapshot: Any, tmp_path: Path
) -> None:
    token = await _tenant(emq_api)
    as_acme = {"EMQ_TOKEN": token}
    bad_file = tmp_path / "jobs.jsonl"
    bad_file.write_text(json.dumps(JOB) + "\n" + json.dumps(JOB) + '\n{"url": "ftp://x/"}\n')
    before = await snapshot()
    cases: list[tuple[tuple[str, ...], Mapping[str, str], str]] = [
        (("topic", "show", "acme", "missing"), as_acme, "emq: error: not_found: "),
        (
            ("enqueue", "acme", "orders", "--url", "ftp://example.com/x"),
            as_acme,
            "emq: error: invalid: scheme must be http or https, got 'ftp' (field: url)",
        ),
        (
            ("topic", "set-quota", "acme", "orders", "-1"),
            {"EMQ_ADMIN_TOKEN": ADMIN_TOKEN},
            "emq: error: invalid: must be an integer between 1 and 1000000, got -1 (field: qps)",
        ),
        (("tenant", "list"), {}, "emq: error: unauthorized: missing bearer token"),
        (("topic", "show", "acme", "orders"), {}, "emq: error: unauthorized: "),
        (("topic", "pause", "acme", "orders", "--token", token), {}, "emq: error: forbidden: "),
        (("topic", "pause", "acme", "orders"), as_acme, "emq: error: unauthorized: "),
        (("tenant", "create", "acme"), {"EMQ_ADMIN_TOKEN": ADMIN_TOKEN}, "emq: error: conflict: "),
        (
            ("enqueue", "acme", "orders", "--file", str(bad_file)),
            as_acme,
            "emq: error: invalid: scheme must be http or https, got 'ftp' (field: line 3.url)",
        ),
        (
            ("enqueue", "acme", "orders", "--file", str(tmp_path / "nope")),
            as_acme,
            "(field: --file)",
        ),
    ]
    results = await asyncio.gather(*(emq_api.run(*args, **env) for args, env, _ in cases))
    for (args, _, expected), result in zip(cases, results, strict=True):
        line = _one_line_error(result)
        assert expected in line and line.startswith("emq: error: "), (args, line)
    assert await snapshot() == before, "a rejected command changed stored data"


async def test_usage_errors_exit_2_with_one_line(emq_api: EmqApi) -> None:
    usage = [
        ("topic", "create", "acme", "orders"),  # no --qps
        ("topic", "set-quota", "acme", "orders", "many"),
        ("enqueue", "acme", "orders"),  # neither --url nor --file
        ("enqueue", "acme", "orders", "--url", "https://x/", "--header", "no-colon"),
        ("enqueue", "acme", "orders", "--file", "-", "--priority", "high"),
        ("topic", "create", "acme", "orders", "--qps", "5", "--priority-mode", "random"),
    ]
    results = await asyncio.gather(*(emq_api.run(*args) for args in usage))
    for args, result in zip(usage, results, strict=True):
        assert _one_line_error(result, code=2).startswith("emq "), args
    helps = await asyncio.gather(
        *(
            emq_api.run(*cmd, "--help")
            for cmd in (("enqueue",), ("topic", "create"), ("dlq", "replay"))
        )
    )
    assert all(h.code == 0 and "usage: emq" in h.out for h in helps)


# ------------------------------------------------------------------ graceful stop


async def _flood(url: str, body: bytes, statuses: list[int], in_flight: list[int]) -> None:
    """POST the batch again and again until the server goes away."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        while True:
            in_flight[0] += 1
            try:
                async with session.post(url, data=io.BytesIO(body), headers=headers) as r:
                    await r.read()
                    statuses.append(r.status)
            except aiohttp.ClientError:
                return
            finally:
                in_flight[0] -= 1


async def test_api_sigterm_finishes_in_flight_batches(emq_api: EmqApi, settings: Settings) -> None:
    await _tenant(emq_api, qps=1000)
    jobs = [JOB | {"body": "x" * 4096} for _ in range(1000)]
    body = json.dumps({"jobs": jobs}).encode()
    url = emq_api.url + "/v1/tenants/acme/topics/orders/jobs"
    statuses: list[int] = []
    in_flight = [0]
    floods = [asyncio.create_task(_flood(url, body, statuses, in_flight)) for _ in range(2)]
    for _ in range(2000):
        if len(statuses) >= 2 and in_flight[0] > 0:
            break
        await asyncio.sleep(0.005)
    emq_api.process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(asyncio.gather(*floods), 30)
    assert await asyncio.wait_for(emq_api.process.wait(), 30) == 0, _tail(emq_api.log)
    assert statuses and set(statuses) == {202}, statuses
    backlog = await _topic_info(settings)
    assert backlog["backlog"] == {"high": 0, "medium": 1000 * len(statuses), "low": 0}


async def _topic_info(settings: Settings) -> dict[str, Any]:
    config = await open_config(settings)
    queues = await open_queues(settings)
    try:
        topic = await config.get_topic(TopicRef(Namespace.ONLINE, "acme", "orders"))
        return await topic_backlog(queues, topic)
    finally:
        await queues.aclose()
        await config.aclose()


async def test_api_sigterm_waits_for_a_body_still_uploading(
    emq_api: EmqApi, settings: Settings
) -> None:
    await _tenant(emq_api, qps=1000)
    body = json.dumps({"jobs": [JOB | {"body": "x" * 4096}] * 1000}).encode()
    port = int(emq_api.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /v1/tenants/acme/topics/orders/jobs HTTP/1.1\r\nHost: emq\r\n"
        f"Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    await asyncio.sleep(0.3)  # the handler is now reading the body
    emq_api.process.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    writer.write(body[len(body) // 2 :])
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), SHUTDOWN_GRACE_S + 10)
    writer.close()
    assert await asyncio.wait_for(emq_api.process.wait(), 30) == 0
    assert status_line.startswith(b"HTTP/1.1 202"), status_line
    assert (await _topic_info(settings))["backlog"]["medium"] == 1000
