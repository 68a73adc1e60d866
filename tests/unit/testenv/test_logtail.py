"""The controller's JSON log read on constructed lines: passes, warnings, errors, decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testenv.logtail import LogTail, Pass, epoch_of, logged, writes_in

T0 = "2031-02-03T10:00:00Z"
T0_EPOCH = 1927879200.0


def entry(event: str, *, level: str = "info", at: str = T0, **fields: Any) -> bytes:
    return json.dumps({"event": event, "level": level, "timestamp": at, **fields}).encode()


def reconciled(at: str, seconds: float, **writes: int) -> bytes:
    line = {"event": "reconciled", "level": "info", "timestamp": at, "seconds": seconds}
    return json.dumps({**line, **writes}).encode()


def test_timestamps_read_with_z_or_an_offset() -> None:
    assert epoch_of(T0) == T0_EPOCH
    assert epoch_of("2031-02-03T11:00:00+01:00") == T0_EPOCH


def test_a_line_split_across_reads_is_taken_once_whole() -> None:
    tail = LogTail(Path("unused"))
    line = reconciled(T0, 0.25, created=2) + b"\n"
    tail.feed(line[:10])
    assert tail.passes == []
    tail.feed(line[10:])
    assert tail.passes == [Pass(T0_EPOCH, 0.25, 2, 0, 0, 0)]
    assert tail.rest == b""


def test_passes_count_every_write_and_are_found_by_when_they_ended() -> None:
    tail = LogTail(Path("unused"))
    tail.feed(
        reconciled(T0, 0.5, created=1, updated=2, pruned=3, status_writes=4)
        + b"\n"
        + reconciled("2031-02-03T10:00:10Z", 0.1)
        + b"\n"
    )
    assert [p.writes for p in tail.passes] == [10, 0]
    assert [p.seconds for p in tail.passes_between(T0_EPOCH + 1, T0_EPOCH + 60)] == [0.1]
    assert tail.passes_between(T0_EPOCH, T0_EPOCH) == []


def test_levels_warnings_errors_and_decisions_are_tallied() -> None:
    tail = LogTail(Path("unused"))
    lines = [
        entry("history_unavailable", level="warning", at="2031-02-03T10:00:05Z"),
        entry("reconcile_failed", level="error", error="boom"),
        entry("capacity_decision", action="raise", reason="DeadlineAtRisk"),
        entry("capacity_decision", action="raise", reason="DeadlineAtRisk"),
        b"Traceback (most recent call last):",
        b"   ",
    ]
    tail.feed(b"\n".join(lines) + b"\n")
    assert tail.warnings == [(T0_EPOCH + 5, "history_unavailable")]
    assert tail.error_lines == 1
    assert tail.not_json == 1
    assert tail.errors[0].startswith('{"event": "reconcile_failed"')
    assert tail.errors[1] == "(not JSON) Traceback (most recent call last):"
    assert tail.decisions == {"raise/DeadlineAtRisk": 2}
    assert tail.events["capacity_decision"] == 2
    assert tail.levels == {"warning": 1, "error": 1, "info": 2}


def test_poll_reads_only_what_the_file_gained(tmp_path: Path) -> None:
    path = tmp_path / "controller.log"
    tail = LogTail(path)
    tail.poll()  # no file yet: nothing, no error
    path.write_bytes(reconciled(T0, 0.2) + b"\n" + reconciled(T0, 0.3)[:5])
    tail.poll()
    assert [p.seconds for p in tail.passes] == [0.2]
    with path.open("ab") as handle:
        handle.write(reconciled(T0, 0.3)[5:] + b"\n")
    tail.poll()
    assert [p.seconds for p in tail.passes] == [0.2, 0.3]


def test_logged_finds_one_event_from_a_time_on(tmp_path: Path) -> None:
    path = tmp_path / "controller.log"
    path.write_bytes(
        b"\n".join(
            [
                entry("cache_synced", seconds=1.0, at="2031-02-03T09:59:59Z"),
                b"not json",
                entry("cache_synced", seconds=2.0),
                entry("reconciled", seconds=3.0),
                json.dumps({"event": "cache_synced"}).encode(),  # no timestamp
            ]
        )
    )
    assert [e["seconds"] for e in logged(path, "cache_synced", since_wall=T0_EPOCH)] == [2.0]


def test_writes_in_a_reconciled_entry() -> None:
    assert writes_in({"created": 1, "updated": 2, "pruned": 0, "status_writes": 4}) == 7
    assert writes_in({"status_writes": 4, "boosts": 3}) == 7
    assert writes_in({"event": "reconciled"}) == 0
