"""Reading traces: the rows kept, the rows dropped and counted, windows and their re-basing.

Small traces are written out by hand, compressed or not, so each case states its expected jobs
exactly; the two real traces are then loaded whole, against the counts their README gives.
"""

from __future__ import annotations

import gzip
import math
import time
from pathlib import Path

import pytest

from controller.sim.model import TraceJob
from controller.sim.run import traces_dir
from controller.sim.trace import (
    DAY,
    BusiestWindow,
    Trace,
    busiest_window,
    describe_window,
    load_trace,
    parse_lead_in,
    parse_window,
    select_window,
)

TRACES = traces_dir()  # third_party/traces, or $QUARTERMASTER_TRACES
HEADER = "job_id,submit_time_s,duration_s,gpus,user,status,queue_time_s"


def write(path: Path, lines: list[str], *, compress: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def job(job_id: str, submit: float, duration: float, gpus: int = 1) -> TraceJob:
    return TraceJob(job_id, submit, duration, gpus)


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize(
    ("name", "compress"),
    [
        pytest.param("t.csv", False, id="a plain CSV is read as text"),
        pytest.param("t.csv.gz", True, id="a gzip file is decompressed"),
        pytest.param("t.csv", True, id="gzip is recognised by its magic bytes, not its name"),
        pytest.param("t.csv.gz", False, id="a plain file named .gz is still read as plain"),
    ],
)
def test_reads_plain_and_gzip(tmp_path: Path, name: str, compress: bool) -> None:
    path = write(
        tmp_path / name,
        [HEADER, "b,10,100,8,,,", "a,10,50,1,alice,completed,3", "c,0,7.5,2,,,"],
        compress=compress,
    )
    assert load_trace(path) == Trace(
        source=name,
        jobs=[job("c", 0, 7.5, 2), job("a", 10, 50), job("b", 10, 100, 8)],
        skipped=0,
    )


def test_columns_are_found_by_name_and_a_bom_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffgpus,extra,duration_s,job_id,submit_time_s\n4,x,60,j1,5\n".encode())
    assert load_trace(path).jobs == [job("j1", 5, 60, 4)]


@pytest.mark.parametrize(
    "row",
    [
        pytest.param("x,0,0,1,,,", id="zero duration"),
        pytest.param("x,0,-5,1,,,", id="negative duration"),
        pytest.param("x,0,10,0,,,", id="zero GPUs"),
        pytest.param("x,0,10,-2,,,", id="negative GPUs"),
        pytest.param("x,0,10,0.5,,,", id="a fraction of a GPU is not a count"),
        pytest.param("x,0,10,,,,", id="empty GPUs"),
        pytest.param("x,soon,10,1,,,", id="a submit time that is not a number"),
        pytest.param("x,0,long,1,,,", id="a duration that is not a number"),
        pytest.param("x,0,nan,1,,,", id="NaN duration"),
        pytest.param("x,inf,10,1,,,", id="infinite submit time"),
        pytest.param("x,-1,10,1,,,", id="a submit before the trace's start"),
        pytest.param(",0,10,1,,,", id="no job id"),
        pytest.param("x,0,10", id="a truncated row"),
    ],
)
def test_unusable_rows_are_skipped_and_counted(tmp_path: Path, row: str) -> None:
    path = write(tmp_path / "t.csv", [HEADER, "ok,1,10,1,,,", row])
    trace = load_trace(path)
    assert (trace.jobs, trace.skipped) == ([job("ok", 1, 10)], 1)


@pytest.mark.parametrize(
    ("row", "want"),
    [
        pytest.param("x,0,10,8.0,,,", job("x", 0, 10, 8), id="8.0 GPUs is the count 8"),
        pytest.param("x,1.5,0.25,1,,,", job("x", 1.5, 0.25), id="fractional seconds are kept"),
        pytest.param(" x ,0,10,1,,,", job("x", 0, 10), id="spaces around the id are dropped"),
    ],
)
def test_usable_rows_in_other_spellings(tmp_path: Path, row: str, want: TraceJob) -> None:
    trace = load_trace(write(tmp_path / "t.csv", [HEADER, row]))
    assert (trace.jobs, trace.skipped) == ([want], 0)


def test_blank_lines_are_not_counted_as_skipped(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path / "t.csv", [HEADER, "a,0,10,1,,,", "", "b,1,10,1,,,", ""]))
    assert (len(trace.jobs), trace.skipped) == (2, 0)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param([], "empty file", id="an empty file"),
        pytest.param(
            ["job_id,submit_time_s,gpus", "a,0,1"],
            "missing required column\\(s\\) duration_s",
            id="a missing required column is named",
        ),
    ],
)
def test_wrong_files_raise(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines))
    with pytest.raises(ValueError, match=message):
        load_trace(path)


@pytest.mark.parametrize(
    ("cell", "want", "skipped"),
    [
        pytest.param("500", 500.0, 0, id="a deadline is absolute seconds, used as is"),
        pytest.param("", None, 0, id="an empty deadline is none"),
        pytest.param("tomorrow", None, 1, id="a deadline that is not a number skips the row"),
    ],
)
def test_deadline_column(tmp_path: Path, cell: str, want: float | None, skipped: int) -> None:
    trace = load_trace(
        write(
            tmp_path / "t.csv",
            ["job_id,submit_time_s,duration_s,gpus,deadline", f"a,0,10,1,{cell}"],
        )
    )
    jobs = [] if skipped else [TraceJob("a", 0, 10, 1, want)]
    assert (trace.jobs, trace.skipped) == (jobs, skipped)


# --------------------------------------------------------------------------- windows


def windowed_trace(tmp_path: Path) -> Path:
    return write(
        tmp_path / "t.csv",
        [
            "job_id,submit_time_s,duration_s,gpus,deadline",
            "a,50,10,1,",
            "b,100,10,1,400",
            "c,250,1000,2,",
            "d,300,10,1,350",
        ],
    )


@pytest.mark.parametrize(
    ("window", "want"),
    [
        pytest.param(
            (100.0, 300.0),
            [TraceJob("b", 0, 10, 1, 300), TraceJob("c", 150, 1000, 2)],
            id="the start is in, the end is out, times and deadlines move to the start",
        ),
        pytest.param(
            (0.0, 1e9),
            [
                TraceJob("a", 50, 10, 1),
                TraceJob("b", 100, 10, 1, 400),
                TraceJob("c", 250, 1000, 2),
                TraceJob("d", 300, 10, 1, 350),
            ],
            id="a window from 0 covering everything changes nothing",
        ),
        pytest.param((400.0, 500.0), [], id="a window after the last submit is empty"),
    ],
)
def test_window_keeps_submits_inside_and_rebases(
    tmp_path: Path, window: tuple[float, float], want: list[TraceJob]
) -> None:
    trace = load_trace(windowed_trace(tmp_path), window=window)
    assert (trace.jobs, trace.window) == (want, window)


@pytest.mark.parametrize(
    "window",
    [
        pytest.param((300.0, 100.0), id="start after end"),
        pytest.param((100.0, 100.0), id="empty window"),
        pytest.param((-1.0, 100.0), id="negative start"),
    ],
)
def test_bad_window_raises(tmp_path: Path, window: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="invalid window"):
        load_trace(windowed_trace(tmp_path), window=window)


@pytest.mark.parametrize(
    ("window", "lead_in", "want_lead", "want"),
    [
        pytest.param(
            (250.0, 400.0),
            150.0,
            150.0,
            [
                TraceJob("b", 0, 10, 1, 300),
                TraceJob("c", 150, 1000, 2),
                TraceJob("d", 200, 10, 1, 250),
            ],
            id="the lead-in's jobs come first; times count from the lead-in's start",
        ),
        pytest.param(
            (100.0, 300.0),
            1000.0,
            100.0,
            [
                TraceJob("a", 50, 10, 1),
                TraceJob("b", 100, 10, 1, 400),
                TraceJob("c", 250, 1000, 2),
            ],
            id="a lead-in longer than the trace before the window stops at the trace's start",
        ),
        pytest.param(
            (100.0, 300.0),
            0.0,
            0.0,
            [TraceJob("b", 0, 10, 1, 300), TraceJob("c", 150, 1000, 2)],
            id="no lead-in is the window alone",
        ),
    ],
)
def test_lead_in_keeps_the_jobs_before_the_window(
    tmp_path: Path,
    window: tuple[float, float],
    lead_in: float,
    want_lead: float,
    want: list[TraceJob],
) -> None:
    trace = load_trace(windowed_trace(tmp_path), window=window, lead_in=lead_in)
    assert (trace.jobs, trace.window, trace.lead_in) == (want, window, want_lead)
    # The window's own jobs are the ones a replay scores, whatever the lead-in.
    alone = load_trace(windowed_trace(tmp_path), window=window)
    assert [(j.job_id, j.submit - want_lead) for j in trace.window_jobs] == [
        (j.job_id, j.submit) for j in alone.jobs
    ]


@pytest.mark.parametrize(
    ("window", "lead_in", "message"),
    [
        pytest.param((100.0, 300.0), -1.0, "invalid lead-in -1.0", id="negative"),
        pytest.param((100.0, 300.0), math.inf, "invalid lead-in inf", id="infinite"),
        pytest.param(None, 3600.0, "a lead-in needs a window", id="no window"),
    ],
)
def test_bad_lead_in_raises(
    tmp_path: Path, window: tuple[float, float] | None, lead_in: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load_trace(windowed_trace(tmp_path), window=window, lead_in=lead_in)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("3600", 3600.0, id="seconds"),
        pytest.param("14d", 14 * DAY, id="days"),
        pytest.param(" 12h ", 12 * 3600.0, id="spaces"),
        pytest.param("0", 0.0, id="none"),
    ],
)
def test_parse_lead_in(text: str, want: float) -> None:
    assert parse_lead_in(text) == want


@pytest.mark.parametrize("text", ["-3d", "3y", "d", "", "3d:4d"])
def test_parse_lead_in_errors(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid lead-in {text!r}: expected a non-negative"):
        parse_lead_in(text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("3600:7200", (3600.0, 7200.0), id="plain seconds"),
        pytest.param("56d:70d", (56 * DAY, 70 * DAY), id="days"),
        pytest.param("12h:36h", (12 * 3600.0, 36 * 3600.0), id="hours"),
        pytest.param("90m:2h", (5400.0, 7200.0), id="units may differ between start and end"),
        pytest.param("0:1w", (0.0, 7 * DAY), id="weeks"),
        pytest.param(" 1.5d : 2.5d ", (1.5 * DAY, 2.5 * DAY), id="fractions and spaces"),
        pytest.param("10s:20s", (10.0, 20.0), id="explicit seconds"),
        pytest.param("busiest14d", BusiestWindow(14), id="the busiest 14 days"),
        pytest.param("busiest7d", BusiestWindow(7), id="the busiest week"),
    ],
)
def test_parse_window(text: str, want: tuple[float, float] | BusiestWindow) -> None:
    assert parse_window(text) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("56d", "expected START:END", id="no colon"),
        pytest.param("1:2:3", "expected START:END", id="two colons"),
        pytest.param("a:b", "'a' is not a non-negative time", id="not numbers"),
        pytest.param("5y:6y", "'5y' is not a non-negative time", id="unknown unit"),
        pytest.param("-1d:2d", "'-1d' is not a non-negative time", id="negative start"),
        pytest.param(":10", "'' is not a non-negative time", id="missing start"),
        pytest.param("70d:56d", "start must be before end", id="start after end"),
        pytest.param("1h:60m", "start must be before end", id="an empty window in two units"),
        pytest.param("busiest0d", "at least 1 day", id="a busiest window of no days"),
        pytest.param("busiest", "expected START:END", id="busiest without a length"),
    ],
)
def test_parse_window_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_window(text)


def daily_jobs(gpu_seconds_by_day: dict[int, float]) -> list[TraceJob]:
    """One 1-GPU job at noon of each day, as long as that day's GPU-seconds."""
    return [
        job(f"d{day}", day * DAY + DAY / 2, seconds)
        for day, seconds in sorted(gpu_seconds_by_day.items())
    ]


@pytest.mark.parametrize(
    ("by_day", "days", "want_day"),
    [
        pytest.param(
            {d: 1.0 for d in range(30)} | {d: 10.0 for d in range(10, 24)},
            14,
            10,
            id="14 busy days in a quiet month are found",
        ),
        pytest.param(
            {0: 5.0, 1: 1.0, 2: 1.0, 3: 5.0, 4: 2.0},
            2,
            3,
            id="the busiest pair of days sums consecutive days",
        ),
        pytest.param({0: 3.0, 1: 1.0, 2: 3.0}, 1, 0, id="ties go to the earliest window"),
        pytest.param(
            {5: 1.0, 6: 2.0}, 14, 5, id="a trace shorter than the window starts at its first day"
        ),
        pytest.param(
            {0: 1.0, 1: 1.0, 30: 50.0},
            2,
            29,
            id="empty days count as zero, so a window may start on one",
        ),
    ],
)
def test_busiest_window(by_day: dict[int, float], days: int, want_day: int) -> None:
    assert busiest_window(daily_jobs(by_day), days=days) == (
        want_day * DAY,
        (want_day + days) * DAY,
    )


def test_busiest_is_by_gpu_seconds_not_job_count() -> None:
    many_small = [job(f"s{i}", 0.5 * DAY + i, 10.0) for i in range(100)]
    one_wide = [job("wide", 1.5 * DAY, 10.0, gpus=128)]
    assert busiest_window(many_small + one_wide, days=1) == (DAY, 2 * DAY)


@pytest.mark.parametrize(
    ("text", "window", "want"),
    [
        pytest.param(None, None, "whole trace", id="no window is the whole trace"),
        pytest.param(
            "busiest14d",
            (61 * DAY, 75 * DAY),
            "busiest14d: days 61-74 of the trace, the 14 whole days with the most GPU-seconds "
            "submitted (GPUs x duration, not job count)",
            id="busiest names its days, first and last, and the measure that chose them",
        ),
        pytest.param(
            "56d:70d",
            (56 * DAY, 70 * DAY),
            "56d:70d: days 56-69 of the trace",
            id="whole days read as the traces README counts them",
        ),
        pytest.param("60d:61d", (60 * DAY, 61 * DAY), "60d:61d: day 60 of the trace", id="a day"),
        pytest.param(
            "12h:36h",
            (0.5 * DAY, 1.5 * DAY),
            "12h:36h: days 0.5 to 1.5 (end exclusive) of the trace",
            id="a window off whole days keeps its fractions",
        ),
    ],
)
def test_describe_window(text: str | None, window: tuple[float, float] | None, want: str) -> None:
    assert describe_window(text, window) == want


def test_busiest_window_through_load_trace_rebases_to_its_day(tmp_path: Path) -> None:
    lines = [HEADER] + [f"d{d},{int(d * DAY + 60)},{s},1,,," for d, s in [(0, 5), (1, 90), (2, 5)]]
    trace = load_trace(write(tmp_path / "t.csv", lines), window=parse_window("busiest1d"))
    assert (trace.jobs, trace.window) == ([job("d1", 60, 90)], (DAY, 2 * DAY))


def test_select_window_matches_load_trace(tmp_path: Path) -> None:
    path = windowed_trace(tmp_path)
    assert (
        select_window(load_trace(path).jobs, (100.0, 300.0))
        == load_trace(path, window=(100.0, 300.0)).jobs
    )


def test_busiest_window_of_nothing_raises() -> None:
    with pytest.raises(ValueError, match="empty trace"):
        busiest_window([])


# --------------------------------------------------------------------------- the real traces


@pytest.mark.parametrize(
    ("name", "jobs", "busiest_day"),
    [
        pytest.param("philly.csv.gz", 111_539, 61, id="Philly: 111,539 jobs"),
        pytest.param("alibaba_openb_2023.csv.gz", 6_203, 109, id="Alibaba 2023: 6,203 pods"),
    ],
)
def test_real_traces_load(name: str, jobs: int, busiest_day: int) -> None:
    path = TRACES / name
    if not path.exists():
        pytest.fail(f"{path} is not on this machine: the traces ship in third_party/traces")
    started = time.perf_counter()
    trace = load_trace(path)
    seconds = time.perf_counter() - started
    # Captured: pytest shows it with a failure, and -q output stays clean.
    print(f"\n{name}: {len(trace.jobs)} jobs, {trace.skipped} skipped, loaded in {seconds:.2f} s")
    assert (len(trace.jobs), trace.skipped) == (jobs, 0)
    assert trace.jobs == sorted(trace.jobs, key=lambda j: (j.submit, j.job_id))
    # The budget is ~1.5 s; twice that leaves room for a busy test machine.
    assert seconds < 3.0
    assert busiest_window(trace.jobs) == (busiest_day * DAY, (busiest_day + 14) * DAY)


def test_philly_busiest_14_days_by_gpu_seconds_are_days_61_to_74() -> None:
    """What BusiestWindow's docstring and `simulate --help` say: 28,479 jobs, 763,004
    GPU-hours; the job-count window (days 56-69) holds more jobs but less work."""
    path = TRACES / "philly.csv.gz"
    if not path.exists():
        pytest.fail(f"{path} is not on this machine: the traces ship in third_party/traces")
    jobs = load_trace(path).jobs
    busiest = load_trace(path, window=BusiestWindow(14))
    assert busiest.window == (61 * DAY, 75 * DAY)
    assert len(busiest.jobs) == 28_479
    by_count = select_window(jobs, (56 * DAY, 70 * DAY))

    def gpu_hours(window: list[TraceJob]) -> int:
        return round(sum(j.gpus * j.duration for j in window) / 3600)

    assert (gpu_hours(busiest.jobs), gpu_hours(by_count)) == (763_004, 654_892)


def test_philly_busiest_days_by_job_count_match_its_readme() -> None:
    """The README's "busiest 14 days: days 56-69, 33,408 jobs" counts jobs, not GPU-seconds."""
    path = TRACES / "philly.csv.gz"
    if not path.exists():
        pytest.fail(f"{path} is not on this machine: the traces ship in third_party/traces")
    assert len(load_trace(path, window=parse_window("56d:70d")).jobs) == 33_408
