"""The README's walk-throughs work as written: their shell blocks run, in order, in bash, and
each of its Python blocks runs verbatim as a file.

The shell blocks run in a scratch directory (with the repository's ``.venv`` linked in) against a
stack on free loopback ports, so a developer's own stack is left alone. The Python blocks run
against a live API (real Redis and ZooKeeper, loopback) with the environment the shell
walk-through sets up (``EMQ_API_URL``, ``EMQ_TOKEN``, tenant ``acme`` with topic ``orders``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emq.client import Client
from emq.stack import free_port
from tests.api.conftest import Api, api  # noqa: F401  (the live API fixture)

ROOT = Path(__file__).resolve().parent.parent


def walkthrough_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Walk-throughs") : text.index("## Configuration")]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_the_walkthroughs_have_shell_blocks() -> None:
    blocks = walkthrough_blocks()
    assert len(blocks) >= 6
    assert any("emq plan run" in b for b in blocks)


# The walk-throughs start a stack, the API, a worker and a Spark job: about a minute alone,
# more beside other tests; the script's own timeout (600 s) is the bound, not pytest's 120 s.
@pytest.mark.timeout(600)
def test_the_walkthroughs_run_as_written(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    script = "set -euo pipefail\n" + "\n".join(walkthrough_blocks())
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
        "EMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "EMQ_ZK_HOSTS": f"127.0.0.1:{free_port()}",
        "EMQ_API_URL": f"http://127.0.0.1:{free_port()}",
        "EMQ_WORKER_METRICS_PORT": "0",
    }
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        subprocess.run(
            [str(ROOT / ".venv/bin/emq"), "stack", "down"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in tmp_path.glob("*.log"))
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}{logs}"
    assert json.loads((tmp_path / "acme.json").read_text())["token"].startswith("acme.")
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan
    assert (tmp_path / "plan" / "report.html").is_file()


async def test_the_python_examples_run_as_files(api: Api, tmp_path: Path) -> None:  # noqa: F811
    """Each ```python block, written to a file and run with this interpreter, exits 0; the
    producer example stores its 10 000 jobs (the topic's backlog, read through the API)."""
    blocks = python_blocks()
    assert any("await producer.send(" in b and "asyncio.run(main())" in b for b in blocks)
    token = (await api.tenant("acme"))["Authorization"].removeprefix("Bearer ")
    await api.topic("acme", "orders", 1000)
    url = str(api.client.make_url("/")).rstrip("/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {"EMQ_API_URL": url, "EMQ_TOKEN": token, "PYTHONPATH": str(ROOT)}
    for i, block in enumerate(blocks):
        path = tmp_path / f"readme_{i}.py"
        path.write_text(block)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(path),
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, f"block {i}:\n{block}\n{err.decode()[-3000:]}"
        assert out.decode().startswith("accepted 10000 jobs in "), out
    async with Client(url, token) as acme:
        shown = await acme.get_topic("acme", "orders")
    assert sum(shown["backlog"].values()) == 10_000 * len(blocks)
