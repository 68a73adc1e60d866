"""The sweep's grid file: what is refused and why, the cells a grid expands to, their keys, and
the policy settings applied to a policy's documents. All pure: no trace is read."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.sim.sweep_grid import (
    Cell,
    Grid,
    GridError,
    OverrideError,
    TraceInput,
    apply_overrides,
    cell_key,
    expand_cells,
    indexed_path,
    parse_grid,
    parse_override_path,
    value_errors,
)
from tests.builders import policy_doc, pool_doc, project_doc

TRACES: dict[str, Any] = {"traces": ["alibaba_openb_2023.csv.gz"]}


def refused(grid: Any) -> list[str]:
    with pytest.raises(GridError) as caught:
        parse_grid(grid)
    return list(caught.value.errors)


@pytest.mark.parametrize(
    ("grid", "error"),
    [
        pytest.param(
            {**TRACES, "seed": [1]},
            "seed: unknown field; expected traces, windows, seeds, baselines, policy, overrides",
            id="unknown key",
        ),
        pytest.param(
            {**TRACES, "seeds": [0, "one"]},
            'seeds[1]: must be an integer >= 0, got "one"',
            id="bad seed: not a number",
        ),
        pytest.param(
            {**TRACES, "seeds": [-1]},
            "seeds[0]: must be an integer >= 0, got -1",
            id="bad seed: negative",
        ),
        pytest.param(
            {**TRACES, "seeds": [True]},
            "seeds[0]: must be an integer >= 0, got true",
            id="bad seed: a boolean",
        ),
        pytest.param(
            {**TRACES, "seeds": [1, 1]}, "seeds[1]: duplicate seed 1", id="bad seed: repeated"
        ),
        pytest.param(
            {**TRACES, "baselines": ["static:0", "cheapest"]},
            "baselines: invalid baselines 'static:0,cheapest': unknown baseline 'cheapest': "
            "expected one of on-demand-only, all-spot, fixed-80-20, reactive, policy-fifo, "
            "policy-no-lanes, policy-declared-runtimes, policy-pods-ready, policy-raw, "
            "static:F (F in [0, 1]) or reactive:T (T in (0, 1])",
            id="unknown baseline",
        ),
        pytest.param(
            {**TRACES, "baselines": "static:1.5"},
            "baselines: invalid baselines 'static:1.5': 'static:1.5': a static on-demand "
            "fraction is in [0, 1]",
            id="baseline out of range",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.raiseTreshold": [0.1]}},
            "overrides.risk.raiseTreshold: unknown field 'raiseTreshold' in spec.risk (its "
            "fields: raiseThreshold, lowerThreshold, evaluationWindowSeconds, cooldownSeconds, "
            "maxStepGpus, priorityBoost, learnRuntimes, lostBelow, lostMaxWaitSeconds, "
            "priorityBoostValue, samples)",
            id="unknown policy path: a field",
        ),
        pytest.param(
            {**TRACES, "overrides": {"budget.limit": [1]}},
            "overrides.budget.limit: unknown field 'budget' in spec (its fields: tiers, pools, "
            "risk, override, prometheus)",
            id="unknown policy path: at the top",
        ),
        pytest.param(
            {**TRACES, "overrides": {"tiers.demoteLost": [True]}},
            "overrides.tiers.demoteLost: spec.tiers is a list: name an item by its name, as "
            "tiers[NAME].demoteLost",
            id="unknown policy path: a list without its item",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk[fast].samples": [100]}},
            "overrides.risk[fast].samples: spec.risk is not a list of named items: [fast] "
            "selects nothing in it",
            id="unknown policy path: an item of what is no list",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.samples.count": [100]}},
            "overrides.risk.samples.count: spec.risk.samples is an integer, which has no field "
            "'count': override it whole",
            id="unknown policy path: a field of a number",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.raiseThreshold": [0.1, 1.5]}},
            "overrides.risk.raiseThreshold[1]: spec.risk.raiseThreshold: must be less than or "
            "equal to 1, got 1.5",
            id="bad value: out of bounds",
        ),
        pytest.param(
            {**TRACES, "overrides": {"tiers[production].demoteLost": ["yes"]}},
            "overrides.tiers[production].demoteLost[0]: spec.tiers[production].demoteLost: "
            'must be a boolean, got string "yes"',
            id="bad value: wrong type",
        ),
        pytest.param(
            {**TRACES, "overrides": {"tiers[research].preemption": ["Sometimes"]}},
            "overrides.tiers[research].preemption[0]: spec.tiers[research].preemption: "
            'unsupported value "Sometimes"; supported values: "Never", "LowerPriority", "Any"',
            id="bad value: not in the enum",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.samples": 10}},
            "overrides.risk.samples: spec.risk.samples: must be greater than or equal to 50, "
            "got 10",
            id="bad value: a single one",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.samples": [100, 100]}},
            "overrides.risk.samples[1]: duplicate value 100",
            id="bad value: repeated",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.samples": []}},
            "overrides.risk.samples: must list at least one value",
            id="no value",
        ),
        pytest.param(
            {**TRACES, "overrides": {"risk.samples": [100], "spec.risk.samples": [200]}},
            "overrides.spec.risk.samples: names spec.risk.samples, as overrides.risk.samples does",
            id="one field twice",
        ),
        pytest.param(
            {"traces": [{"trace": "philly.csv.gz", "window": "14d"}]},
            "traces[0].window: invalid window '14d': expected START:END (seconds, or with a unit "
            "s/m/h/d/w, e.g. 56d:70d) or busiestNd (e.g. busiest14d)",
            id="bad window",
        ),
        pytest.param(
            {"traces": [{"trace": "philly.csv.gz", "leadIn": "3d"}]},
            "traces[0].leadIn: needs a window (a whole trace has nothing before it)",
            id="lead-in without a window",
        ),
        pytest.param(
            {"traces": [{"trace": "philly.csv.gz", "file": "a.csv"}]},
            "traces[0].file: unknown field; expected trace, window, leadIn",
            id="unknown key in a trace",
        ),
        pytest.param(
            {"seeds": [0]},
            "traces: must be a non-empty list of trace files (a name in third_party/traces, or "
            "a path), or of {trace, window, leadIn} mappings; got null",
            id="no traces",
        ),
        pytest.param(
            {**TRACES, "windows": ["2d:1d"]},
            "windows[0]: invalid window '2d:1d': start must be before end",
            id="bad window in windows",
        ),
        pytest.param(
            ["philly.csv.gz"],
            "grid: must be a mapping of traces, windows, seeds, baselines, policy, overrides, "
            'got ["philly.csv.gz"]',
            id="not a mapping",
        ),
    ],
)
def test_a_bad_grid_is_refused_naming_the_field_and_why(grid: Any, error: str) -> None:
    assert refused(grid) == [error]


def test_every_problem_is_named_at_once() -> None:
    errors = refused(
        {**TRACES, "seeds": ["x"], "baselines": "bogus", "overrides": {"risk.nope": [1]}}
    )

    assert [e.split(":")[0] for e in errors] == ["seeds[0]", "baselines", "overrides.risk.nope"]


def test_a_grid_as_written_and_its_defaults() -> None:
    grid = parse_grid(
        {
            "traces": [
                "alibaba_openb_2023.csv.gz",
                {"trace": "philly.csv.gz", "window": "busiest14d", "leadIn": "3d"},
            ],
            "windows": [None, "120d:121d"],
            "overrides": {"risk.raiseThreshold": [0.1, 0.3], "tiers[production].demoteLost": True},
        }
    )

    assert grid.inputs == (
        TraceInput("alibaba_openb_2023.csv.gz"),
        TraceInput("alibaba_openb_2023.csv.gz", "120d:121d"),
        TraceInput("philly.csv.gz", "busiest14d", "3d"),
    )
    assert grid.seeds == (0,)
    assert grid.baselines == ("on-demand-only", "all-spot", "fixed-80-20", "reactive")
    assert grid.policy is None
    assert [(o.text, o.values) for o in grid.overrides] == [
        ("risk.raiseThreshold", (0.1, 0.3)),
        ("tiers[production].demoteLost", (True,)),
    ]
    assert grid.swept == ("risk.raiseThreshold",)
    assert grid.inputs[2].label == "philly.csv.gz (busiest14d, lead-in 3d)"
    assert grid.inputs[2].lead_in_seconds == 3 * 86400.0


@pytest.mark.parametrize(
    ("text", "policy_path", "container"),
    [
        ("risk.raiseThreshold", "spec.risk.raiseThreshold", "RiskSettings"),
        ("spec.risk.raiseThreshold", "spec.risk.raiseThreshold", "RiskSettings"),
        ("tiers[production].demoteLost", "spec.tiers[production].demoteLost", "Tier"),
        ("pools[gpu].prices.spotPerGpuHour", "spec.pools[gpu].prices.spotPerGpuHour", "Prices"),
        (
            "tiers[research].reserved[gpu].gpus",
            "spec.tiers[research].reserved[gpu].gpus",
            "Reservation",
        ),
        ("risk", "spec.risk", "CapacityPolicySpec"),
    ],
)
def test_override_paths_name_fields_as_the_policy_yaml_does(
    text: str, policy_path: str, container: str
) -> None:
    path = parse_override_path(text)

    assert path.policy_path == policy_path
    assert path.container.__name__ == container


def test_a_value_is_judged_by_its_fields_own_parser_alone() -> None:
    """Rules between fields wait for the whole policy: 0.01 is a fine raise threshold on its
    own, though below the default lower threshold."""
    path = parse_override_path("risk.raiseThreshold")

    assert value_errors(path, 0.01) == []
    assert value_errors(path, "high") == [
        'spec.risk.raiseThreshold: must be a number, got string "high"'
    ]


def grid_of(**fields: Any) -> Grid:
    return parse_grid({**TRACES, **fields})


def test_cells_go_by_input_then_settings_then_seed() -> None:
    grid = parse_grid(
        {
            "traces": ["a.csv", {"trace": "b.csv", "window": "1d:2d"}],
            "seeds": [0, 1],
            "overrides": {"risk.raiseThreshold": [0.1, 0.3], "risk.samples": [100]},
        }
    )

    cells = expand_cells(grid)

    assert [
        (c.index, c.input.trace, dict(c.settings)["risk.raiseThreshold"], c.seed) for c in cells
    ] == [
        (0, "a.csv", 0.1, 0),
        (1, "a.csv", 0.1, 1),
        (2, "a.csv", 0.3, 0),
        (3, "a.csv", 0.3, 1),
        (4, "b.csv", 0.1, 0),
        (5, "b.csv", 0.1, 1),
        (6, "b.csv", 0.3, 0),
        (7, "b.csv", 0.3, 1),
    ]
    assert cells[6].label == ("b.csv (1d:2d) seed 0 [risk.raiseThreshold=0.3, risk.samples=100]")


def key(cell: Cell, **changes: Any) -> str:
    given: dict[str, Any] = {
        "baselines": ("static:0",),
        "trace_digest": "aa",
        "policy_digest": None,
        **changes,
    }
    return cell_key(cell, **given)


def test_a_cells_key_is_stable_and_changes_with_what_decides_its_result() -> None:
    cell = expand_cells(grid_of(seeds=[3], overrides={"risk.samples": [100]}))[0]
    same = Cell(99, cell.input, cell.seed, cell.settings)  # its place in the grid is no input

    assert key(cell) == key(same)
    assert key(cell).startswith("alibaba_openb_2023-seed3-")
    assert (
        len(
            {
                key(cell),
                key(cell, trace_digest="bb"),
                key(cell, baselines=("static:1",)),
                key(cell, policy_digest="cc"),
                key(Cell(0, cell.input, 4, cell.settings)),
                key(Cell(0, cell.input, 3, (("risk.samples", 200),))),
                key(Cell(0, TraceInput(cell.input.trace, "1d:2d"), 3, cell.settings)),
            }
        )
        == 7
    )


def policy_documents() -> list[tuple[str, Any]]:
    return [
        ("policy.yaml", policy_doc(pools=[pool_doc("gpu")])),
        ("project.yaml", project_doc(quotas=[{"pool": "gpu", "nominalGpus": 16}])),
    ]


def applied(settings: dict[str, Any]) -> dict[str, Any]:
    documents = apply_overrides(
        policy_documents(), [(parse_override_path(p), v) for p, v in settings.items()]
    )
    spec: dict[str, Any] = documents[0][1]["spec"]
    return spec


@pytest.mark.parametrize(
    ("settings", "read", "want"),
    [
        pytest.param(
            {"risk.raiseThreshold": 0.3},
            lambda s: s["risk"]["raiseThreshold"],
            0.3,
            id="a field of a mapping",
        ),
        pytest.param(
            {"tiers[production].demoteLost": True},
            lambda s: [t.get("demoteLost") for t in s["tiers"]],
            [True, None],
            id="a field of one named item",
        ),
        pytest.param(
            {"pools[gpu].warmPool.maxGpus": 8},
            lambda s: s["pools"][0]["warmPool"],
            {"maxGpus": 8},
            id="a mapping the policy left out is added",
        ),
        pytest.param(
            {"pools[gpu].zones": ["zone-b"]},
            lambda s: s["pools"][0]["zones"],
            ["zone-b"],
            id="a list whole",
        ),
        pytest.param(
            {"pools[gpu].spotAvailability": None},
            lambda s: "spotAvailability" in s["pools"][0],
            False,
            id="null removes the field",
        ),
    ],
)
def test_overrides_set_fields_of_the_policys_documents(
    settings: dict[str, Any], read: Any, want: Any
) -> None:
    assert read(applied(settings)) == want


def test_overrides_change_copies_and_the_result_loads() -> None:
    documents = policy_documents()
    changed = apply_overrides(documents, [(parse_override_path("risk.samples"), 200)])

    assert "risk" not in documents[0][1]["spec"]
    assert load_policy_set(changed).policy.spec.risk.samples == 200


def test_an_item_the_policy_lacks_is_named_with_those_it_has() -> None:
    with pytest.raises(OverrideError) as caught:
        applied({"tiers[gold].demoteLost": True})

    assert str(caught.value) == (
        "tiers[gold].demoteLost: the policy has no spec.tiers item with name 'gold' (it has: "
        "production, research)"
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("risk.raiseThreshold", "spec.risk.raiseThreshold"),
        ("pools[gpu].onDemand.floorGpus", "spec.pools[0].onDemand.floorGpus"),
        ("tiers[research].demoteLost", "spec.tiers[1].demoteLost"),
        ("tiers[gold].demoteLost", "spec.tiers[gold].demoteLost"),
    ],
)
def test_a_fields_path_by_position_as_the_loaders_errors_name_it(text: str, want: str) -> None:
    """So that an error the loader reports at `spec.pools[0]...` is traced to the override
    that set `pools[gpu]...`."""
    assert indexed_path(policy_documents(), parse_override_path(text)) == want
