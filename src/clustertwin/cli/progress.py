"""Progress bars for long CLI work (trace generation, scheduler replays).

Rule: a transient rich bar on **stderr** (stdout keeps only the result, so ``--json`` stays parseable),
shown only when stderr is a terminal and only once the work has run for :data:`DELAY_S` (about a second):
quick runs print nothing, and a bar never outlives its work. Task descriptions are plain text (no markup
is read from them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DELAY_S = 1.0
"""Seconds of work before a bar appears."""


class LazyProgress:
    """A transient progress bar that starts on the first update after :data:`DELAY_S` (module docstring).

    ``enabled`` defaults to ``console.is_terminal``; when off, :meth:`task` returns None (no callback)."""

    def __init__(self, console: Console | None = None, *, delay_s: float | None = None,
                 enabled: bool | None = None) -> None:
        if console is None:
            from clustertwin.cli.common import err_console

            console = err_console
        self.enabled = console.is_terminal if enabled is None else enabled
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.started = False
        self._t0 = time.monotonic()
        self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console, transient=True)

    def task(self, description: str, total: int | None) -> Callable[[int], None] | None:
        """A callback ``update(completed)`` for one task of ``total`` units (None: no bar wanted)."""
        if not self.enabled:
            return None
        task_id = self._progress.add_task(description, total=total)

        def update(completed: int) -> None:
            if not self.started and time.monotonic() - self._t0 >= self.delay_s:
                self._progress.start()
                self.started = True
            self._progress.update(task_id, completed=completed)

        return update

    def __enter__(self) -> LazyProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if self.started:
            self._progress.stop()
            self.started = False
