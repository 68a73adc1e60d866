"""How a sweep shows its progress: cells done, running and failed, and the time left.

On a terminal, a live bar drawn by rich (the `sim` extra; a well-kept library that redraws in
place and keeps printed lines above the bar); anywhere else (a log file, CI, a pipe), or without
rich, a plain line per finished cell, which reads the same in a log as on a screen. A failed
cell's error is printed as it fails, whichever is used, not only at the end: a sweep runs for
hours, and a broken setting is worth stopping for.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from controller.sim.report import format_seconds
from controller.sim.sweep_report import FAILED, time_left

if TYPE_CHECKING:
    from rich.progress import Progress as RichBar
    from rich.progress import TaskID


def rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None


def _left(started: float, finished: int, total: int) -> str:
    left = time_left(
        elapsed=time.monotonic() - started, finished=finished, remaining=total - finished
    )
    return "?" if left is None else format_seconds(left)


class PlainProgress:
    """A line when the sweep starts, and one per finished cell with the counts and time left."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.total = self.finished_count = self.failed = self.in_flight = 0

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def start(self, *, total: int, earlier: int) -> None:
        self.started = time.monotonic()
        self.total = total
        self._line(
            f"sweep: {total + earlier} cells, {earlier} finished earlier (kept), {total} to run"
        )

    def note(self, text: str) -> None:
        self._line(text)

    def running(self, count: int) -> None:
        self.in_flight = count

    def finished(self, label: str, record: Mapping[str, Any], wall: float | None) -> None:
        self.finished_count += 1
        failed = record.get("status") == FAILED
        self.failed += failed
        took = "" if wall is None else f" in {format_seconds(wall)}"
        status = f"FAILED: {record.get('error')}" if failed else f"ok{took}"
        self._line(
            f"[{self.finished_count}/{self.total}] {label}: {status} "
            f"({self.in_flight} running, {self.failed} failed, "
            f"{_left(self.started, self.finished_count, self.total)} left)"
        )

    def close(self) -> None:
        return None


class RichProgress:
    """A bar redrawn in place: done/total, running, failed, elapsed and time left."""

    def __init__(self, stream: TextIO) -> None:
        # Imported here: only a terminal needs rich, and it is an optional extra.
        from rich.console import Console  # noqa: PLC0415
        from rich.markup import escape  # noqa: PLC0415
        from rich.progress import (  # noqa: PLC0415
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.escape = escape
        self.console = Console(file=stream)
        self.bar: RichBar = Progress(
            TextColumn("sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[running]} running, {task.fields[failed]} failed, elapsed"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task: TaskID | None = None
        self.failed = 0

    def start(self, *, total: int, earlier: int) -> None:
        self.console.print(
            f"sweep: {total + earlier} cells, {earlier} finished earlier (kept), {total} to run",
            highlight=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=total, running=0, failed=0)

    def note(self, text: str) -> None:
        self.bar.console.print(text, markup=False, highlight=False)

    def running(self, count: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, running=count)

    def finished(self, label: str, record: Mapping[str, Any], wall: float | None) -> None:
        if record.get("status") == FAILED:
            self.failed += 1
            # Labels hold brackets ([risk.raiseThreshold=0.1]) that rich would read as markup.
            shown = self.escape(f"{label}: {record.get('error')}")
            self.bar.console.print(f"[red]FAILED[/red] {shown}", highlight=False)
        if self.task is not None:
            self.bar.update(self.task, advance=1, failed=self.failed)

    def close(self) -> None:
        self.bar.stop()


def progress_for(stream: TextIO, *, tty: bool | None = None) -> PlainProgress | RichProgress:
    """Rich's live bar on a terminal when rich is installed, else plain lines."""
    on_terminal = stream.isatty() if tty is None else tty
    return RichProgress(stream) if on_terminal and rich_available() else PlainProgress(stream)
