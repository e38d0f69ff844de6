"""A Spark standalone cluster on this machine: one master and N workers, on loopback.

Started from the pyspark distribution's own launcher (``SPARK_HOME/bin/spark-class``, which runs
``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` as the cluster's
``sbin/start-*.sh`` scripts do, but in the foreground), so a test, a benchmark or someone trying
the plan job on a "real" cluster gets one without installing Spark. Each daemon runs in a process
group of its own: a worker's executors are its children there, so :meth:`stop` ends the whole
tree, by process group id, even when a worker died before it could stop its executors.

States: *starting* (daemons launched, the master's JSON polled until every worker is ALIVE),
*up* (``master_url`` takes applications), *stopped* (every group signalled TERM, then KILL
after a grace period). ``with SparkCluster(...) as cluster:`` stops it on any exit.

Settings suit a small machine: each worker offers ``cores`` cores and ``memory`` to executors,
and the daemons themselves get a small heap and the JVM's quick compiler. Logs, the workers'
work directories (an executor's stdout/stderr) and Spark's scratch space live under ``root``.

``python -m emq.rigs.spark_cluster --dir /tmp/spark`` starts one and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emq.core.errors import EmqError
from emq.stack import free_port

# The daemons only route: a small heap and the JVM's first-tier compiler start them fastest.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOG4J = "\n".join(
    [
        "rootLogger.level = warn",
        "rootLogger.appenderRef.stderr.ref = console",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n",
        "",
    ]
)


def spark_home() -> Path:
    """The pyspark package's directory: the distribution (``bin/``, ``sbin/``, ``jars/``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise EmqError("pyspark is not installed (pip install 'emq[spark]')")
    return Path(spec.origin).parent


@dataclass(frozen=True)
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


class SparkCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "640m",
        executor_memory: str = "512m",
        daemon_memory: str = "256m",
        start_timeout_s: float = 60.0,
    ) -> None:
        self.root = root
        self.workers = workers
        self._worker_args = ["--cores", str(cores), "--memory", memory]
        self._daemon_memory = daemon_memory
        self._timeout_s = start_timeout_s
        self.host = "127.0.0.1"
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_webui_ports = [free_port() for _ in range(workers)]
        self.executor_memory = executor_memory
        self._cores_max = workers * cores
        self._daemons: list[Daemon] = []
        self.pids: list[int] = []  # every daemon ever launched (each one's process group id)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    @property
    def conf_dir(self) -> Path:
        """``SPARK_CONF_DIR`` for a client: quiet logs and ``spark-defaults.conf`` sized to fit."""
        return self.root / "conf"

    def client_defaults(self) -> dict[str, str]:
        """What an application needs to run here: one executor of one core per worker, a small
        heap, a driver on loopback, and no scheduling before every executor has registered."""
        return {
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self._cores_max),
            "spark.executor.extraJavaOptions": DAEMON_JAVA_OPTS,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.ui.enabled": "false",
        }

    def __enter__(self) -> SparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the master and the workers; return once every worker has registered."""
        for conf in (self.conf_dir, self.root / "conf-daemons"):  # the daemons: logging only
            conf.mkdir(parents=True, exist_ok=True)
            (conf / "log4j2.properties").write_text(LOG4J)
        defaults = "".join(f"{k} {v}\n" for k, v in self.client_defaults().items())
        (self.conf_dir / "spark-defaults.conf").write_text(defaults)
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", self.host, "--port", str(self.port), "--webui-port", str(self.webui_port)],
        )
        for i, webui in enumerate(self.worker_webui_ports):
            work = self.root / f"worker-{i}"
            work.mkdir(exist_ok=True)
            argv = ["--host", self.host, "--port", str(free_port()), "--webui-port", str(webui)]
            argv += [*self._worker_args, "--work-dir", str(work), self.master_url]
            self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", argv)
        self._wait_for_workers()

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return dict(
            os.environ,
            SPARK_HOME=str(home),
            SPARK_CONF_DIR=str(self.root / "conf-daemons"),
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_LOCAL_DIRS=str(self.root / "scratch"),
            SPARK_LOCAL_IP=self.host,
            SPARK_DAEMON_MEMORY=self._daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTS,
            # Executors run this interpreter if a job ever starts Python workers.
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )

    def _launch(self, name: str, main_class: str, argv: list[str]) -> None:
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, *argv],
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: the executors it starts are in it too
            )
        self._daemons.append(Daemon(name, proc, log))
        self.pids.append(proc.pid)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            for d in self._daemons:
                if d.proc.poll() is not None:
                    raise EmqError(f"spark {d.name} exited with {d.proc.returncode}: {tail(d.log)}")
            try:
                alive = [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
            except OSError:
                alive = []
            if len(alive) >= self.workers:
                return
            if time.monotonic() > deadline:
                logs = "; ".join(f"{d.name}: {tail(d.log)}" for d in self._daemons)
                raise EmqError(
                    f"spark cluster: {len(alive)}/{self.workers} workers after "
                    f"{self._timeout_s:g} s ({logs})"
                )
            time.sleep(0.25)

    def state(self) -> dict[str, Any]:
        """The master's JSON: ``workers``, ``activeapps``, ``completedapps``, ..."""
        return get_json(self.webui_url + "/json/")

    def worker_states(self) -> list[dict[str, Any]]:
        """Each worker's JSON (its ``executors`` and ``finishedexecutors``)."""
        return [get_json(f"http://{self.host}:{port}/json/") for port in self.worker_webui_ports]

    def stop(self, grace_s: float = 10.0) -> None:
        """TERM every daemon's process group, then KILL what is left after ``grace_s``."""
        for d in self._daemons:
            _signal_group(d.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for d in self._daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.proc.wait(max(0.0, deadline - time.monotonic()))
            _signal_group(d.proc, signal.SIGKILL)  # executors too, if a worker left any
            d.proc.wait()
        for d in self._daemons:  # the killed rest of a group (an executor) is reaped by init
            while _signal_group(d.proc, 0) and time.monotonic() < deadline + grace_s:
                time.sleep(0.05)
        self._daemons.clear()

    def logs(self, chars: int = 1500) -> str:
        """The end of every daemon's log and executor's stderr (to show when a test fails)."""
        files = sorted((self.root / "logs").glob("*.log"))
        files += sorted(self.root.glob("worker-*/app-*/*/stderr"))
        return "\n".join(f"--- {f}\n{tail(f, chars)}" for f in files)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> bool:
    """Signal the daemon's process group (its id is the daemon's pid); False if it is empty."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def get_json(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        document: dict[str, Any] = json.load(response)
    return document


def tail(path: Path, chars: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip() or "(empty)"
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m emq.rigs.spark_cluster",
        description="Start a Spark standalone master and workers on loopback; Ctrl-C stops them.",
    )
    p.add_argument("--dir", required=True, type=Path, help="logs and work directories")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores each worker offers (1)")
    p.add_argument("--memory", default="640m", help="memory each worker offers (640m)")
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the daemons are stopped too
    with SparkCluster(args.dir, workers=args.workers, cores=args.cores, memory=args.memory) as c:
        print(f"master {c.master_url}, web UI {c.webui_url}", flush=True)
        print(f"clients: SPARK_CONF_DIR={c.conf_dir} spark-submit --master {c.master_url} ...")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
