"""`quartermaster simulate` end to end, in process: a small synthetic trace, then a few days
of the real Alibaba trace.

The synthetic trace is 60 jobs over a day (1 to 8 GPUs, 10 minutes to 4 hours), so every run
takes well under a second; the replay policy is sized to it by default. Runs write into
tmp_path and read stdout and stderr from StringIO, which is not a terminal: progress is then
one line per run. They replay in this process (`--jobs 1`), except where a test is about
worker processes.
"""

from __future__ import annotations

import io
import json
import random
import struct
import zlib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, main
from controller.sim import plots
from controller.sim.engine import BASELINES
from controller.sim.model import CAUSES
from controller.sim.run import TRACES_ENV, ProgressBar, traces_dir
from tests.builders import policy_doc, pool_doc, project_doc

ALIBABA = "alibaba_openb_2023.csv.gz"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@cache
def trace_text(count: int = 60) -> str:
    pick = random.Random(5)
    rows = ["job_id,submit_time_s,duration_s,gpus"]
    for i in range(count):
        submit = pick.uniform(0, 86400)
        duration = pick.uniform(600, 4 * 3600)
        rows.append(f"job-{i},{submit:.0f},{duration:.0f},{pick.choice((1, 2, 4, 8))}")
    return "\n".join(rows) + "\n"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic.csv"
    path.write_text(trace_text(), encoding="utf-8")
    return path


def simulate(*args: str) -> tuple[int, str, str]:
    """The command in process; in this process too (`--jobs 1`) unless `args` say otherwise,
    since starting workers costs more than these small replays."""
    out, err = io.StringIO(), io.StringIO()
    jobs = [] if "--jobs" in args else ["--jobs", "1"]
    code = main(["simulate", *args, *jobs], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def summary(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / "summary.json").read_text())
    return loaded


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a well-formed PNG: signature, IHDR first, every chunk's CRC right,
    IEND last. Raises AssertionError otherwise."""
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), path
    at, kinds = len(PNG_SIGNATURE), []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc, (path, kind)
        kinds.append(kind)
        at += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds, kinds
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# --------------------------------------------------------------------------- the synthetic trace


def test_simulate_writes_the_summaries_and_prints_a_table(trace: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, out, err = simulate("--trace", str(trace), "--out", str(out_dir), "--seed", "1")
    assert code == EXIT_OK, err
    assert (out_dir / "summary.json").is_file()
    assert (out_dir / "summary.md").is_file()
    document = summary(out_dir)
    assert document["run_order"] == ["policy", *BASELINES]
    assert document["inputs"]["jobs"] == 60
    assert document["inputs"]["trace"] == "synthetic.csv"
    assert document["assignment"]["rule"]["seed"] == 1
    assert "Deadline hit rate by tier" in out
    for name in document["run_order"]:
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "total wall time" in out
    # Off a terminal, progress is one line per run and nothing redrawn.
    run_lines = [line for line in err.splitlines() if "jobs finished in" in line]
    assert len(run_lines) == 1 + len(BASELINES)
    assert "\r" not in err
    markdown = (out_dir / "summary.md").read_text()
    assert "## How jobs were assigned" in markdown and "AssignmentRule(seed=1" in markdown
    assert "wall time" in markdown
    for run in document["runs"].values():
        assert run["conservation"]["max_abs_deviation_gpu_seconds"] == 0.0


def test_summary_json_is_byte_identical_for_the_same_seed_and_differs_for_another(
    trace: Path, tmp_path: Path
) -> None:
    texts = {}
    for label, seed in (("first", "3"), ("again", "3"), ("other", "4")):
        out_dir = tmp_path / label
        code, _, err = simulate(
            "--trace", str(trace), "--out", str(out_dir), "--seed", seed, "--baselines", "all-spot"
        )
        assert code == EXIT_OK, err
        texts[label] = (out_dir / "summary.json").read_bytes()
    assert texts["first"] == texts["again"]
    assert texts["first"] != texts["other"]
    assert b"wall" not in texts["first"]


def test_the_plots_are_valid_pngs(trace: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, _, err = simulate("--trace", str(trace), "--out", str(out_dir))
    assert code == EXIT_OK, err
    for name in plots.PLOT_FILES:
        width, height = png_size(out_dir / name)
        assert width >= 400 and height >= 300, (name, width, height)
    assert "![gpus_over_time.png](gpus_over_time.png)" in (out_dir / "summary.md").read_text()


def test_without_matplotlib_the_output_says_how_to_get_the_plots(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller image and a plain `pip install quartermaster` have no matplotlib: the
    replay still runs, and says in its output (not only on stderr) how to get the plots."""
    monkeypatch.setattr(plots, "available", lambda: False)
    out_dir = tmp_path / "out"
    code, out, err = simulate("--trace", str(trace), "--out", str(out_dir))
    assert code == EXIT_OK, err
    assert f"no plots (matplotlib is not installed): {plots.INSTALL_HINT}" in out
    assert plots.INSTALL_HINT in (out_dir / "summary.md").read_text()
    assert not any((out_dir / name).exists() for name in plots.PLOT_FILES)


@pytest.mark.parametrize("installed", [True, False])
def test_the_help_says_how_to_get_the_plots(
    installed: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(plots, "available", lambda: installed)
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "pip install 'quartermaster[sim]'" in text
    assert ("not installed here" in text) is not installed


@pytest.mark.parametrize(
    ("baselines", "runs"),
    [
        pytest.param("none", ["policy"], id="none runs the policy alone"),
        pytest.param(
            "all-spot,on-demand-only",
            ["policy", "all-spot", "on-demand-only"],
            id="a list runs in the order given",
        ),
        pytest.param(
            "reactive,reactive", ["policy", "reactive"], id="a baseline named twice runs once"
        ),
    ],
)
def test_baselines_choose_the_runs(
    trace: Path, tmp_path: Path, baselines: str, runs: list[str]
) -> None:
    out_dir = tmp_path / "out"
    code, _, err = simulate("--trace", str(trace), "--out", str(out_dir), "--baselines", baselines)
    assert code == EXIT_OK, err
    document = summary(out_dir)
    assert document["run_order"] == runs
    relative = document["runs"]["policy"]["cost_percent_of_on_demand_only"]
    assert (relative is not None) == ("on-demand-only" in runs)


def test_a_window_replays_only_its_jobs_from_its_start(trace: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, out, err = simulate(
        "--trace", str(trace), "--out", str(out_dir), "--window", "6h:18h", "--baselines", "none"
    )
    assert code == EXIT_OK, err
    expected = sum(
        1
        for line in trace_text().splitlines()[1:]
        if 6 * 3600 <= float(line.split(",")[1]) < 18 * 3600
    )
    document = summary(out_dir)
    assert document["inputs"]["jobs"] == expected
    assert document["inputs"]["window"] == {
        "argument": "6h:18h",
        "start_seconds": 21600.0,
        "end_seconds": 64800.0,
        "lead_in_seconds": 0.0,
        "lead_in_jobs": 0,
    }
    assert "6h:18h" in out
    assert "lead-in" not in out


def test_a_lead_in_replays_the_hours_before_the_window_and_scores_the_window(
    trace: Path, tmp_path: Path
) -> None:
    """The same window, with its 6 hours before replayed first: the same jobs scored, the
    same policy (sized to the window), the lead-in's jobs counted apart."""
    runs = {}
    for name, extra in (("alone", []), ("lead", ["--lead-in", "6h"])):
        out_dir = tmp_path / name
        code, out, err = simulate(
            "--trace", str(trace), "--out", str(out_dir), "--window", "12h:24h",
            "--baselines", "all-spot", *extra,
        )  # fmt: skip
        assert code == EXIT_OK, err
        runs[name] = (summary(out_dir), out)
    submits = [float(line.split(",")[1]) for line in trace_text().splitlines()[1:]]
    in_window = sum(1 for t in submits if 12 * 3600 <= t < 24 * 3600)
    before = sum(1 for t in submits if 6 * 3600 <= t < 12 * 3600)
    (alone, _), (lead, out) = runs["alone"], runs["lead"]
    assert alone["inputs"]["jobs"] == lead["inputs"]["jobs"] == in_window
    assert lead["inputs"]["window"]["lead_in_seconds"] == 6 * 3600.0
    assert lead["inputs"]["window"]["lead_in_jobs"] == before > 0
    assert alone["policy"] == lead["policy"]
    assert f"lead-in: the 0.25 days before the window, {before:,} jobs replayed first" in out


def test_a_policy_directory_is_replayed_instead_of_the_default(trace: Path, tmp_path: Path) -> None:
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    docs = [
        policy_doc(pools=[pool_doc(maxGpus=32, onDemand={"floorGpus": 0, "ceilingGpus": 32})]),
        project_doc("vision"),
        project_doc("nlp", tier="research"),
    ]
    (policy_dir / "policy.yaml").write_text(yaml.safe_dump_all(docs))
    out_dir = tmp_path / "out"
    code, _, err = simulate(
        "--trace", str(trace), "--out", str(out_dir), "--policy", str(policy_dir)
    )
    assert code == EXIT_OK, err
    policy = summary(out_dir)["policy"]
    assert policy["name"] == "fleet"
    assert policy["source"] == str(policy_dir)
    assert [t["name"] for t in policy["tiers"]] == ["production", "research"]
    assert policy["pools"][0]["max_gpus"] == 32


def test_a_policy_far_too_small_for_the_trace_is_warned_about_with_the_numbers(
    trace: Path, tmp_path: Path
) -> None:
    """One 8-GPU project against a trace whose demand averages tens of GPUs: the warning goes
    to stderr, summary.json's `warnings` and the top of summary.md; the sized default has
    none."""
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    docs = [
        policy_doc(pools=[pool_doc(maxGpus=64, onDemand={"floorGpus": 0, "ceilingGpus": 64})]),
        project_doc("vision", quotas=[{"pool": "a100", "nominalGpus": 8}]),
    ]
    (policy_dir / "policy.yaml").write_text(yaml.safe_dump_all(docs))
    out_dir = tmp_path / "out"
    code, _, err = simulate(
        "--trace",
        str(trace),
        "--out",
        str(out_dir),
        "--policy",
        str(policy_dir),
        "--baselines",
        "none",
    )
    assert code == EXIT_OK, err
    document = summary(out_dir)
    demand = document["inputs"]["demand_gpus"]
    (warning,) = document["warnings"]
    assert warning.startswith("policy fleet is far too small for this trace")
    assert "at most 8 GPUs at once (its quotas plus tier reservations; maxGpus adds up to 64" in (
        warning
    )
    assert f"p95 of {demand['p95']:,.0f} GPUs" in warning
    assert f"warning: {warning}" in err
    markdown = (out_dir / "summary.md").read_text()
    assert markdown.index(warning) < markdown.index("## Deadline hit rate by tier")

    default_dir = tmp_path / "default"
    code, _, err = simulate("--trace", str(trace), "--out", str(default_dir), "--baselines", "none")
    assert code == EXIT_OK, err
    assert summary(default_dir)["warnings"] == []
    assert "warning" not in err


def test_help_says_what_the_busiest_window_measures(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "busiestNd: the N whole days with the most GPU-seconds submitted" in text
    assert "not job count" in text
    assert "days 61-74" in text


def test_a_bare_trace_name_is_found_in_the_traces_directory(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACES_ENV, str(trace.parent))
    monkeypatch.chdir(tmp_path / "..")
    out_dir = tmp_path / "out"
    code, _, err = simulate("--trace", trace.name, "--out", str(out_dir), "--baselines", "none")
    assert code == EXIT_OK, err
    assert summary(out_dir)["inputs"]["trace"] == trace.name


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(
            ["--window", "9d:2d"],
            EXIT_USAGE,
            "start must be before end",
            id="a window ending before it starts is a usage error",
        ),
        pytest.param(
            ["--window", "soon"],
            EXIT_USAGE,
            "invalid window",
            id="an unreadable window is a usage error",
        ),
        pytest.param(
            ["--baselines", "cheap"],
            EXIT_USAGE,
            "invalid baselines",
            id="an unknown baseline is a usage error",
        ),
        pytest.param(
            ["--baselines", "all,static:2"],
            EXIT_USAGE,
            "invalid baselines 'all,static:2': 'static:2': a static on-demand fraction is in "
            "[0, 1]",
            id="a static fraction over 1 is a usage error naming it",
        ),
        pytest.param(
            ["--window", "30d:31d"],
            EXIT_INVALID,
            "no usable job",
            id="a window with no jobs cannot be replayed",
        ),
        pytest.param(
            ["--lead-in", "3d"],
            EXIT_USAGE,
            "--lead-in 3d: needs --window",
            id="a lead-in without a window is a usage error",
        ),
        pytest.param(
            ["--window", "6h:18h", "--lead-in", "3y"],
            EXIT_USAGE,
            "invalid lead-in '3y': expected a non-negative time",
            id="a lead-in that is not a time is a usage error naming it",
        ),
        pytest.param(
            ["--policy", "/nonexistent"],
            EXIT_INVALID,
            "no such file",
            id="a missing policy directory is an error",
        ),
    ],
)
def test_bad_arguments_exit_non_zero_with_a_message(
    trace: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    got, _, err = simulate("--trace", str(trace), "--out", str(tmp_path / "out"), *args)
    assert got == code
    assert message in err


def test_a_trace_without_a_usable_row_says_how_many_it_skipped_and_why(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_time_s,duration_s,gpus\na,0,abc,1\nb,-5,100,1\nc,0,100,0\n")
    code, _, err = simulate("--trace", str(path), "--out", str(tmp_path / "out"))
    assert code == EXIT_INVALID
    assert (
        "bad.csv: no usable job (3 unusable rows skipped: a job needs an id, a submit time "
        ">= 0, a duration > 0 and GPUs > 0, all numbers)"
    ) in err
    assert "window" not in err


def test_a_missing_trace_is_an_error(tmp_path: Path) -> None:
    code, _, err = simulate("--trace", str(tmp_path / "none.csv"), "--out", str(tmp_path))
    assert code == EXIT_INVALID
    assert "no such file" in err


@pytest.mark.parametrize("jobs", ["0", "-2", "two"])
def test_jobs_below_one_are_refused(
    trace: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--trace", str(trace), "--jobs", jobs])
    assert exited.value.code == EXIT_USAGE
    assert f"invalid jobs {jobs!r}: expected an integer >= 1" in capsys.readouterr().err


def test_summary_json_is_byte_identical_in_process_and_in_two_workers(
    trace: Path, tmp_path: Path
) -> None:
    texts = {}
    for jobs in ("1", "2"):
        out_dir = tmp_path / f"jobs-{jobs}"
        code, _, err = simulate(
            "--trace", str(trace), "--out", str(out_dir), "--seed", "2", "--jobs", jobs
        )
        assert code == EXIT_OK, err
        texts[jobs] = (out_dir / "summary.json").read_bytes()
        workers = "replaying 5 runs in 2 worker processes" in err
        assert workers == (jobs == "2"), err
    assert texts["1"] == texts["2"]


def test_parametric_baselines_run_under_their_names_and_make_the_frontier(
    trace: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = simulate(
        "--trace",
        str(trace),
        "--out",
        str(out_dir),
        "--baselines",
        "on-demand-only,static:0.1,0.5,reactive:0.3",
        "--jobs",
        "2",
    )
    assert code == EXIT_OK, err
    document = summary(out_dir)
    assert document["run_order"] == [
        "policy",
        "on-demand-only",
        "static:0.1",
        "static:0.5",
        "reactive:0.3",
    ]
    assert document["runs_spec"]["static:0.5"]["on_demand_fraction"] == 0.5
    assert document["runs_spec"]["reactive:0.3"]["threshold"] == 0.3
    assert document["runs"]["static:0.1"]["cost_percent_of_on_demand_only"] < 100.0
    assert any(line.startswith("reactive:0.3") for line in out.splitlines())
    png_size(out_dir / plots.FRONTIER)
    assert f"![{plots.FRONTIER}]({plots.FRONTIER})" in (out_dir / "summary.md").read_text()


def test_the_policy_alone_draws_no_frontier_and_removes_an_old_one(
    trace: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / plots.FRONTIER).write_bytes(b"stale")
    code, _, err = simulate("--trace", str(trace), "--out", str(out_dir), "--baselines", "none")
    assert code == EXIT_OK, err
    assert not (out_dir / plots.FRONTIER).exists()
    assert (out_dir / plots.CALIBRATION).is_file()


def test_each_runs_misses_by_cause_add_up_and_the_policy_is_calibrated(
    trace: Path, tmp_path: Path
) -> None:
    """A real replay of the synthetic trace: per run and tier, the causes add up to the
    misses; the policy run alone carries a reliability table over every estimate; every run
    reports its peak against the ceiling."""
    out_dir = tmp_path / "out"
    code, out, err = simulate("--trace", str(trace), "--out", str(out_dir))
    assert code == EXIT_OK, err
    document = summary(out_dir)
    assert_causes_add_up(document)
    calibration = document["runs"]["policy"]["calibration"]
    assert calibration["estimates"] > 0
    assert sum(d["count"] for d in calibration["deciles"]) == calibration["estimates"]
    assert 0.0 <= calibration["brier_score"] <= 1.0
    for name in BASELINES:
        assert document["runs"][name]["calibration"] is None
    for name, run in document["runs"].items():
        (pool,) = run["ceiling"]
        ceiling = run["ceiling"][pool]
        assert ceiling["peak_provisioned_gpus"] > 0, name
        assert ceiling["exceeds_ceiling"] == (
            ceiling["peak_provisioned_gpus"] > ceiling["ceiling_gpus"]
        ), name
    assert "Missed deadlines by cause" in out
    assert "Risk calibration of policy" in out
    markdown = (out_dir / "summary.md").read_text()
    assert "## Why deadlines were missed" in markdown
    assert "## Risk calibration (policy)" in markdown


def assert_causes_add_up(document: dict[str, Any]) -> None:
    for name, run in document["runs"].items():
        for tier, causes in run["misses_by_cause"].items():
            assert list(causes) == sorted(CAUSES), (name, tier)
            assert sum(causes.values()) == run["deadlines"][tier]["missed"], (name, tier)


def test_a_negative_seed_is_refused(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--trace", str(trace), "--seed", "-1"])
    assert exited.value.code == EXIT_USAGE
    assert "invalid seed" in capsys.readouterr().err


def test_on_a_terminal_the_progress_bar_redraws_in_place() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, "policy", tty=True)
    for fraction in (0.0, 0.004, 0.5, 1.0, 1.0):
        bar.update(fraction)
    bar.finish("policy done")
    text = stream.getvalue()
    assert text.count("\r") == 4, "one redraw per whole percent, then the final line"
    assert "[" + "#" * 15 + "." * 15 + "]  50 %" in text
    assert "100 %" in text
    assert text.endswith("\n")
    assert text.split("\r")[-1].rstrip() == "policy done", "the bar is replaced, not kept"


# --------------------------------------------------------------------------- the real trace


def test_a_few_days_of_the_alibaba_trace(tmp_path: Path) -> None:
    path = traces_dir() / ALIBABA
    if not path.is_file():
        pytest.fail(f"{path} is not here (set {TRACES_ENV})")
    out_dir = tmp_path / "out"
    code, out, err = simulate("--trace", str(path), "--out", str(out_dir), "--window", "115d:117d")
    assert code == EXIT_OK, err
    document = summary(out_dir)
    assert document["inputs"]["trace"] == ALIBABA
    assert document["inputs"]["jobs"] > 100
    assert document["run_order"] == ["policy", *BASELINES]
    for name, run in document["runs"].items():
        assert run["jobs"] == document["inputs"]["jobs"], name
        assert run["conservation"]["max_abs_deviation_gpu_seconds"] == 0.0, name
        assert run["cost"]["total"] > 0, name
    assert document["runs"]["on-demand-only"]["cost_percent_of_on_demand_only"] == 100.0
    assert "Deadline hit rate by tier" in out
    assert_causes_add_up(document)
    assert sum(run["deadlines"]["all"]["missed"] for run in document["runs"].values()) > 0, (
        "some run misses a deadline, so the causes are put to the test"
    )


def test_declared_sigma_sets_how_far_declared_runtimes_stray(trace: Path, tmp_path: Path) -> None:
    """0 declares every runtime exactly; the rule in summary.json says which was used."""
    rules = {}
    for sigma in ("0", "0.3"):
        out_dir = tmp_path / sigma
        code, _, err = simulate(
            "--trace", str(trace), "--out", str(out_dir), "--baselines", "none",
            "--declared-sigma", sigma,
        )  # fmt: skip
        assert code == EXIT_OK, err
        rules[sigma] = summary(out_dir)["assignment"]["rule"]
    assert rules["0"]["expected_sigma"] == 0.0
    assert rules["0.3"]["expected_sigma"] == 0.3
    assert rules["0"]["deadline_from"] == "true"
    assert {k: v for k, v in rules["0"].items() if k != "expected_sigma"} == {
        k: v for k, v in rules["0.3"].items() if k != "expected_sigma"
    }


@pytest.mark.parametrize("sigma", ["-0.1", "inf", "nan", "wide"])
def test_a_declared_sigma_that_is_not_a_spread_is_refused(
    trace: Path, capsys: pytest.CaptureFixture[str], sigma: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--trace", str(trace), "--declared-sigma", sigma])
    assert exited.value.code == EXIT_USAGE
    assert f"invalid declared sigma {sigma!r}: expected a finite number >= 0" in (
        capsys.readouterr().err
    )


def test_deadlines_from_the_declared_runtimes(trace: Path, tmp_path: Path) -> None:
    code, _, err = simulate(
        "--trace", str(trace), "--out", str(tmp_path), "--baselines", "none",
        "--deadlines-from", "declared",
    )  # fmt: skip
    assert code == EXIT_OK, err
    assignment = summary(tmp_path)["assignment"]
    assert assignment["rule"]["deadline_from"] == "declared"
    assert "deadline submit + declared runtime x slack" in assignment["statement"]
