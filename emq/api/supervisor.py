"""``emq api --workers N``: N API processes on one port, under a small supervisor.

Each child binds the port with SO_REUSEPORT and the kernel spreads new connections over them;
the parent serves nothing. It forks the children before it runs any event loop or thread (a
child starts from clean state, and a restart costs a fork, not an interpreter), and then only
waits: for their readiness, for their exits, for SIGTERM/SIGINT, in one ``select`` on two pipes
(signals reach it through :func:`signal.set_wakeup_fd`).

States of a child's slot::

    STARTING --writes its pid on the ready pipe--> LISTENING
    STARTING/LISTENING --exits, not asked to-----> WAITING --backoff elapsed--> STARTING
    STARTING --exits FATAL (cannot listen)--------> the supervisor stops all and exits 1
    any --the parent's SIGTERM/SIGINT, forwarded--> STOPPING --exits--> gone

The parent says ``emq api listening on ...`` once every child listens. A restart waits
``BACKOFF_S * 2**k`` (at most ``BACKOFF_MAX_S``) after the k-th death in a row; a child that
listened for ``STABLE_S`` resets k, so a crash loop backs off and a rare crash restarts at once.
Each child holds the read end of a pipe only the parent writes to: if the parent dies (even
``kill -9``), the children see EOF and stop gracefully rather than serve on unsupervised.

Before forking, the parent binds the port once without SO_REUSEPORT: that fails if anything
listens there already (another ``emq api``, even one with SO_REUSEPORT, which would otherwise
silently share the port), so a port in use is one line and exit status 1, never a restart loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from emq.api.server import Listening
from emq.core.errors import ConfigError, EmqError

log = logging.getLogger(__name__)

FATAL = 3  # a child's exit status: it cannot listen; restarting would not help
BACKOFF_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_S = 10.0
KILL_MARGIN_S = 10.0  # past the children's own grace period, a child still running is killed

Serve = Callable[[Listening], None]  # runs one child's server until it stops


@dataclass
class Slot:
    """One child process (one at a time per slot)."""

    index: int
    pid: int = 0  # 0: none running
    ready_at: float | None = None  # when it said it listens
    deaths: int = 0  # in a row, without a stable run between
    restart_at: float | None = None  # WAITING until then

    @property
    def running(self) -> bool:
        return self.pid != 0


@dataclass
class Pipes:
    """The supervisor's descriptors: signal wake-ups, readiness, the children's lifeline."""

    wake_r: int
    wake_w: int
    ready_r: int
    ready_w: int
    life_r: int
    life_w: int
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)

    @classmethod
    def open(cls) -> Pipes:
        wake_r, wake_w = os.pipe()
        ready_r, ready_w = os.pipe()
        life_r, life_w = os.pipe()
        os.set_blocking(wake_w, False)  # set_wakeup_fd needs it; a full pipe drops wake-ups
        pipes = cls(wake_r, wake_w, ready_r, ready_w, life_r, life_w)
        pipes.selector.register(wake_r, selectors.EVENT_READ)
        pipes.selector.register(ready_r, selectors.EVENT_READ)
        return pipes

    def close(self) -> None:
        self.selector.close()
        for fd in (self.wake_r, self.wake_w, self.ready_r, self.ready_w, self.life_r, self.life_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def in_child(self) -> tuple[int, int]:
        """Keep what a child needs (its ready pipe's write end, the lifeline's read end)."""
        self.selector.close()
        for fd in (self.wake_r, self.wake_w, self.ready_r, self.life_w):
            os.close(fd)
        return self.ready_w, self.life_r


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`ConfigError` if ``host:port`` cannot be bound by a new listener alone.

    Without SO_REUSEPORT the bind fails while anything listens there, including a reuse-port
    group of another ``emq api``; with SO_REUSEADDR (as the children) a closing connection's
    TIME_WAIT does not count.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


class Supervisor:
    """Runs ``workers`` children of ``serve`` on ``host:port`` until SIGTERM/SIGINT."""

    def __init__(
        self,
        serve: Serve,
        workers: int,
        host: str,
        port: int,
        *,
        grace_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if port == 0 and workers > 1:  # each child would get a port of its own
            raise ConfigError("emq api --workers N needs a port (not 0)")
        self._serve = serve
        self._host, self._port = host, port
        self._slots = [Slot(i) for i in range(workers)]
        self._grace_s = grace_s
        self._stopping_since: float | None = None
        self._announced = False
        self._failure: str | None = None
        self._pipes: Pipes | None = None
        self._clock = clock
        self._partial = b""  # the ready pipe's last line, until its end arrives

    def run(self) -> int:
        """Start the children, supervise them; the exit status once they all stopped."""
        check_port_free(self._host, self._port)
        pipes = self._pipes = Pipes.open()
        previous = self._install_signals(pipes)
        try:
            for slot in self._slots:
                self._start(slot)
            while self._stopping_since is None or any(s.running for s in self._slots):
                self._step(pipes)
        finally:
            self._kill_all()
            self._restore_signals(previous)
            pipes.close()
        if self._failure is not None:
            raise EmqError(self._failure)
        return 0

    # ------------------------------------------------------------------ the loop

    def _step(self, pipes: Pipes) -> None:
        for key, _ in pipes.selector.select(self._timeout()):
            data = os.read(key.fd, 4096)
            if key.fd == pipes.wake_r:
                self._signals(data)
            else:
                self._ready(data)
        self._reap()
        now = self._clock()
        if self._stopping_since is not None:
            if now - self._stopping_since > self._grace_s + KILL_MARGIN_S:
                log.warning("emq api: processes still running after the grace period; killing")
                self._failure = "api processes did not stop within the grace period"
                self._kill_all()
            return
        for slot in self._slots:
            if slot.restart_at is not None and now >= slot.restart_at:
                self._start(slot)

    def _timeout(self) -> float | None:
        now = self._clock()
        if self._stopping_since is not None:
            return max(0.0, self._stopping_since + self._grace_s + KILL_MARGIN_S - now)
        due = [s.restart_at for s in self._slots if s.restart_at is not None]
        return max(0.0, min(due) - now) if due else None

    def _signals(self, data: bytes) -> None:
        for signum in data:
            if signum in (signal.SIGTERM, signal.SIGINT):
                self._stop(signal.Signals(signum))
            # SIGCHLD only wakes the loop: _reap() follows every wake-up

    def _ready(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")  # a read may end mid-line
        for line in lines:
            slot = self._slot_of(int(line))
            if slot is None:
                continue
            slot.ready_at = self._clock()
            log.info("emq api process %d (pid %d) listening", slot.index, slot.pid)
        if not self._announced and all(s.ready_at is not None for s in self._slots):
            self._announced = True
            pids = ", ".join(str(s.pid) for s in self._slots)
            log.info("emq api: %d processes listening (pids %s)", len(self._slots), pids)
            print(
                f"emq api listening on http://{self._host}:{self._port} "
                f"({len(self._slots)} processes)",
                flush=True,
            )

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self._slot_of(pid)
            if slot is not None:
                self._exited(slot, os.waitstatus_to_exitcode(status))

    def _exited(self, slot: Slot, code: int) -> None:
        slot.pid = 0
        was_ready, slot.ready_at = slot.ready_at, None
        if self._stopping_since is not None:
            if code != 0:
                log.warning("emq api process %d exited with %d while stopping", slot.index, code)
            return
        if code == FATAL:
            self._failure = f"emq api process {slot.index} could not start (see its error above)"
            self._stop(signal.SIGTERM)
            return
        stable = was_ready is not None and self._clock() - was_ready >= STABLE_S
        slot.deaths = 1 if stable else slot.deaths + 1
        delay = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (slot.deaths - 1))
        slot.restart_at = self._clock() + delay
        log.warning(
            "emq api process %d exited unexpectedly (%s); restarting in %.1f s",
            slot.index,
            f"killed by signal {-code}" if code < 0 else f"status {code}",
            delay,
        )

    def _stop(self, sig: signal.Signals) -> None:
        if self._stopping_since is None:
            self._stopping_since = self._clock()
            log.info("emq api: %s; stopping %d processes", sig.name, len(self._slots))
        for slot in self._slots:
            slot.restart_at = None
            if slot.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, sig)

    def _kill_all(self) -> None:
        for slot in self._slots:
            if slot.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(slot.pid, 0)
                slot.pid = 0

    def _slot_of(self, pid: int) -> Slot | None:
        return next((s for s in self._slots if s.pid == pid), None)

    # ------------------------------------------------------------------ children

    def _start(self, slot: Slot) -> None:
        assert self._pipes is not None
        slot.restart_at = None
        sys.stdout.flush()  # else the child would print the parent's buffered output again
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(self._pipes)  # never returns
        slot.pid = pid
        log.info("emq api process %d started (pid %d)", slot.index, pid)

    def _child(self, pipes: Pipes) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            ready_w, life_r = pipes.in_child()

            def ready() -> None:
                os.write(ready_w, f"{os.getpid()}\n".encode())

            self._serve(Listening(reuse_port=True, on_ready=ready, parent_fd=life_r))
            code = 0
        except ConfigError as e:  # cannot listen, a bad setting: the same in every child
            print(f"emq: error: {e}", file=sys.stderr)
            code = FATAL
        except BaseException:
            log.exception("emq api process %d failed", os.getpid())
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    # ------------------------------------------------------------------ signals

    @staticmethod
    def _install_signals(pipes: Pipes) -> dict[int, object]:
        previous: dict[int, object] = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            # A handler of our own, so that the signal is noted on the wake-up pipe
            previous[sig] = signal.signal(sig, _noted)
        signal.set_wakeup_fd(pipes.wake_w)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, object]) -> None:
        signal.set_wakeup_fd(-1)
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _noted(signum: int, frame: object) -> None:
    """The signal's number is on the wake-up pipe; the loop acts on it."""
