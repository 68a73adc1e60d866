"""The column-wise outcomes and risk estimates read back as the records they were made from,
field for field."""

from __future__ import annotations

import pickle
import sys
from dataclasses import astuple, replace

import pytest

from controller.sim.model import (
    INTERRUPTED,
    PREEMPTED,
    WAITED_FOR_NODE,
    WAITED_FOR_QUOTA,
    JobOutcome,
    RiskRecord,
)
from controller.sim.tables import OutcomeTable, RiskTable, as_list, started_waits, submit_times

OUTCOMES = [
    # Met, no delays: every optional field set.
    JobOutcome(
        job_id="a-1",
        project="research-1",
        tier="research",
        gpus=1,
        submit=10.0,
        first_start=10.0,
        finish=76.0,
        deadline=90.5,
        work_gpu_seconds=66.0,
        used_gpu_seconds=66.0,
        lost_gpu_seconds=0.0,
        interruptions=0,
        preemptions=0,
        launch_seconds=300.0,
    ),
    # Never started, no deadline, no launch figure: every optional None, a cause too.
    JobOutcome(
        job_id="",
        project="prod-2",
        tier="production",
        gpus=64,
        submit=0.0,
        first_start=None,
        finish=None,
        deadline=None,
        work_gpu_seconds=64 * 3600.0,
        used_gpu_seconds=0.0,
        lost_gpu_seconds=0.0,
        interruptions=0,
        preemptions=0,
    ),
    # Missed after every delay, one of them zero (recorded, not absent), and -0.0 kept.
    JobOutcome(
        job_id="job with spaces é",
        project="research-1",
        tier="research",
        gpus=8,
        submit=-0.0,
        first_start=1.5,
        finish=1e9,
        deadline=2.0,
        work_gpu_seconds=8.0,
        used_gpu_seconds=24.0,
        lost_gpu_seconds=16.0,
        interruptions=2,
        preemptions=1,
        delays={PREEMPTED: 3.25, WAITED_FOR_QUOTA: 0.0, WAITED_FOR_NODE: 7.0, INTERRUPTED: 9.5},
        cause=INTERRUPTED,
        launch_seconds=45.0,
    ),
]


def fields(outcome: JobOutcome) -> tuple[object, ...]:
    """Every field with its type, so 0 and 0.0 or None and NaN would differ."""
    return tuple(
        (type(getattr(outcome, name)), getattr(outcome, name))
        for name in JobOutcome.__dataclass_fields__
    )


def test_reads_back_every_field_and_type() -> None:
    table = OutcomeTable(OUTCOMES)
    assert len(table) == 3
    assert [fields(o) for o in table] == [fields(o) for o in OUTCOMES]
    # The -0.0 submit stays negative zero (a sign a report could print).
    assert str(table[2].submit) == "-0.0"
    # A delay recorded as 0.0 is kept apart from one not recorded.
    assert table[2].delays[WAITED_FOR_QUOTA] == 0.0
    assert table[0].delays == {}


def test_indexing_and_slices_as_a_list() -> None:
    table = OutcomeTable(OUTCOMES)
    assert table[-1] == OUTCOMES[-1]
    assert table[1] == OUTCOMES[1]
    assert table[1:] == OUTCOMES[1:]
    assert table[::-1] == OUTCOMES[::-1]
    with pytest.raises(IndexError, match=r"outcome index 3 out of range \(3 in all\)"):
        table[3]
    with pytest.raises(IndexError):
        table[-4]


def test_equality_with_lists_tables_and_pickles() -> None:
    table = OutcomeTable(OUTCOMES)
    assert table == OUTCOMES
    assert table == OutcomeTable(OUTCOMES)
    assert table != OutcomeTable(OUTCOMES[:2])
    assert table != OutcomeTable([*OUTCOMES[:2], OUTCOMES[0]])
    copy = pickle.loads(pickle.dumps(table))
    assert isinstance(copy, OutcomeTable)
    assert copy == table
    assert list(copy) == OUTCOMES
    assert OutcomeTable() == []
    assert list(OutcomeTable()) == []


def test_unknown_delay_cause_is_refused_by_name() -> None:
    odd = replace(OUTCOMES[1], job_id="x", delays={"stuck": 1.0})
    with pytest.raises(ValueError, match=r"'x': delays: unknown cause 'stuck'"):
        OutcomeTable([odd])


def test_holds_a_fraction_of_the_objects_memory() -> None:
    many = [OUTCOMES[i % 3] for i in range(3_000)]

    def held(o: JobOutcome) -> int:
        """What one outcome object takes in a replay's list: the instance, its delays, and its
        floats and job id (a replay's are its own; names are shared)."""
        own = [getattr(o, name) for name in JobOutcome.__dataclass_fields__]
        return (
            sys.getsizeof(o)
            + sys.getsizeof(o.delays)
            + sum(sys.getsizeof(v) for v in own if isinstance(v, float))
            + sum(sys.getsizeof(v) for v in o.delays.values())
            + sys.getsizeof(o.job_id)
        )

    objects = sum(held(o) for o in many)
    assert OutcomeTable(many).nbytes < objects / 3


def test_as_list_makes_a_table_into_objects_once() -> None:
    table = OutcomeTable(OUTCOMES)
    read = as_list(table)
    assert isinstance(read, list)
    assert read == OUTCOMES
    plain = list(OUTCOMES)
    assert as_list(plain) is plain


def test_columns_read_without_making_outcomes_match_the_outcomes() -> None:
    table = OutcomeTable(OUTCOMES)
    assert submit_times(table) == submit_times(OUTCOMES) == [10.0, 0.0, -0.0]
    # The job that never started has no wait; the others' waits are first start - submit.
    assert started_waits(table) == started_waits(OUTCOMES) == [("research", 0.0), ("research", 1.5)]
    assert started_waits(OutcomeTable()) == []


RECORDS = [
    RiskRecord(0.0, "research-3", "d294", 0.0, False, 0.0),
    RiskRecord(900.0, "prod-1", "nightly", 0.625, True, None),
    RiskRecord(-0.0, "research-3", "nightly", 1.0, False, 0.999),
]


def test_risk_table_reads_back_every_field_and_type() -> None:
    table = RiskTable(RECORDS)
    assert len(table) == 3
    got = [tuple((type(v), v) for v in astuple(r)) for r in table]
    assert got == [tuple((type(v), v) for v in astuple(r)) for r in RECORDS]
    assert table[1].calibrated is None
    assert table[-1] == RECORDS[-1]
    assert table[:2] == RECORDS[:2]
    with pytest.raises(IndexError, match=r"risk estimate index -4 out of range \(3 in all\)"):
        table[-4]
    copy = pickle.loads(pickle.dumps(table))
    assert isinstance(copy, RiskTable)
    assert copy == table == RECORDS
    assert table != RECORDS[:2]
    assert RiskTable() == []
    assert as_list(table) == RECORDS
    # 3 floats, a bool and 2 name indices: 33 bytes an estimate.
    assert table.nbytes == 3 * 33


def test_tables_are_not_hashed_and_say_what_they_hold() -> None:
    with pytest.raises(TypeError):
        hash(OutcomeTable(OUTCOMES))
    with pytest.raises(TypeError):
        hash(RiskTable(RECORDS))
    assert repr(OutcomeTable(OUTCOMES)) == "OutcomeTable(3 outcomes)"
    assert repr(RiskTable(RECORDS)) == "RiskTable(3 risk estimates)"
