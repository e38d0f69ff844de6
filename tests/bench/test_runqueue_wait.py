"""The benchmarks' run-queue meter (emq.bench.harness.RunQueueWait): how long a process waited
for a CPU while runnable, read from /proc/<pid>/schedstat, as W3 reports it for its worker
(the machine's part in a slow run)."""

from __future__ import annotations

import asyncio
import os
import sys
from types import SimpleNamespace

import pytest

from emq.bench import harness
from emq.bench.harness import Contention, RunQueueWait, cpu_times_s, run_delay_s

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


def test_cpu_times_read_busy_total_and_steal_from_proc_stat() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
    line = "cpu  400 0 100 1000 50 0 0 30 0 0\n"
    tck = os.sysconf("SC_CLK_TCK")
    busy, total, steal = cpu_times_s(line)
    assert (busy, total, steal) == (530 / tck, 1580 / tck, 30 / tck)
    # a kernel without the steal column
    assert cpu_times_s("cpu  400 0 100 1000 50 0 0\n")[2] == 0.0


def test_contention_reads_shares_of_the_machine_over_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two readings of /proc/stat 2 s apart: 80 of 200 ticks busy, 30 of them stolen.
    tck = os.sysconf("SC_CLK_TCK")
    lines = iter(["cpu  100 0 0 900 0 0 0 0\n", "cpu  150 0 0 1020 0 0 0 30\n"])
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(harness, "_cpu_times_now", lambda: cpu_times_s(next(lines)))
    # (the harness's own view of time: other threads keep the real clock)
    monkeypatch.setattr(harness, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    meter = Contention(os.getpid(), os.getpid())
    monkeypatch.setattr(meter, "_ours_s", lambda: 0.0)  # (nothing of the benchmark's)
    figures = meter.start().read()
    assert set(figures) == {
        "machine_busy_pct",
        "other_processes_pct_of_core",
        "stolen_pct_of_core",
        "loadavg_1m",
    }
    assert figures["machine_busy_pct"] == 40.0  # 80 of 200 ticks
    assert figures["other_processes_pct_of_core"] == round(100 * 80 / tck / 2, 1)
    assert figures["stolen_pct_of_core"] == round(100 * 30 / tck / 2, 1)
