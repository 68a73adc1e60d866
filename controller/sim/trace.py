"""Reading a job trace (the CSV schema of third_party/traces) into TraceJobs.

The traces are large (Philly has 111,539 rows), so the file is streamed through the csv module
row by row, not read whole, and a row becomes a TraceJob straight away. Real traces hold rows
no replay can use (zero-length jobs, CPU-only pods, cells that are not numbers); they are
dropped and counted rather than raised, because one bad row in a hundred thousand should not
stop a replay, but a replay that silently lost rows would be misread.

A replay usually wants part of a trace (the busy middle, not the sparse ramp-up), so a window
keeps the jobs submitted inside it and moves time zero to its start: the simulator then never
has to know where in the original trace it is.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from controller.sim.model import TraceJob

DAY = 86400.0
REQUIRED_COLUMNS = ("job_id", "submit_time_s", "duration_s", "gpus")
DEADLINE_COLUMN = "deadline"
_GZIP_MAGIC = b"\x1f\x8b"
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
_TIME = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*$")
_BUSIEST = re.compile(r"^\s*busiest\s*(\d+)\s*d\s*$")


BUSIEST_MEASURE = "GPU-seconds submitted (GPUs x duration, not job count)"
"""What `busiestNd` maximises, in the words the CLI's help and the summary use."""


@dataclass(frozen=True)
class BusiestWindow:
    """The `days` consecutive whole days of a trace with the most submitted GPU-seconds.

    It names a window that can only be found once the trace is read, which is why the CLI's
    `--window busiest14d` parses to this rather than to times.

    The measure is GPU-seconds (each job's GPUs x duration, counted on its submit day), not the
    number of jobs: a replay's load is GPU-time, and a day of a thousand one-GPU, ten-minute
    jobs loads a cluster less than one day of a few week-long 8-GPU jobs. The two measures pick
    different windows. On Philly, `busiest14d` is days 61-74 (the window [61 d, 75 d)):
    28,479 jobs and 763,004 GPU-hours. The busiest 14 days by job count, which
    third_party/traces/README.md quotes, are days 56-69: 33,408 jobs but 654,892 GPU-hours.
    """

    days: int = 14

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError(f"busiest window must span at least 1 day, got {self.days}")


Window = tuple[float, float] | BusiestWindow


@dataclass(frozen=True)
class Trace:
    """The usable jobs of a trace file and how many rows were not usable."""

    source: str
    """The file's name, for report titles."""
    jobs: list[TraceJob]
    """Sorted by (submit, job_id); times from the window's start when there is one (from the
    lead-in's start when there is a lead-in)."""
    skipped: int
    """Rows dropped as unusable: non-positive duration or GPUs, or cells that are not numbers."""
    window: tuple[float, float] | None = None
    """The window applied, in the original trace's seconds (resolved when it was the busiest)."""
    lead_in: float = 0.0
    """Seconds of the trace before the window that `jobs` also holds, first: the window starts
    at this time. Never more than asked, nor than the trace holds before the window."""

    @property
    def window_jobs(self) -> list[TraceJob]:
        """The jobs submitted in the window, the ones a replay scores."""
        if not self.lead_in:
            return self.jobs
        return [j for j in self.jobs if j.submit >= self.lead_in]


def load_trace(path: Path, *, window: Window | None = None, lead_in: float = 0.0) -> Trace:
    """Read a trace CSV (gzip-compressed or plain), keeping only the rows a replay can use.

    With a window and a `lead_in` (seconds), the jobs submitted in that time before the window
    are kept too, before it: a replay of a window that starts on an empty cluster measures the
    start-up (every node launched at once, every queue filling), not the policy in the
    window; the days before fill the cluster as it was.

    Raises ValueError when the file is empty or lacks a required column: that is the wrong file,
    not a bad row; and for a negative or infinite lead-in, or one without a window.
    """
    if isinstance(window, tuple):
        _check_window(window)
    if not (math.isfinite(lead_in) and lead_in >= 0):
        raise ValueError(f"invalid lead-in {lead_in}: expected a finite time >= 0")
    if lead_in and window is None:
        raise ValueError("a lead-in needs a window: a whole trace has nothing before it")
    jobs: list[TraceJob] = []
    skipped = 0
    with _open_text(path) as text:
        reader = csv.reader(text)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path.name}: empty file, expected a CSV header")
        columns = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise ValueError(
                f"{path.name}: missing required column(s) {', '.join(missing)}; "
                f"found {', '.join(header)}"
            )
        i_id, i_submit, i_duration, i_gpus = (columns[c] for c in REQUIRED_COLUMNS)
        i_deadline = columns.get(DEADLINE_COLUMN)
        width = max(i_id, i_submit, i_duration, i_gpus, -1 if i_deadline is None else i_deadline)
        isfinite = math.isfinite
        append = jobs.append
        for row in reader:
            if len(row) <= width:
                # A blank line at the end is not worth counting; a truncated row is.
                if any(cell.strip() for cell in row):
                    skipped += 1
                continue
            try:
                submit = float(row[i_submit])
                duration = float(row[i_duration])
                gpus = _gpus(row[i_gpus])
                deadline_cell = "" if i_deadline is None else row[i_deadline].strip()
                deadline = float(deadline_cell) if deadline_cell else None
            except ValueError:
                skipped += 1
                continue
            job_id = row[i_id].strip()
            if (
                not job_id
                or not isfinite(submit)
                or submit < 0
                or not isfinite(duration)
                or duration <= 0
                or gpus <= 0
                or (deadline is not None and not isfinite(deadline))
            ):
                skipped += 1
                continue
            append(TraceJob(job_id, submit, duration, gpus, deadline))
    return _windowed(Trace(source=path.name, jobs=jobs, skipped=skipped), window, lead_in)


def _windowed(read: Trace, window: Window | None, lead_in: float) -> Trace:
    """The trace as read, cut to the window and its lead-in (never before the trace's start)."""
    jobs = read.jobs
    resolved: tuple[float, float] | None = None
    if isinstance(window, BusiestWindow):
        resolved = busiest_window(jobs, days=window.days)
    elif window is not None:
        resolved = window
    if resolved is None:
        jobs.sort(key=_order)
        return read
    start, end = resolved
    lead = min(lead_in, start)
    return replace(
        read, jobs=select_window(jobs, (start - lead, end)), window=resolved, lead_in=lead
    )


def select_window(jobs: Sequence[TraceJob], window: tuple[float, float]) -> list[TraceJob]:
    """The jobs submitted in [start, end), with times (deadlines too) counted from start."""
    _check_window(window)
    start, end = window
    kept = [
        TraceJob(
            j.job_id,
            j.submit - start,
            j.duration,
            j.gpus,
            None if j.deadline is None else j.deadline - start,
        )
        for j in jobs
        if start <= j.submit < end
    ]
    kept.sort(key=_order)
    return kept


def busiest_window(jobs: Sequence[TraceJob], *, days: int = 14) -> tuple[float, float]:
    """The `days` whole days (from the trace's day 0) with the most submitted GPU-seconds.

    Whole days, counted from the trace's start, make the answer readable ("days 56-69") and
    stable: it is a sliding sum over daily totals, so ties go to the earliest window. A trace
    shorter than `days` gives the window from its first day.
    """
    if days < 1:
        raise ValueError(f"busiest window must span at least 1 day, got {days}")
    if not jobs:
        raise ValueError("cannot find the busiest window of an empty trace")
    daily: dict[int, float] = {}
    for j in jobs:
        day = int(j.submit // DAY)
        daily[day] = daily.get(day, 0.0) + j.gpus * j.duration
    first, last = min(daily), max(daily)
    totals = [daily.get(d, 0.0) for d in range(first, last + 1)]
    running = sum(totals[:days])
    best, best_start = running, 0
    for start in range(1, len(totals) - days + 1):
        running += totals[start + days - 1] - totals[start - 1]
        if running > best:
            best, best_start = running, start
    begin = first + best_start
    return (begin * DAY, (begin + days) * DAY)


def no_usable_job(trace: Trace, window: str | None) -> str:
    """The error for a trace (or window) with no job to replay, named as the user asked for it:
    the replay and the sweep both refuse one."""
    return f"{trace.source}: no usable job" + (f" in the window {window}" if window else "")


def describe_window(text: str | None, window: tuple[float, float] | None) -> str:
    """The window as the summary states it: the argument, the days it covers, and for
    `busiestNd` the measure that chose it.

    Days are whole days from the trace's start, first and last inclusive ("days 61-74"), as
    the traces' README counts them; a window that does not fall on whole days is in days with
    decimals, end exclusive.
    """
    if window is None:
        return "whole trace"
    start, end = window
    first, stop = start / DAY, end / DAY
    if first.is_integer() and stop.is_integer():
        days = f"days {first:.0f}-{stop - 1:.0f}" if stop - first > 1 else f"day {first:.0f}"
    else:
        days = f"days {first:g} to {stop:g} (end exclusive)"
    shown = text if text is not None else f"{start:g}:{end:g}"
    described = f"{shown}: {days} of the trace"
    if text is not None and isinstance(parse_window(text), BusiestWindow):
        described += f", the {stop - first:.0f} whole days with the most {BUSIEST_MEASURE}"
    return described


def parse_window(text: str) -> Window:
    """A window as the CLI writes it: "START:END" or "busiestNd".

    START and END are seconds from the trace's start, or numbers with a unit (s, m, h, d, w), so
    "56d:70d" and "12h:36h" read as they are meant.
    """
    busiest = _BUSIEST.match(text)
    if busiest:
        return BusiestWindow(days=int(busiest.group(1)))
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(
            f"invalid window {text!r}: expected START:END (seconds, or with a unit s/m/h/d/w, "
            "e.g. 56d:70d) or busiestNd (e.g. busiest14d)"
        )
    start, end = (_parse_time(part, text) for part in parts)
    window = (start, end)
    _check_window(window, text)
    return window


def parse_lead_in(text: str) -> float:
    """A lead-in as the CLI writes it: seconds, or a number with a unit (s, m, h, d, w)."""
    seconds = _seconds(text)
    if seconds is None:
        raise ValueError(
            f"invalid lead-in {text!r}: expected a non-negative time such as 3600, 12h or 3d"
        )
    return seconds


def _parse_time(part: str, text: str) -> float:
    seconds = _seconds(part)
    if seconds is None:
        raise ValueError(
            f"invalid window {text!r}: {part.strip()!r} is not a non-negative time such as "
            "3600, 90m, 12h or 56d"
        )
    return seconds


def _seconds(text: str) -> float | None:
    """Seconds from "3600", "90m", "12h", "56d" or "1w"; None for anything else."""
    match = _TIME.match(text)
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


def _check_window(window: tuple[float, float], text: str | None = None) -> None:
    start, end = window
    shown = repr(text) if text is not None else f"({start}, {end})"
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"invalid window {shown}: start and end must be finite")
    if start < 0:
        raise ValueError(f"invalid window {shown}: start must not be negative")
    if start >= end:
        raise ValueError(f"invalid window {shown}: start must be before end")


def _gpus(cell: str) -> int:
    """A GPU count; "8.0" is 8, but a fraction of a GPU is not a count the replay can place."""
    try:
        return int(cell)
    except ValueError:
        value = float(cell)
        if not value.is_integer():
            raise ValueError(f"fractional GPU count {cell!r}") from None
        return int(value)


def _order(job: TraceJob) -> tuple[float, str]:
    return (job.submit, job.job_id)


@contextmanager
def _open_text(path: Path) -> Iterator[TextIO]:
    """The file as text, decompressed when it starts with gzip's magic bytes, whatever its name."""
    with path.open("rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as text:
            yield text
