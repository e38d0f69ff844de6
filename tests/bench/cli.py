"""``emq bench`` run as a user runs it, for the benches' bad-argument tests."""

from __future__ import annotations

import subprocess
import sys


def bench_error(*args: str) -> str:
    """``emq bench ARGS`` that must refuse its arguments at once: exit 1, nothing on stdout and
    one line on stderr, which it returns."""
    done = subprocess.run(
        [sys.executable, "-m", "emq", "bench", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr
