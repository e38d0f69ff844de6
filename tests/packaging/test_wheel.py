"""EMQ installs like a Python package: the sdist and the wheel are built and checked, and the wheel,
installed into a clean virtualenv in a directory that holds no checkout, runs the local stack and
the demo (``emq stack up``, ``emq demo``, ``emq stack down``) with nothing from this repository.

The demo starts ``emq api`` and ``emq worker`` processes from the installed package, so they are
exercised too. The wheel is installed without the ``spark`` extra: the demo says the capacity plan
needs it instead of failing.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

import emq
from emq.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO_S = 6


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_env(tmp: Path) -> dict[str, str]:
    """No EMQ_* setting and no PYTHONPATH of the caller's: only what the installed wheel brings."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("EMQ_") and k != "PYTHONPATH"
    }
    return env | {
        "EMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "EMQ_ZK_HOSTS": f"127.0.0.1:{free_port()}",
        "EMQ_API_URL": f"http://127.0.0.1:{free_port()}",
        "EMQ_STACK_DIR": str(tmp / "stack"),
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        ROOT, dict(os.environ), timeout=300)
    return out


def test_the_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{emq.__version__}]" in changelog, "CHANGELOG.md has no entry for this version"


def test_the_sdist_and_wheel_pass_twine_check(dist: Path) -> None:
    sdist = list(dist.glob("emq-*.tar.gz"))
    wheel = list(dist.glob("emq-*-py3-none-any.whl"))
    assert len(sdist) == 1 and len(wheel) == 1
    assert f"emq-{emq.__version__}" in wheel[0].name
    out = run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sdist + wheel)],
              ROOT, dict(os.environ), timeout=120)
    assert out.count("PASSED") == 2


@pytest.mark.timeout(900)
def test_the_wheel_runs_the_stack_and_the_demo_outside_a_checkout(
    dist: Path, tmp_path: Path
) -> None:
    env_dir, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    venv.create(env_dir)  # without pip of its own: this pip installs into it (--python)
    python, cli = env_dir / "bin" / "python", env_dir / "bin" / "emq"
    wheel = next(dist.glob("emq-*.whl"))
    env = clean_env(tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    run([*pip, "install", "--quiet", "--no-compile", str(wheel)], work, env, timeout=600)

    where = run([str(python), "-c", "import emq, emq.stack; print(emq.stack.SCRIPTS_DIR)"],
                work, env, timeout=60).strip()
    assert where.startswith(str(env_dir)), f"emq imported from {where}, not the clean venv"
    assert run([str(cli), "--version"], work, env, timeout=60).strip() == f"emq {emq.__version__}"

    run([str(cli), "stack", "up"], work, env, timeout=120)
    try:
        out = run([str(cli), "demo", "--duration", str(DEMO_S), "--json"], work, env, timeout=600)
    finally:
        down = run([str(cli), "stack", "down"], work, env, timeout=120)
    assert down.count("stopped") == 2, down
    summary = json.loads(out)
    topics = summary["topics"]
    assert topics, summary
    assert {t["hanging_endpoint"] for t in topics} == {False, True}
    for topic in topics:
        # Healthy endpoints get their jobs; the one that hangs gets none marked delivered.
        assert (topic["mean_delivered_per_s"] > 0) != topic["hanging_endpoint"], topic
        # The quota holds in every wall-clock second (+1 per group of slack).
        slack = math.ceil(topic["quota"] / 150)
        assert topic["max_delivered_in_1s"] <= topic["quota"] + slack, topic
    no_spark = "the capacity plan needs PySpark: pip install 'emq[spark]'"
    assert summary["plan"] == {"skipped": no_spark}
    status = run([str(cli), "stack", "status", "--json"], work, env, timeout=60)
    assert not any(s["running"] for s in json.loads(status).values()), status
