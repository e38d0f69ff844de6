"""A rollout's progress on the command line: a ``rich`` progress bar on a terminal, plain
lines otherwise (a pipe, a log; with ``--json`` on stderr, so stdout stays one JSON object)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, Self


class Progress:
    """Topics done out of ``total``; the current step's watch as the bar's description."""

    def __init__(self, total: int, *, plain: bool, stream: Any = None) -> None:
        self.total = total
        self._stream = stream or sys.stdout
        self.done = 0
        self._plain = plain
        self._bar: Any = None
        self._task: Any = None
        self._last_watch = ""

    def __enter__(self) -> Self:
        if not self._plain:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self._bar.start()
            self._task = self._bar.add_task("rollout", total=self.total)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def note(self, text: str) -> None:
        """A line above the bar (or a plain line)."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self._stream, flush=True)

    def watch(self, phase: str, watch_s: float, left_s: float) -> None:
        """The current step is being watched; ``left_s`` of it remain."""
        text = f"{phase}: watching, {left_s:.0f} s left"
        if self._bar is not None:
            self._bar.update(self._task, description=text)
        elif phase != self._last_watch:  # plain: once per step, not every heartbeat
            self._last_watch = phase
            self.note(f"{phase}: applied, watching {watch_s:g} s")

    def advance(self, topics: int, text: str) -> None:
        """``topics`` more are live and healthy."""
        self.done += topics
        if self._bar is not None:
            self._bar.update(self._task, advance=topics, description=text)
        else:
            self.note(f"{text} ({self.done}/{self.total} topics live)")
