"""A SparkSession for the EMQ jobs, and the progress printer they show on stderr.

The same jobs run on a laptop (``local[*]``, the default when nothing else says where) and on a
cluster (``--master URL``, or whatever ``spark-submit --master`` set). Local runs get settings
that suit a small machine: few shuffle partitions, a 4 GiB driver, no UI, quiet logs, and the
JVM's quick compiler only (``--jit full`` for long runs).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from pyspark.sql import SparkSession

LOG4J = Path(__file__).with_name("log4j2.properties")


def under_spark_submit() -> bool:
    """True when spark-submit launched this Python process (it then chose the master)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_partitions() -> int:
    """Shuffle partitions for a local run: a few per core, so progress moves and tasks stay big."""
    return max(4, 4 * (os.cpu_count() or 2))


@contextmanager
def spark_session(
    app: str, master: str | None = None, driver_memory: str = "4g", jit: str = "quick"
) -> Iterator[SparkSession]:
    """Yield a session; stop it afterwards only if this call started it.

    A session that already runs in this process (a test's, a notebook's) is reused as it is.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Python workers (only used by pandas conversions) must run this interpreter, not python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master or not under_spark_submit():
        chosen = master or "local[*]"
        builder = builder.master(chosen)
        if chosen.startswith("local"):
            builder = _local(builder, driver_memory, jit)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.ui.showConsoleProgress", "false"
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not master and under_spark_submit():
        _submitted_locally(spark)
    try:
        yield spark
    finally:
        spark.stop()


JIT_CHOICES = ("quick", "full")


def _local(builder: SparkSession.Builder, driver_memory: str, jit: str) -> SparkSession.Builder:
    java_opts = "-XX:+UseParallelGC"
    if jit == "quick":
        # The JVM's first-tier compiler only: a job of minutes on a laptop spends much of its
        # CPU in the optimising compiler's work (measured: a 50-topic, 2-day plan 35-44 s
        # instead of 60-66 s on 2 cores). Runs of many millions of rows: --jit full.
        java_opts += " -XX:TieredStopAtLevel=1"
    if LOG4J.is_file():  # quiet: errors only (the jobs print their own progress)
        java_opts += f" -Dlog4j2.configurationFile={LOG4J.as_uri()}"
    return (
        builder.config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.sql.shuffle.partitions", str(local_partitions()))
        .config("spark.default.parallelism", str(local_partitions()))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )


def _submitted_locally(spark: SparkSession) -> None:
    """``spark-submit --master local[N]`` chose the master, so :func:`_local` never ran: give the
    run the small machine's shuffle partitions (a runtime SQL setting) unless the caller set
    them (``--conf``). Spark's default of 200 made the plan job ~3x slower on 2 cores."""
    conf = spark.sparkContext.getConf()
    if spark.sparkContext.master.startswith("local") and not conf.contains(
        "spark.sql.shuffle.partitions"
    ):
        spark.conf.set("spark.sql.shuffle.partitions", str(local_partitions()))


def cpu_seconds(spark: SparkSession) -> float | None:
    """CPU time the driver's JVM has used so far (all its threads: in local mode, the work).

    A figure that, unlike wall time, does not grow when other processes share the machine.
    Read from ``/proc``, so ``None`` off Linux.
    """
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        pid = str(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getName())
        fields = Path(f"/proc/{pid.partition('@')[0]}/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])  # utime and stime (fields 14 and 15)
        return ticks / os.sysconf("SC_CLK_TCK")
    except Exception:  # a figure to report, never a reason to fail
        return None


class Progress:
    """Step messages and a task counter for the running Spark stages, on stderr.

    ``with progress.step("reading history"):`` prints ``[2/6] reading history`` and, at the end,
    its duration. While a step runs, a daemon thread polls the status tracker twice a second and
    shows ``tasks 37/64`` of the active stages (redrawn in place on a terminal, a line every 10 s
    otherwise, so logs stay short). ``quiet`` prints nothing.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        total: int,
        *,
        quiet: bool = False,
        out: TextIO | None = None,
    ) -> None:
        self._tracker = None
        self._spark: SparkSession | None = None
        self.cpu: dict[str, float] = {}  # JVM CPU seconds per step (load-independent)
        if spark is not None:
            self.attach(spark)
        self._total = total
        self._n = 0
        self._quiet = quiet
        self._out = out or sys.stderr
        self._tty = self._out.isatty()
        self.timings: dict[str, float] = {}

    def attach(self, spark: SparkSession) -> None:
        """Follow this session's stages from now on."""
        self._spark = spark
        self._tracker = spark.sparkContext.statusTracker()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._n += 1
        label = f"[{self._n}/{self._total}] {name}"
        self._say(label + ("..." if self._tty else ""))
        stop = threading.Event()
        poller = threading.Thread(target=self._poll, args=(label, stop), daemon=True)
        started = time.monotonic()
        cpu_before = cpu_seconds(self._spark) if self._spark is not None else None
        if self._tracker is not None and not self._quiet:
            poller.start()
        try:
            yield
        finally:
            stop.set()
            if poller.is_alive():
                poller.join()
        elapsed = time.monotonic() - started  # only a step that finished reports its time
        self.timings[name] = round(elapsed, 2)
        cpu_after = cpu_seconds(self._spark) if self._spark is not None else None
        if cpu_before is not None and cpu_after is not None:
            self.cpu[name] = round(cpu_after - cpu_before, 1)
        self._say(f"{label}: {elapsed:.1f} s", redraw=True)

    def _poll(self, label: str, stop: threading.Event) -> None:
        assert self._tracker is not None
        last_line = time.monotonic()
        while not stop.wait(0.5):
            done = total = 0
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if not total:
                continue
            text = f"{label}: tasks {done}/{total}"
            if self._tty:
                self._say(text, redraw=True, newline=False)
            elif time.monotonic() - last_line >= 10:
                self._say(text)
                last_line = time.monotonic()

    def _say(self, text: str, *, redraw: bool = False, newline: bool = True) -> None:
        if self._quiet:
            return
        prefix = "\r\x1b[2K" if redraw and self._tty else ""
        end = "\n" if newline or not self._tty else ""
        self._out.write(prefix + text + end)
        self._out.flush()
