"""``emq`` commands without paying Python's import time each: a fork server for the tests.

Most of an ``emq tenant create``'s CPU is importing (aiohttp, the client, the CLI's modules:
about half a CPU-second on the test machine), and the docs' pages and the CLI tests run hundreds
of such commands. :class:`ForkServer` imports the CLI once and forks a child per command; a
small ``emq`` shim (:meth:`ForkServer.shim`, plain Python without ``site``) stands in for the
console script on ``PATH``. Per command, the shim sends its arguments, environment, working
directory and its stdin, stdout and stderr (the descriptors themselves, SCM_RIGHTS); the child
takes them over, runs ``emq.cli.main.main`` as the console script would and exits with its code.
The shim passes on the signals it gets (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to
the child, and exits as the child did (its exit code, or by the same signal). A shim killed by
SIGKILL takes its child with it. So a command behaves as the console script does: the same code
in a process of its own with the caller's arguments, environment, directory and descriptors;
only the imports were done before the fork.

Run as ``python tests/forkserver.py SOCKET`` (``ForkServer`` does): it imports, then listens.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

# What every command imports: the CLI and the client, and what loading the settings and running
# a command on the event loop import; and the API's server (``emq api``).
PRELOAD = (
    "emq.cli.main",
    "emq.client",
    "emq.api.server",
    "emq.api.supervisor",
    "emq.core.settings",
    "emq.api.settings",
    "worker.settings",
    "allocator.settings",
    "emq.scheduler.settings",
    "capacity.plan",
    "spark.plan_job",
    "spark.synth_job",
    "uvloop",
    "logging",
    "tomllib",
    "encodings.idna",
    "concurrent.futures.thread",
)
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
READY_S = 60

# The shim: standard library only, run with -sSE (no site, no PYTHON* variables) so that it
# starts in a few milliseconds. Protocol, one connection per command: the shim sends a 4-byte
# length and a JSON request {argv, env, cwd} with its descriptors 0, 1, 2; the server answers
# "pid N\n" once forked and "exit N\n" (N < 0: killed by signal -N) when the child is gone.
SHIM = """\
#!{python} -sSE
import json, os, signal, socket, struct, sys
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect({socket!r})
except OSError as e:
    sys.stderr.write("emq (test fork server at {socket}): " + str(e) + "\\n")
    sys.exit(127)
request = json.dumps({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
socket.send_fds(sock, [struct.pack("!I", len(request)) + request], [0, 1, 2])
answers = sock.makefile("r")
child = int(answers.readline().split()[1])
def forward(signum, frame):
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass
for name in {forwarded!r}:
    signal.signal(getattr(signal, name), forward)
line = answers.readline()
code = int(line.split()[1]) if line.startswith("exit ") else 1
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


class ForkServer:
    """A fork server process (``python tests/forkserver.py``) and the shim that uses it."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.socket = directory / "emq-fork.sock"
        self.log = directory / "emq-fork.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(self.socket)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + READY_S
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"emq fork server did not start: {self.log.read_text()}")
            time.sleep(0.02)

    def shim(self, directory: Path) -> Path:
        """Write an executable ``emq`` shim into ``directory``; put that on ``PATH``."""
        path = directory / "emq"
        path.write_text(
            SHIM.format(python=sys.executable, socket=str(self.socket), forwarded=FORWARDED)
        )
        path.chmod(0o755)
        return path

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _serve(path: str) -> None:
    sys.path[0] = str(Path(sys.executable).parent)  # as the console script's
    for module in PRELOAD:
        with contextlib.suppress(ImportError):  # (a module moved: its child imports it)
            importlib.import_module(module)

    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (connection, pid)
    by_connection: dict[socket.socket, int] = {}  # connection -> pidfd
    parent = os.getppid()
    try:
        while os.getppid() == parent:  # a test run that died leaves no server behind
            for key, _ in selector.select(timeout=1.0):
                if key.fileobj is listener:
                    connection, _ = listener.accept()
                    started = _start(connection, listener)
                    if started is None:
                        connection.close()
                        continue
                    pid, pidfd = started
                    children[pidfd] = (connection, pid)
                    by_connection[connection] = pidfd
                    selector.register(pidfd, selectors.EVENT_READ, "child")
                    selector.register(connection, selectors.EVENT_READ, "shim")
                elif key.data == "child":
                    pidfd = key.fd
                    connection, pid = children.pop(pidfd)
                    _, status = os.waitpid(pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                    with contextlib.suppress(OSError):
                        connection.sendall(f"exit {code}\n".encode())
                    selector.unregister(pidfd)
                    os.close(pidfd)
                    if by_connection.pop(connection, None) is not None:
                        selector.unregister(connection)
                    connection.close()
                else:  # the shim went away (killed) before its child: take the child too
                    connection = key.fileobj  # type: ignore[assignment]
                    try:
                        gone = not connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        gone = True
                    if gone:
                        pidfd = by_connection.pop(connection)
                        selector.unregister(connection)  # its pidfd still reaps the child
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(children[pidfd][1], signal.SIGKILL)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _start(connection: socket.socket, listener: socket.socket) -> tuple[int, int] | None:
    """Read one request and fork its child; the child never returns from here."""
    try:
        head, fds, _, _ = socket.recv_fds(connection, 4, 3)
        (length,) = struct.unpack("!I", head)
        body = b""
        while len(body) < length:
            chunk = connection.recv(length - len(body))
            if not chunk:
                raise OSError("short request")
            body += chunk
        request = json.loads(body)
    except (OSError, ValueError, struct.error) as e:
        print(f"bad request: {e}", file=sys.stderr, flush=True)
        return None
    pid = os.fork()
    if pid == 0:
        listener.close()
        _child(connection, fds, request)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"pid {pid}\n".encode())
    return pid, os.pidfd_open(pid)


def _child(connection: socket.socket, fds: list[int], request: dict) -> None:
    """Become the command: its descriptors, directory, environment and argv; run; exit."""
    code = 1
    try:
        connection.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _reopen_stdio()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        from emq.cli.main import main

        try:
            code = main()
        except SystemExit as e:
            code = _exit_code(e)
    except BaseException:  # as the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    finally:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code if isinstance(code, int) else 0)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _reopen_stdio() -> None:
    """New ``sys.std*`` on the descriptors taken over, buffered as Python's own would be."""
    import io

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=sys.stdin.encoding
    )
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        encoding=sys.stdout.encoding,
        errors=sys.stdout.errors,
        line_buffering=os.isatty(1),
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding=sys.stderr.encoding,
        errors="backslashreplace",
        line_buffering=True,
    )


if __name__ == "__main__":
    _serve(sys.argv[1])
