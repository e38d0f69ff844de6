"""The one process harness: a child process of ours with its environment and its log file.

:class:`Proc` runs ``python -m <module> ARGS`` (``emq`` by default: a worker, the API), its
output appended to a log file, so a benchmark, a test or the demo can start it, signal it
(``SIGSTOP``, ``kill -9``), restart it, stop it gracefully and show its log when it fails.
:func:`stop_all` stops several at once (all signalled, then all waited for, so their shutdown
grace periods overlap). :class:`SinkProcess` is the sink (:mod:`emq.rigs.sink`) as such a
process, with the HTTP calls that read it. Whoever starts a :class:`Proc` stops it: nothing here
outlives its owner's ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from emq.core.errors import EmqError


class Proc:
    """One child process: ``python -m module *argv`` with ``env`` (None: ours), output in
    ``log``. Started at once unless ``start=False``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        log: Path,
        *,
        module: str = "emq",
        start: bool = True,
    ) -> None:
        self.name = name
        self.argv = [sys.executable, "-m", module, *argv]
        self.env = dict(env) if env is not None else None
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise :class:`~emq.core.errors.EmqError` (with the log's end) if it has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise EmqError(
                f"{self.name} exited with {self.proc.returncode} (log {self.log_path}): "
                f"{self.log(800)}"
            )

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """``kill -9`` and reap."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """Ask it to stop (``SIGTERM``; ``SIGCONT`` first: a stopped process cannot act)."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status, waiting up to ``timeout_s``; then ``kill -9``."""
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """``SIGTERM``, then ``kill -9`` after ``timeout_s``; its exit status."""
        self.terminate()
        return self.wait(timeout_s)

    def log(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def log_count(self, needle: str) -> int:
        try:
            return self.log_path.read_text(errors="replace").count(needle)
        except OSError:
            return 0


HURRY_AFTER_S = 0.2  # a second signal sent at once would merge with the first (not queued)


def stop_all(procs: Iterable[Proc], timeout_s: float = 20.0, *, hurry: bool = False) -> None:
    """Signal every process (last started first), then wait for each up to ``timeout_s``.

    ``hurry``: signal them again a moment later, which tells a worker to skip draining its
    buffers (a test's teardown has nothing left to judge: a backlogged worker would otherwise
    spend its whole shutdown grace)."""
    procs = list(procs)
    for proc in reversed(procs):
        proc.terminate()
    if hurry:
        time.sleep(HURRY_AFTER_S)
        for proc in reversed(procs):
            if proc.alive:
                proc.terminate()
    for proc in procs:
        proc.wait(timeout_s)


SINK_NICE = -10


def _before_others(pid: int) -> None:
    """Run the sink ahead of the processes it judges when the CPU is contended. It stands for
    a receiver on another machine: on this one, a sink the scheduler leaves waiting reads a
    burst of requests late and stamps them together, which reads as the sender's burst (seen:
    priority inversions of 197 in a promise run, 0 with the sink ahead). Its share of the CPU
    is what its load asks either way. Without the privilege (not root) it runs as started."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, SINK_NICE)


class SinkProcess:
    """``python -m emq.rigs.sink`` on ``port``, for the benchmarks: ``async with
    SinkProcess.running(port, log) as sink`` (or :meth:`start`/:meth:`stop`); read with
    :meth:`get`."""

    def __init__(self, port: int, log: Path, *, record: bool = False) -> None:
        argv = ["--port", str(port)] + (["--record"] if record else [])
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.proc = Proc("sink", argv, None, log, module="emq.rigs.sink", start=False)
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, port: int, log: Path, *, record: bool = False
    ) -> AsyncIterator[SinkProcess]:
        sink = cls(port, log, record=record)
        try:
            await sink.start()
            yield sink
        finally:
            await sink.stop()

    async def start(self) -> None:
        """Start the process and wait until it answers."""
        self.proc.start()
        _before_others(self.proc.pid)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        await self._wait_ready()

    async def stop(self) -> None:
        """Stop the process (hung connections are not waited for). Idempotent."""
        if self._http is not None:
            await self._http.close()
            self._http = None
        self.proc.stop(10)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def get(self, path: str) -> dict[str, Any]:
        """``GET path`` (``/_stats``, ``/_reset``, ``/_log?from=N``) as JSON."""
        assert self._http is not None
        async with self._http.get(self.base + path) as r:
            r.raise_for_status()
            result: dict[str, Any] = await r.json()
            return result

    async def _wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.proc.check()
            try:
                await self.get("/_reset")
                return
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
        raise EmqError(f"the sink did not answer within {timeout_s:.0f} s: {self.proc.log(500)}")
