"""A live stack for the docs' code blocks: the session's Redis and ZooKeeper (under a key
prefix and a chroot of their own), one ``emq api``, one ``emq worker --standalone`` and a
receiver that answers 200 to any request, all on loopback. The pages' ``emq`` is the fork
server's shim (``emq_shim``, tests/forkserver.py): the console script's code, without its
import time."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from emq.stack import Service, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent  # the venv's: `emq` and `python`
ADMIN_TOKEN = "docs-admin-token"
READY_S = 60


class _Ok(BaseHTTPRequestHandler):
    """200 and an empty body to any request, on a keep-alive connection."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def sink_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def base_env(scratch: Path, sink_url: str, shim: Path) -> dict[str, str]:
    """The environment every page gets, without the stack's addresses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return env | {
        "PATH": f"{shim}:{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(ROOT),
        "EMQ_ADMIN_TOKEN": ADMIN_TOKEN,
        "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
        "EMQ_SINK_URL": sink_url,
        "EMQ_STACK_DIR": str(scratch / ".emq"),
        "EMQ_WORKER_METRICS_PORT": "0",
    }


def own_stack_env(scratch: Path, sink_url: str, shim: Path) -> dict[str, str]:
    """For a page that starts its own stack: addresses where nothing runs yet."""
    return base_env(scratch, sink_url, shim) | {
        "EMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "EMQ_ZK_HOSTS": f"127.0.0.1:{free_port()}",
        "EMQ_API_URL": f"http://127.0.0.1:{free_port()}",
    }


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"emq api exited: {log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"emq api not healthy after {READY_S} s: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def live_stack(
    redis_server: Service,
    zk_server: Service,
    sink_url: str,
    emq_shim: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    """The environment of a page run against the live stack (the API and worker already up)."""
    scratch = tmp_path_factory.mktemp("docs-stack")
    chroot = f"/docs-{uuid.uuid4().hex[:12]}"
    zk = KazooClient(hosts=zk_server.address)
    zk.start(timeout=10)
    zk.ensure_path(chroot)
    env = base_env(scratch, sink_url, emq_shim) | {
        "EMQ_REDIS_URL": f"redis://{redis_server.address}/0",
        "EMQ_REDIS_KEY_PREFIX": chroot.strip("/"),
        "EMQ_ZK_HOSTS": f"{zk_server.address}{chroot}",
        "EMQ_API_URL": f"http://127.0.0.1:{free_port()}",
    }
    procs = []
    try:
        for name, argv in (("api", ["api"]), ("worker", ["worker", "--standalone"])):
            log = scratch / f"{name}.log"
            with log.open("wb") as out:  # the child has its own copy of the descriptor
                proc = subprocess.Popen(
                    [str(BIN / "emq"), *argv],
                    cwd=scratch,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append((log, proc))
        _wait_healthy(env["EMQ_API_URL"], procs[0][1], procs[0][0])
        yield env
    finally:
        for _, proc in procs:
            proc.terminate()
        for _, proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        zk.delete(chroot, recursive=True)
        zk.stop()
        zk.close()
