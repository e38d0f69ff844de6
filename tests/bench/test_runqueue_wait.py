"""The benchmarks' run-queue meter (emq.bench.harness.RunQueueWait): how long a process waited
for a CPU while runnable, read from /proc/<pid>/schedstat, as W3 reports it for its worker
(the machine's part in a slow run)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from emq.bench.harness import RunQueueWait, run_delay_s

BUSY = "while True: pass"
IDLE = "import time; time.sleep(30)"


async def _start(code: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", code)


async def _stop(procs: list[asyncio.subprocess.Process]) -> None:
    for p in procs:
        p.kill()
        await p.wait()


@pytest.mark.serial  # (three busy loops for two seconds would take the CPU of tests beside it)
async def test_a_process_among_more_busy_ones_than_cores_waits_and_a_sleeper_does_not() -> None:
    # Three busy loops on this machine's two cores (more with the other tests): each is
    # runnable all the time and waits for a CPU a third of it or more. One that sleeps never is.
    procs = [await _start(BUSY) for _ in range(3)] + [await _start(IDLE)]
    try:
        await asyncio.sleep(0.5)  # (started, the sleeper asleep)
        busy, idle = RunQueueWait(procs[0].pid).start(), RunQueueWait(procs[3].pid).start()
        before = run_delay_s(procs[0].pid)
        await asyncio.sleep(1.6)
        waited, rested = busy.read(), idle.read()
        assert run_delay_s(procs[0].pid) > before  # (the counter moves)
    finally:
        await _stop(procs)
    assert waited["waited_pct"] > 10, waited
    assert waited["waited_worst_second_pct"] >= 10, waited
    assert rested == {"waited_pct": 0.0, "waited_worst_second_pct": 0.0}, rested


async def test_a_process_that_ended_reads_what_was_sampled() -> None:
    proc = await _start(BUSY)
    meter = RunQueueWait(proc.pid, period_s=0.05).start()
    await asyncio.sleep(0.3)
    await _stop([proc])
    figures = meter.read()  # (its last sample fails quietly: the process is gone)
    assert set(figures) == {"waited_pct", "waited_worst_second_pct"}
