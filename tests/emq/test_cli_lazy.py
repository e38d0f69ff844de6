"""``emq --help`` imports none of the heavy libraries: they load only when a command runs.

Checked in fresh interpreters with ``-X importtime`` (every module imported is named on
stderr), so the check is about what loads, not how long it takes on a busy machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
HEAVY = frozenset(
    {"aiohttp", "kazoo", "redis", "pyspark", "uvloop", "rich", "prometheus_client", "asyncio"}
)


def _imported(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "emq", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: emq" in done.stdout
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("import time:")]
    assert lines, done.stderr[-2000:]
    return {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in lines}


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("topic", "--help"), ("enqueue", "--help"), ("zk", "secure", "--help")],
)
def test_help_imports_no_heavy_library(argv: tuple[str, ...]) -> None:
    loaded = _imported(*argv)
    assert "emq" in loaded  # the check sees our own modules, so it would see theirs
    assert not loaded & HEAVY


def test_building_the_parser_imports_no_heavy_library() -> None:
    script = (
        "import sys; from emq.cli.main import build_parser; build_parser(); "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = set(done.stdout.split())
    assert "emq" in loaded and not loaded & HEAVY
