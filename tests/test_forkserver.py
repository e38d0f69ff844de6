"""The fork server's ``emq`` (tests/forkserver.py) behaves as the console script: the same output,
exit status, stdin and signals; only the import time differs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent


def run(emq: Path, command: str, tmp_path: Path) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {
        "EMQ_API_URL": "http://127.0.0.1:9",  # nothing listens: a one-line error
        "EMQ_ADMIN_TOKEN": "t",
        "EMQ_STACK_DIR": str(tmp_path / "stack"),
        "PYTHONPATH": str(ROOT),
        "PATH": f"{emq.parent}:{env['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "command",
    [
        "emq --version",
        "emq nonsense",
        "emq topic show",
        "emq config show | head -3",
        "EMQ_LOG_LEVEL=loud emq tenant list",
        "echo 'not json' | emq enqueue acme orders --file -",
        "emq tenant list; echo $?",
    ],
)
def test_the_shim_answers_as_the_console_script(
    emq_shim: Path, tmp_path: Path, command: str
) -> None:
    assert run(emq_shim / "emq", command, tmp_path) == run(BIN / "emq", command, tmp_path)


def _blocked_on_stdin(emq: Path, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``emq enqueue --file -`` reading a stdin that stays open: it waits there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return subprocess.Popen(
        [emq, "enqueue", "acme", "orders", "--file", "-"],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        bufsize=0,
    )


@pytest.mark.parametrize("emq", ["console script", "shim"])
def test_a_signal_ends_the_command_as_it_ends_the_console_script(
    emq_shim: Path, tmp_path: Path, emq: str
) -> None:
    command = BIN / "emq" if emq == "console script" else emq_shim / "emq"
    with _blocked_on_stdin(command, tmp_path) as proc:
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM


def test_a_shim_killed_takes_its_command_with_it(emq_shim: Path, tmp_path: Path) -> None:
    with _blocked_on_stdin(emq_shim / "emq", tmp_path) as proc:
        time.sleep(0.5)
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdin is not None
        deadline = time.monotonic() + 20
        with pytest.raises(BrokenPipeError):  # once the command, its last reader, is gone too
            while time.monotonic() < deadline:
                proc.stdin.write(b"\n")
                time.sleep(0.1)
