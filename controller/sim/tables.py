"""A run's per-job outcomes and risk estimates held column by column.

A replay of the whole Philly trace ends with 111,539 outcomes per run, and the policy's runs
with some 800,000 risk estimates each; `simulate` gathers every run's in one process to report
on them. As objects (an instance, its floats, a dict or strings of its own) an outcome takes
about 600 bytes and an estimate about 350: over a gigabyte of outcomes for the seventeen runs
of `make bench-sim` with the static mixes and the ablations, and 0.8 GiB of estimates for the
policy and its two ablations, more than any worker that replayed one of them (the parent
peaked at 2,594 MiB). As arrays an outcome takes about 150 bytes and an estimate 33, and the
pickle a worker sends back is a few array buffers instead of millions of small objects.

Each table is a read-only `Sequence` of the records it was made from (`JobOutcome`,
`RiskRecord`), read back equal field for field (None kept apart from any number), so reports,
plots and tests read it as they read a list. Making each record again costs a microsecond or
two, so a reader that goes over one several times takes `as_list` of it once, and the plots
read the columns they need (`submit_times`, `started_waits`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

import numpy as np

from controller.sim.attribution import DELAY_CAUSES
from controller.sim.model import JobOutcome, RiskRecord

T = TypeVar("T")

_OPTIONAL = ("first_start", "finish", "deadline", "launch_seconds")
"""Float fields that may be None (held as NaN: none of them is ever NaN itself)."""
_FLOATS = ("submit", "work_gpu_seconds", "used_gpu_seconds", "lost_gpu_seconds", *_OPTIONAL)
_INTS = ("gpus", "interruptions", "preemptions")
_NAMES = ("project", "tier", "cause")
"""Fields held as an index into the table's names (-1 for a cause of None)."""


class _Table(Sequence[T]):
    """What both tables share: records made again by `_rows`, read as a list reads."""

    __slots__ = ()
    _what = "record"
    """What one row is, for errors."""

    def _rows(self, start: int, stop: int) -> Iterator[T]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[T]:
        return self._rows(0, len(self))

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return list(
                itertools.chain.from_iterable(
                    self._rows(i, i + 1) for i in range(*index.indices(len(self)))
                )
            )
        size = len(self)
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError(f"{self._what} index {index} out of range ({size} in all)")
        return next(self._rows(position, position + 1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequences are not hashed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} {self._what}s)"


class OutcomeTable(_Table[JobOutcome]):
    """Outcomes as columns: floats (NaN for None and for a delay not recorded), integers, and
    indices into the names they share (projects, tiers, causes); job ids as one string cut by
    offsets."""

    __slots__ = ("_codes", "_ends", "_floats", "_ids", "_ints", "_names")
    _what = "outcome"

    def __init__(self, outcomes: Iterable[JobOutcome] = ()) -> None:
        """Raises ValueError for a delay under a name that is not a delay cause (the engine
        records none)."""
        rows = list(outcomes)
        names: dict[str, int] = {}
        floats = np.full((len(rows), len(_FLOATS) + len(DELAY_CAUSES)), math.nan)
        ints = np.zeros((len(rows), len(_INTS)), dtype=np.int64)
        codes = np.full((len(rows), len(_NAMES)), -1, dtype=np.int32)
        delay_column = {cause: len(_FLOATS) + i for i, cause in enumerate(DELAY_CAUSES)}
        for i, o in enumerate(rows):
            floats[i, : len(_FLOATS)] = [
                math.nan if v is None else v
                for v in (
                    o.submit,
                    o.work_gpu_seconds,
                    o.used_gpu_seconds,
                    o.lost_gpu_seconds,
                    o.first_start,
                    o.finish,
                    o.deadline,
                    o.launch_seconds,
                )
            ]
            for cause, seconds in o.delays.items():
                column = delay_column.get(cause)
                if column is None:
                    raise ValueError(
                        f"outcome {o.job_id!r}: delays: unknown cause {cause!r} "
                        f"(expected one of {', '.join(DELAY_CAUSES)})"
                    )
                floats[i, column] = seconds
            ints[i] = (o.gpus, o.interruptions, o.preemptions)
            codes[i] = [
                -1 if name is None else names.setdefault(name, len(names))
                for name in (o.project, o.tier, o.cause)
            ]
        self._floats = floats
        self._ints = ints
        self._codes = codes
        self._names = tuple(names)
        self._ids = "".join(o.job_id for o in rows)
        self._ends = np.cumsum([len(o.job_id) for o in rows], dtype=np.int64)

    @classmethod
    def _restore(cls, state: tuple[Any, ...]) -> OutcomeTable:
        table = cls.__new__(cls)
        table._ids, table._ends, table._names, table._codes, table._ints, table._floats = state
        return table

    def __reduce__(self) -> tuple[Any, ...]:
        state = (self._ids, self._ends, self._names, self._codes, self._ints, self._floats)
        return (OutcomeTable._restore, (state,))

    def __len__(self) -> int:
        return len(self._ends)

    def _rows(self, start: int, stop: int) -> Iterator[JobOutcome]:
        # Positional arguments, the delays dict only where there are delays: making the
        # outcomes again is what reading a table costs, twice as fast as by keyword.
        names = self._names
        ends = self._ends[start:stop].tolist()
        begin = int(self._ends[start - 1]) if start > 0 else 0
        ids = self._ids
        make = JobOutcome
        isnan = math.isnan  # None, or a delay not recorded
        quota, node, interrupted, preempted = DELAY_CAUSES
        for end, f, (gpus, interruptions, preemptions), (project, tier, cause) in zip(
            ends,
            self._floats[start:stop].tolist(),
            self._ints[start:stop].tolist(),
            self._codes[start:stop].tolist(),
            strict=True,
        ):
            (submit, work, used, lost, first_start, finish, deadline, launch, q, n, i, p) = f
            if isnan(q) and isnan(n) and isnan(i) and isnan(p):
                delays = {}
            else:
                delays = {
                    c: v
                    for c, v in ((quota, q), (node, n), (interrupted, i), (preempted, p))
                    if not isnan(v)
                }
            yield make(
                ids[begin:end],
                names[project],
                names[tier],
                gpus,
                submit,
                None if isnan(first_start) else first_start,
                None if isnan(finish) else finish,
                None if isnan(deadline) else deadline,
                work,
                used,
                lost,
                interruptions,
                preemptions,
                delays,
                None if cause < 0 else names[cause],
                None if isnan(launch) else launch,
            )
            begin = end

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OutcomeTable):
            return (
                len(self) == len(other)
                and self._ids == other._ids
                and np.array_equal(self._ends, other._ends)
                and np.array_equal(self._ints, other._ints)
                and np.array_equal(self._floats, other._floats, equal_nan=True)
                and [self._names[c] if c >= 0 else None for c in self._codes.ravel().tolist()]
                == [other._names[c] if c >= 0 else None for c in other._codes.ravel().tolist()]
            )
        return super().__eq__(other)

    __hash__ = None  # as the base: an __eq__ of its own would drop it anyway

    @property
    def nbytes(self) -> int:
        """The bytes its columns hold (what `simulate` keeps per run)."""
        return (
            len(self._ids)
            + self._ends.nbytes
            + self._codes.nbytes
            + self._ints.nbytes
            + self._floats.nbytes
        )


class RiskTable(_Table[RiskRecord]):
    """Risk estimates as columns: time, risk and calibrated risk (NaN for None), whether
    missed, and indices into the project and deadline names they share."""

    __slots__ = ("_codes", "_floats", "_missed", "_names")
    _what = "risk estimate"

    def __init__(self, records: Iterable[RiskRecord] = ()) -> None:
        rows = list(records)
        names: dict[str, int] = {}
        self._floats = np.array(
            [(r.time, r.risk, math.nan if r.calibrated is None else r.calibrated) for r in rows],
            dtype=np.float64,
        ).reshape(len(rows), 3)
        self._missed = np.array([r.missed for r in rows], dtype=np.bool_)
        self._codes = np.array(
            [
                (names.setdefault(r.project, len(names)), names.setdefault(r.deadline, len(names)))
                for r in rows
            ],
            dtype=np.int32,
        ).reshape(len(rows), 2)
        self._names = tuple(names)

    @classmethod
    def _restore(cls, state: tuple[Any, ...]) -> RiskTable:
        table = cls.__new__(cls)
        table._floats, table._missed, table._codes, table._names = state
        return table

    def __reduce__(self) -> tuple[Any, ...]:
        return (RiskTable._restore, ((self._floats, self._missed, self._codes, self._names),))

    def __len__(self) -> int:
        return len(self._missed)

    def _rows(self, start: int, stop: int) -> Iterator[RiskRecord]:
        names = self._names
        isnan = math.isnan
        make = RiskRecord
        for (at, risk, calibrated), missed, (project, deadline) in zip(
            self._floats[start:stop].tolist(),
            self._missed[start:stop].tolist(),
            self._codes[start:stop].tolist(),
            strict=True,
        ):
            yield make(
                at,
                names[project],
                names[deadline],
                risk,
                missed,
                None if isnan(calibrated) else calibrated,
            )

    @property
    def nbytes(self) -> int:
        """The bytes its columns hold."""
        return self._floats.nbytes + self._missed.nbytes + self._codes.nbytes


def as_list(records: Sequence[T]) -> Sequence[T]:
    """`records` ready to be read more than once: a table's made into objects once, a list
    as it is."""
    return list(records) if type(records) in (OutcomeTable, RiskTable) else records


def submit_times(outcomes: Sequence[JobOutcome]) -> list[float]:
    """Every outcome's submit time, read from a table's column without making the outcomes."""
    if isinstance(outcomes, OutcomeTable):
        column: list[float] = outcomes._floats[:, _FLOATS.index("submit")].tolist()
        return column
    return [o.submit for o in outcomes]


def started_waits(outcomes: Sequence[JobOutcome]) -> list[tuple[str, float]]:
    """(tier, wait) of every outcome that started, in order (`JobOutcome.wait`: the same
    subtraction, done on a table's columns)."""
    if not isinstance(outcomes, OutcomeTable):
        return [(o.tier, o.wait) for o in outcomes if o.wait is not None]
    first_start = outcomes._floats[:, _FLOATS.index("first_start")]
    started = ~np.isnan(first_start)
    waits = (first_start - outcomes._floats[:, _FLOATS.index("submit")])[started].tolist()
    names = outcomes._names
    tiers = outcomes._codes[started, _NAMES.index("tier")].tolist()
    return [(names[t], w) for t, w in zip(tiers, waits, strict=True)]
