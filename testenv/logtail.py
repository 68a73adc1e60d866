"""The controller's JSON log, read as it grows: passes, levels, events, errors.

`quartermaster run --log-format json` writes one structlog entry a line. A soak or a bench run
against the process reads its passes (`reconciled`: seconds and writes), its warnings and
errors, and its capacity decisions from there, as an operator's log pipeline would, without
reaching into the process. Parsing a line is pure (`LogTail.feed`); `poll` only reads what the
file gained since the last call.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

WRITE_FIELDS = ("created", "updated", "pruned", "status_writes", "boosts")
"""The fields of a `reconciled` entry that count the pass's writes."""
ERROR_LEVELS = ("error", "critical", "exception")
KEPT_ERRORS = 20
"""Error lines kept verbatim: enough to read, and a failing soak does not grow with them."""


def epoch_of(timestamp: str) -> float:
    """Epoch seconds of a log timestamp (ISO 8601, `Z` or an offset)."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def writes_in(entry: Mapping[str, Any]) -> int:
    """Objects created, updated, pruned, statuses and boosts written by one `reconciled` pass."""
    return sum(int(entry.get(k, 0)) for k in WRITE_FIELDS)


@dataclass(frozen=True)
class Pass:
    """One `reconciled` log line."""

    ended: float
    """Epoch seconds, from the log's timestamp."""
    seconds: float
    created: int
    updated: int
    pruned: int
    status_writes: int
    boosts: int = 0

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.pruned + self.status_writes + self.boosts


@dataclass
class LogTail:
    """Reads the controller's JSON log as it grows: passes, levels, events, errors."""

    path: Path
    offset: int = 0
    rest: bytes = b""
    passes: list[Pass] = field(default_factory=list)
    levels: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    warnings: list[tuple[float, str]] = field(default_factory=list)
    """(epoch seconds, event) of every warning."""
    decisions: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    not_json: int = 0

    def poll(self) -> None:
        """Read what the file gained; a line not ended yet waits for the next poll."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        self.feed(data)

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the log, whole lines or not."""
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        for raw in lines:
            if raw.strip():
                self._line(raw)

    def _line(self, raw: bytes) -> None:
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError:
            self.not_json += 1
            if len(self.errors) < KEPT_ERRORS:
                self.errors.append(f"(not JSON) {raw[:200].decode(errors='replace')}")
            return
        level = str(entry.get("level", ""))
        event = str(entry.get("event", ""))
        self.levels[level] += 1
        self.events[event] += 1
        if level == "warning":
            self.warnings.append(
                (epoch_of(str(entry.get("timestamp", "1970-01-01T00:00:00Z"))), event)
            )
        if level in ERROR_LEVELS and len(self.errors) < KEPT_ERRORS:
            self.errors.append(json.dumps(entry)[:400])
        if event == "capacity_decision":
            self.decisions[f"{entry.get('action')}/{entry.get('reason')}"] += 1
        if event == "reconciled":
            self.passes.append(
                Pass(
                    ended=epoch_of(str(entry["timestamp"])),
                    seconds=float(entry.get("seconds", 0.0)),
                    created=int(entry.get("created", 0)),
                    updated=int(entry.get("updated", 0)),
                    pruned=int(entry.get("pruned", 0)),
                    status_writes=int(entry.get("status_writes", 0)),
                    boosts=int(entry.get("boosts", 0)),
                )
            )

    def passes_between(self, start: float, end: float) -> list[Pass]:
        return [p for p in self.passes if start <= p.ended < end]

    @property
    def error_lines(self) -> int:
        return sum(self.levels[level] for level in ERROR_LEVELS)


def logged(path: Path, event: str, *, since_wall: float) -> list[dict[str, Any]]:
    """Every entry of the log at `path` named `event`, from `since_wall` on (epoch seconds);
    lines that are not JSON, and entries without a timestamp, are passed over."""
    found = []
    for raw in path.read_bytes().splitlines():
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError:
            continue
        stamp = entry.get("timestamp")
        if entry.get("event") != event or not isinstance(stamp, str):
            continue
        if epoch_of(stamp) >= since_wall:
            found.append(entry)
    return found
