"""The README's walk-throughs work as written: their shell blocks run, in order, in bash.

They run in a scratch directory (with the repository's ``.venv`` linked in) against a stack on
free loopback ports, so a developer's own stack is left alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from emq.stack import free_port

ROOT = Path(__file__).resolve().parent.parent


def walkthrough_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Walk-throughs") : text.index("## Configuration")]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_the_walkthroughs_have_shell_blocks() -> None:
    blocks = walkthrough_blocks()
    assert len(blocks) >= 6
    assert any("emq plan run" in b for b in blocks)


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
