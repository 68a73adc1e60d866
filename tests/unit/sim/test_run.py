"""The command's pieces that are not the engine: which baselines a list names, how many worker
processes replay the runs, and what crosses to a worker and back.

The worker tests start real spawned processes (as `run_replays` does) on a replay of a few
jobs; each takes a second or two, most of it the worker importing numpy and the controller.
"""

from __future__ import annotations

import io
import multiprocessing
import pickle
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from controller.sim import run as sim_run
from controller.sim.engine import BASELINES, POLICY, RunSpec, parse_run, replay
from controller.sim.report import figures_for_runs, run_figures
from controller.sim.run import Inputs, parse_baselines, prepare, run_replays, run_specs

ALL = tuple(BASELINES)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("all", ALL, id="all is the four named baselines"),
        pytest.param("none", (), id="none is no baseline"),
        pytest.param(" none ", (), id="spaces around an item are ignored"),
        pytest.param("reactive,all-spot", ("reactive", "all-spot"), id="names in the order given"),
        pytest.param("reactive,reactive", ("reactive",), id="a repeat runs once"),
        pytest.param(
            "static:0.3,reactive:0.25",
            ("static:0.3", "reactive:0.25"),
            id="parametric baselines are named by their text",
        ),
        pytest.param(
            "static:0.1,0.3,.5",
            ("static:0.1", "static:0.3", "static:.5"),
            id="a bare number continues the kind before it",
        ),
        pytest.param(
            "reactive:0.2,0.4,static:1",
            ("reactive:0.2", "reactive:0.4", "static:1"),
            id="each kind continues until another item",
        ),
        pytest.param(
            "all,static:0.5",
            (*ALL, "static:0.5"),
            id="all among others adds the four named ones",
        ),
        pytest.param(
            "fixed-80-20,all",
            ("fixed-80-20", "on-demand-only", "all-spot", "reactive"),
            id="all after a named one keeps the first place and drops the repeat",
        ),
    ],
)
def test_parse_baselines(text: str, names: tuple[str, ...]) -> None:
    assert parse_baselines(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("cheap", "unknown baseline 'cheap'", id="an unknown name"),
        pytest.param("static:1.5", "a static on-demand fraction is in [0, 1]", id="F over 1"),
        pytest.param("reactive:0", "a reactive threshold is in (0, 1]", id="T of 0"),
        pytest.param("static:", "unknown baseline 'static:'", id="static with no fraction"),
        pytest.param("static:x", "unknown baseline 'static:x'", id="static with a word"),
        pytest.param("0.3", "a bare number (0.3) continues a static:F", id="a number first"),
        pytest.param("reactive,0.3", "a bare number (0.3)", id="a number after a named one"),
        pytest.param("all,,reactive", "an empty item", id="an empty item"),
        pytest.param("", "an empty item", id="nothing"),
        pytest.param("none,reactive", "none stands alone", id="none among others"),
    ],
)
def test_parse_baselines_refuses_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="invalid baselines") as refused:
        parse_baselines(text)
    assert message in str(refused.value)


def test_run_specs_put_the_policy_first_and_read_each_text() -> None:
    specs = run_specs(("fixed-80-20", "static:0.3", "reactive:0.25"))
    assert specs[0] == POLICY
    assert specs[1] == BASELINES["fixed-80-20"]
    assert (specs[2].name, specs[2].kind, specs[2].on_demand_fraction) == (
        "static:0.3",
        "static",
        0.3,
    )
    assert (specs[3].name, specs[3].kind, specs[3].threshold) == ("reactive:0.25", "reactive", 0.25)


@pytest.mark.parametrize(
    ("runs", "jobs", "cores", "workers"),
    [
        pytest.param(5, None, 2, 2, id="by default one per core"),
        pytest.param(5, None, 16, 5, id="never more than one per run"),
        pytest.param(5, 1, 16, 1, id="jobs 1 replays in this process"),
        pytest.param(5, 3, 2, 3, id="jobs asks for more than the cores"),
        pytest.param(1, None, 8, 1, id="one run, one process"),
        pytest.param(0, None, 8, 1, id="no runs still count one"),
        pytest.param(5, None, None, 1, id="unknown cores count one"),
    ],
)
def test_worker_count(
    monkeypatch: pytest.MonkeyPatch, runs: int, jobs: int | None, cores: int | None, workers: int
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert sim_run.worker_count(runs, jobs) == workers


# --------------------------------------------------------------------------- workers


def small_inputs(tmp_path: Path) -> Inputs:
    pick = random.Random(7)
    rows = ["job_id,submit_time_s,duration_s,gpus"]
    for i in range(20):
        submit, duration = pick.uniform(0, 6 * 3600), pick.uniform(600, 3 * 3600)
        rows.append(f"job-{i},{submit:.0f},{duration:.0f},{pick.choice((1, 2, 4, 8))}")
    path = tmp_path / "small.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return prepare(path, seed=2)


def test_what_a_worker_is_sent_and_returns_survives_pickling(tmp_path: Path) -> None:
    inputs = small_inputs(tmp_path)
    assert pickle.loads(pickle.dumps(inputs.policy_set)) == inputs.policy_set
    assert pickle.loads(pickle.dumps(inputs.jobs)) == inputs.jobs
    spec = run_specs(["reactive:0.2"])[1]
    assert pickle.loads(pickle.dumps(spec)) == spec
    result = replay(inputs.policy_set, inputs.jobs, POLICY, seed=2)
    assert result.risk_log, "the policy run records its risks"
    assert pickle.loads(pickle.dumps(result)) == result


MATPLOTLIB_LOADED = "sorted(m for m in __import__('sys').modules if m.startswith('matplotlib'))"


def test_a_worker_replays_without_importing_matplotlib(tmp_path: Path) -> None:
    """The worker replays a run, then reports the matplotlib modules it holds: none, though
    this process may have imported matplotlib (spawned workers start clean)."""
    inputs = small_inputs(tmp_path)
    with ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=sim_run._start_worker,
        initargs=(inputs.policy_set, inputs.jobs, inputs.scored_from),
    ) as pool:
        result, figures, wall, rss = pool.submit(sim_run._replay_in_worker, POLICY, 2).result()
        loaded = pool.submit(eval, MATPLOTLIB_LOADED).result()
    assert loaded == []
    here = replay(inputs.policy_set, inputs.jobs, POLICY, seed=2)
    assert replace(result, wall_seconds=0.0) == replace(here, wall_seconds=0.0)
    assert figures == run_figures(here, tiers=[t.name for t in inputs.policy_set.policy.spec.tiers])
    assert wall > 0 and rss > 0


def test_parallel_replays_return_in_spec_order_with_a_line_per_run(tmp_path: Path) -> None:
    inputs = small_inputs(tmp_path)
    specs = [POLICY, RunSpec("static:0.5", "static", 0.5), BASELINES["on-demand-only"]]
    err = io.StringIO()
    replayed = run_replays(inputs, specs, seed=2, err=err, jobs=2)
    results, measurements = replayed.results, replayed.measurements
    names = ["policy", "static:0.5", "on-demand-only"]
    assert [r.name for r in results] == [m.name for m in measurements] == names
    in_process = run_replays(inputs, specs, seed=2, err=io.StringIO(), jobs=1)
    for parallel, here in zip(results, in_process.results, strict=True):
        assert parallel.outcomes == here.outcomes
        assert parallel.risk_log == here.risk_log
    # Figures made run by run where each replayed are those made of all results at the end.
    tiers = [t.name for t in inputs.policy_set.policy.spec.tiers]
    assert replayed.figures == in_process.figures == figures_for_runs(results, tiers=tiers)
    # Costs relative to on-demand-only's, though the worker that made each run's figures did
    # not know it.
    assert replayed.figures[-1].cost_vs_on_demand_only == 100.0
    assert replayed.figures[1].cost_vs_on_demand_only == pytest.approx(
        100.0
        * sum(results[1].cost_by_capacity_type.values())
        / sum(results[2].cost_by_capacity_type.values())
    )
    lines = err.getvalue().splitlines()
    assert lines[0] == "replaying 3 runs in 2 worker processes"
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(names)
    assert all("jobs finished in" in line for line in lines[1:])
    assert "\r" not in err.getvalue(), "no progress bars from workers"


@pytest.mark.parametrize(
    ("text", "lanes", "deadline_order"),
    [("policy-fifo", True, False), ("policy-no-lanes", False, True)],
)
def test_the_ablations_are_the_policy_with_one_lever_off(
    text: str, lanes: bool, deadline_order: bool
) -> None:
    spec = parse_run(text)
    assert (spec.name, spec.kind, spec.lanes, spec.deadline_order) == (
        text,
        "policy",
        lanes,
        deadline_order,
    )
    assert parse_baselines(f"all,{text}")[-1] == text


def test_the_policy_and_its_ablations_are_submitted_first() -> None:
    specs = run_specs(
        parse_baselines("on-demand-only,reactive,static:0.5,policy-fifo,policy-no-lanes")
    )
    assert [s.name for s in specs][:1] == ["policy"]
    order = sim_run.submission_order(specs)
    assert [specs[i].name for i in order] == [
        "policy",
        "policy-fifo",
        "policy-no-lanes",
        "on-demand-only",
        "reactive",
        "static:0.5",
    ]
    assert sim_run.submission_order([]) == []
