"""A throwaway PostgreSQL for the tests: Debian's server (``deploy/install-deps.sh`` installs the
``postgresql`` package when it is missing), a cluster of its own in a temporary directory, on a
free loopback port, its Unix socket in that directory, no fsync (its data is thrown away).

PostgreSQL refuses to run as root, and CI runs as root: then ``initdb`` and ``pg_ctl`` run as
the ``postgres`` OS user (the package creates it) through ``runuser``, in a directory of its
own under the system's temporary directory (pytest's ``tmp_path`` is root's, mode 0700, where
that user cannot go). As anyone else they run as that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from emq.core.errors import BackendUnavailable

OS_USER = "postgres"  # the superuser of the cluster too (initdb -U)
START_TIMEOUT_S = 30


def bindir() -> Path:
    """Where the server's programs are: ``pg_config --bindir``, else Debian's
    ``/usr/lib/postgresql/<version>/bin`` (the newest), else an error naming the package."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    found = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(p) for p in found), key=lambda p: _version(p), reverse=True)
    for path in candidates:
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    raise BackendUnavailable(
        "PostgreSQL's server is not installed (no initdb): Debian: apt-get install -y postgresql"
    )


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.parent.name.split(".") if p.isdigit())


@dataclass
class PostgresServer:
    """One cluster: :meth:`start` on ``port``, :meth:`stop` and forget its files."""

    port: int
    base: Path | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{OS_USER}@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", OS_USER, "--", *argv] if os.geteuid() == 0 else argv

    def _run(self, argv: list[str], what: str) -> None:
        done = subprocess.run(
            self._as_owner(argv), capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise BackendUnavailable(f"postgresql: {what} failed: {self.log_tail()}\n"
                                     f"{done.stderr.strip() or done.stdout.strip()}")  # fmt: skip

    def start(self) -> None:
        bin_ = bindir()
        self.base = Path(tempfile.mkdtemp(prefix="emq-pg-"))
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(OS_USER)
            except KeyError:
                raise BackendUnavailable(
                    f"no OS user {OS_USER!r} to run PostgreSQL as (root may not): "
                    "Debian's postgresql package creates it"
                ) from None
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        data = self.base / "data"
        self._run([str(bin_ / "initdb"), "-D", str(data), "-A", "trust", "-U", OS_USER,
                   "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"], "initdb")  # fmt: skip
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run([str(bin_ / "pg_ctl"), "-D", str(data), "-l", str(self.base / "postgres.log"),
                   "-w", "-t", str(START_TIMEOUT_S), "-o", options, "start"], "start")  # fmt: skip

    def stop(self) -> None:
        if self.base is None:
            return
        data = self.base / "data"
        if (data / "postmaster.pid").exists():
            pg_ctl = str(bindir() / "pg_ctl")
            self._run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], "stop")
        shutil.rmtree(self.base, ignore_errors=True)
        self.base = None

    def log_tail(self, lines: int = 30) -> str:
        if self.base is None:
            return "(not started)"
        try:
            text = (self.base / "postgres.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
