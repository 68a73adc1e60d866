"""`quartermaster sweep`: many `simulate` runs over a grid of traces, seeds and policy settings,
into one table and its plots.

Each cell is one simulation, run through the functions `simulate` runs (`run.prepare_trace`,
`run.run_replays` and the figures it makes), so a cell's figures are the ones `quartermaster
simulate` prints for the same trace, window, seed and policy. The grid is checked whole before
anything runs (`sweep_grid`); the traces are read once here, and every cell of a trace input
shares what was read: sent once to each local worker process, or put once in a Ray cluster's
object store (`sweep_ray`), never once per cell.

Cells are independent, so the executor runs them in any order, side by side; each result is
written to its own file (cells/<key>.json, a temporary file renamed into place) as it comes
back, and sweep.json is assembled from those files in the grid's order. A cell whose file is
already there is not run again, so a sweep that was stopped (Ctrl-C, a lost machine, a kill)
goes on where it stopped when the same command runs again; a failed cell is run again then,
since failures are often the machine's rather than the cell's. A cell that fails is recorded
with its error and the others go on; the command's exit status says whether any failed.

This module is the shell around the pure parts (`sweep_grid`, `sweep_report`): reading files,
running cells, writing results. The local executor is here; Ray's, which imports Ray, is apart,
so nothing else needs Ray installed.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from controller.allocator import keep_freed_memory
from controller.api.loader import load_policy_set, read_documents
from controller.api.policy_set import InvalidPolicyError
from controller.collector import for_a_replay_worker
from controller.sim import plots, sweep_plots
from controller.sim.report import format_seconds, render_json
from controller.sim.run import (
    DEFAULT_POLICY_SOURCE,
    peak_rss_any_mib,
    peak_rss_mib,
    prepare_trace,
    resolve_trace,
    run_replays,
    run_specs,
    worker_count,
)
from controller.sim.scenario import default_policy_documents
from controller.sim.sweep_grid import (
    Cell,
    Grid,
    GridError,
    OverrideError,
    TraceInput,
    apply_overrides,
    cell_key,
    documents_digest,
    expand_cells,
    indexed_path,
    parse_grid,
    parse_override_path,
    value_text,
)
from controller.sim.sweep_report import (
    CellMeasure,
    cell_file_text,
    cell_table,
    cloud_panels,
    failed_record,
    failures,
    heat_maps,
    ok_record,
    pending_record,
    record_of,
    render_markdown,
    sweep_document,
)
from controller.sim.trace import Trace, load_trace, no_usable_job, parse_window

DEFAULT_OUT = Path("sim-out/sweep")
SWEEP_JSON = "sweep.json"
SWEEP_MD = "sweep.md"
CELLS_DIR = "cells"


# --------------------------------------------------------------------------- a cell


@dataclass(frozen=True)
class CellInputs:
    """What every cell of one trace input shares: the trace as read and the policy's documents
    before the cell's settings. `error` instead when the input could not be read (a window
    with no job): its cells fail with it, the others run."""

    trace: Trace | None
    documents: tuple[tuple[str, Any], ...] = ()
    policy_source: str = DEFAULT_POLICY_SOURCE
    error: str | None = None


@dataclass(frozen=True)
class CellTask:
    """One cell to run: plain data, so it travels to a worker process or a Ray worker."""

    key: str
    cell: Cell
    baselines: tuple[str, ...]

    @property
    def input_id(self) -> str:
        return self.cell.input.label


@dataclass(frozen=True)
class CellOutcome:
    key: str
    record: dict[str, Any]
    """What the inputs decide: this goes into sweep.json."""
    measured: dict[str, Any]
    """Wall time, memory, host, and a failure's traceback: the cell's file only."""


def error_text(exc: BaseException) -> str:
    """A failure in words, the same wherever the cell ran (no traceback, paths or hosts)."""
    if isinstance(exc, InvalidPolicyError):
        return "invalid policy: " + "; ".join(str(e) for e in exc.errors)
    return f"{type(exc).__name__}: {exc}"


def run_cell(inputs: CellInputs, task: CellTask) -> CellOutcome:
    """Run one cell: apply its settings to the policy, prepare the trace for its seed, replay
    the policy and the baselines, keep their figures. Never raises: a failure is the cell's
    record, so one bad cell cannot take the sweep's other cells with it."""
    started = time.perf_counter()
    cell = task.cell
    failure: str | None = None
    if inputs.error is not None or inputs.trace is None:
        record = failed_record(cell, task.key, inputs.error or "the trace input was not read")
        return CellOutcome(task.key, record, _measured(started))
    try:
        settings = [(parse_override_path(path), value) for path, value in cell.settings]
        policy_set = load_policy_set(apply_overrides(inputs.documents, settings))
        prepared = prepare_trace(
            inputs.trace,
            seed=cell.seed,
            window=cell.input.window,
            policy_set=policy_set,
            policy_source=inputs.policy_source,
        )
        specs = run_specs(task.baselines)
        figures = run_replays(
            prepared, specs, seed=cell.seed, err=io.StringIO(), tty=False, jobs=1
        ).figures
        record = ok_record(
            cell,
            task.key,
            figures,
            jobs=len(prepared.window_jobs),
            warnings=prepared.warnings,
        )
    except Exception as exc:
        record = failed_record(cell, task.key, error_text(exc))
        failure = traceback.format_exc()
    return CellOutcome(task.key, record, _measured(started, failure))


def _measured(started: float, failure: str | None = None) -> dict[str, Any]:
    return {
        "wall_seconds": time.perf_counter() - started,
        "peak_rss_mib": peak_rss_mib(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "finished_at_unix": time.time(),
        "traceback": failure,
    }


def crashed_outcome(task: CellTask, exc: BaseException) -> CellOutcome:
    """A cell whose process died or could not be reached: its executor reports it so."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    record = failed_record(task.cell, task.key, f"{type(exc).__name__}: {first_line}".rstrip())
    return CellOutcome(task.key, record, {"traceback": str(exc)})


# --------------------------------------------------------------------------- executors


class Executor(Protocol):
    """Runs cells and hands back each outcome as it finishes, in any order."""

    name: str

    def run(
        self,
        inputs: Mapping[str, CellInputs],
        tasks: Sequence[CellTask],
        *,
        running: Callable[[int], None],
        note: Callable[[str], None],
    ) -> Iterator[CellOutcome]: ...


_worker_inputs: Mapping[str, CellInputs] | None = None
"""In a worker process: the trace inputs every cell it runs reads from."""


def _start_worker(inputs: Mapping[str, CellInputs]) -> None:
    global _worker_inputs  # noqa: PLW0603 - a worker's one piece of state, set when it starts
    _worker_inputs = inputs
    keep_freed_memory()
    for_a_replay_worker()
    # Ctrl-C is the sweep's to handle: it ends the workers itself (`_stop_now`).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_in_worker(task: CellTask) -> CellOutcome:
    assert _worker_inputs is not None, "the worker was started without its inputs"
    return run_cell(_worker_inputs[task.input_id], task)


class LocalExecutor:
    """Worker processes on this machine, as `simulate --jobs` runs its replays: spawned clean,
    sent the trace inputs once when they start, one cell at a time each; with one worker,
    the cells run in this process."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs

    def run(
        self,
        inputs: Mapping[str, CellInputs],
        tasks: Sequence[CellTask],
        *,
        running: Callable[[int], None],
        note: Callable[[str], None],
    ) -> Iterator[CellOutcome]:
        workers = worker_count(len(tasks), self.jobs)
        if workers == 1:
            note("local executor: the cells run one after another in this process")
            for task in tasks:
                running(1)
                outcome = run_cell(inputs[task.input_id], task)
                running(0)
                yield outcome
            return
        note(f"local executor: {workers} worker processes")
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(dict(inputs),),
        )
        try:
            futures: dict[Future[CellOutcome], CellTask] = {
                pool.submit(_run_in_worker, task): task for task in tasks
            }
            outstanding = len(futures)
            running(min(workers, outstanding))
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as exc:  # a worker that died: BrokenProcessPool
                    outcome = crashed_outcome(futures[future], exc)
                outstanding -= 1
                running(min(workers, outstanding))
                yield outcome
        except BaseException:  # Ctrl-C, or the sweep stopped reading (GeneratorExit)
            _stop_now(pool)
            raise
        pool.shutdown(wait=True)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Cancel the cells not started and end the workers in the middle of theirs: a cell that
    was running is run again by the next sweep, and waiting for it could take an hour.
    `ProcessPoolExecutor.terminate_workers` does this from Python 3.14; before it, the pool's
    processes are ended one by one."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown drops them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


# --------------------------------------------------------------------------- progress


class Progress(Protocol):
    """Where the sweep says how it goes (`sweep_progress` has the terminal's)."""

    def start(self, *, total: int, earlier: int) -> None: ...

    def note(self, text: str) -> None: ...

    def running(self, count: int) -> None: ...

    def finished(self, label: str, record: Mapping[str, Any], wall: float | None) -> None: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- the grid's inputs


def load_grid(path: Path) -> Grid:
    """The grid file, read as a policy file is (duplicate keys refused, times kept as text)
    and checked. Raises GridError."""
    if not path.is_file():
        raise GridError([f"{path}: no such file"])
    documents, errors = read_documents(path)
    if errors:
        # The command names the file; an error says where in it ("line 3, column 18: ...").
        raise GridError([_where(e.origin.removeprefix(str(path))) + e.message for e in errors])
    if len(documents) != 1:
        raise GridError([f"{path}: expected one YAML document, found {len(documents)}"])
    return parse_grid(documents[0][1])


def _where(position: str) -> str:
    line, _, column = position.lstrip(":").partition(":")
    return f"line {line}, column {column}: " if line.isdigit() and column.isdigit() else ""


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Prepared:
    """The grid's inputs, read: what the cells share and what their keys are derived from."""

    inputs: dict[str, CellInputs]
    trace_digests: dict[str, str]
    policy_digest: str | None


def read_inputs(grid: Grid) -> Prepared:
    """Read each trace input and the policy. Raises GridError for a trace or policy file that
    is not there or not valid; a window with no job is its cells' failure, not the grid's."""
    errors: list[str] = []
    paths: dict[str, Path] = {}
    for trace_input in grid.inputs:
        if trace_input.trace in paths:
            continue
        try:
            paths[trace_input.trace] = resolve_trace(trace_input.trace)
        except FileNotFoundError as exc:
            errors.append(f"traces: {exc}")
    policy_documents: tuple[tuple[str, Any], ...] | None = None
    policy_digest: str | None = None
    if grid.policy is not None:
        documents, problems = read_documents(Path(grid.policy))
        errors += [f"policy: {e}" for e in problems]
        policy_documents = tuple(documents)
        policy_digest = documents_digest(documents)
    if errors:
        raise GridError(errors)
    inputs: dict[str, CellInputs] = {}
    for trace_input in grid.inputs:
        inputs[trace_input.label] = _read_input(
            trace_input, paths[trace_input.trace], policy_documents, grid.policy
        )
    digests = {text: _file_digest(path) for text, path in paths.items()}
    return Prepared(inputs, digests, policy_digest)


def _read_input(
    trace_input: TraceInput,
    path: Path,
    policy_documents: tuple[tuple[str, Any], ...] | None,
    policy_source: str | None,
) -> CellInputs:
    try:
        window = parse_window(trace_input.window) if trace_input.window else None
        trace = load_trace(path, window=window, lead_in=trace_input.lead_in_seconds)
        if not trace.window_jobs:
            raise ValueError(no_usable_job(trace, trace_input.window))
        if policy_documents is not None:
            return CellInputs(trace, policy_documents, str(policy_source))
        return CellInputs(trace, tuple(default_policy_documents(trace.window_jobs)))
    except (OSError, ValueError) as exc:
        return CellInputs(None, error=error_text(exc))


def check_policies(grid: Grid, cells: Sequence[Cell], inputs: Mapping[str, CellInputs]) -> None:
    """Apply every cell's settings to its input's policy and validate the result as `validate`
    would, before any cell runs. Raises GridError, each error prefixed with the overrides it
    comes from (`overrides.risk.raiseThreshold[0]` when one override's value is to blame)."""
    errors: list[str] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    values = {o.text: [value_text(v) for v in o.values] for o in grid.overrides}
    for cell in cells:
        found = inputs[cell.input.label]
        settings_key = tuple((path, value_text(value)) for path, value in cell.settings)
        if found.error is not None or (cell.input.label, settings_key) in seen:
            continue
        seen.add((cell.input.label, settings_key))
        settings = [(parse_override_path(path), value) for path, value in cell.settings]
        fields = [
            (path, value, (path.policy_path, indexed_path(found.documents, path)))
            for path, value in settings
        ]
        try:
            load_policy_set(apply_overrides(found.documents, settings))
        except OverrideError as exc:
            errors.append(f"overrides.{exc.path}: {exc.reason}")
        except InvalidPolicyError as invalid:
            for error in invalid.errors:
                blamed = [
                    (path, value)
                    for path, value, named in fields
                    if error.path in named
                    or error.path.startswith(tuple(f"{n}{c}" for n in named for c in ".["))
                ]
                if blamed:
                    path, value = blamed[0]
                    index = values[path.text].index(value_text(value))
                    where = f"overrides.{path.text}" + (
                        f"[{index}]" if len(values[path.text]) > 1 else ""
                    )
                elif settings:
                    where = (
                        "overrides ("
                        + ", ".join(f"{path}={value_text(value)}" for path, value in cell.settings)
                        + ")"
                    )
                else:
                    where = "policy"
                errors.append(f"{where}: {error}")
    if errors:
        raise GridError(list(dict.fromkeys(errors)))


def plan_tasks(grid: Grid, cells: Sequence[Cell], prepared: Prepared) -> list[CellTask]:
    return [
        CellTask(
            cell_key(
                cell,
                baselines=grid.baselines,
                trace_digest=prepared.trace_digests[cell.input.trace],
                policy_digest=prepared.policy_digest,
            ),
            cell,
            grid.baselines,
        )
        for cell in cells
    ]


# --------------------------------------------------------------------------- files


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step: a sweep killed while writing leaves the old file or the
    new one, never half of one, so a cell's file is either its whole result or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cell_path(out_dir: Path, key: str) -> Path:
    return out_dir / CELLS_DIR / f"{key}.json"


def finished_earlier(
    out_dir: Path, tasks: Sequence[CellTask]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The cells whose finished results are already in `out_dir`: key -> (record, measured)."""
    found = {}
    for task in tasks:
        path = cell_path(out_dir, task.key)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        read = record_of(text, task.key)
        if read is not None:
            found[task.key] = read
    return found


# --------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class SweepResult:
    document: dict[str, Any]
    ran: int
    """Cells this invocation ran."""
    earlier: int
    """Cells found finished in the output directory, not run again."""
    failed: int
    files: list[Path]
    wall_seconds: float
    peak_rss_mib: float
    """The largest of this process, its local workers and the cells' processes."""


def run_sweep(
    grid_path: Path,
    *,
    out_dir: Path = DEFAULT_OUT,
    executor: Executor,
    progress: Progress,
    out: TextIO,
) -> SweepResult:
    """The whole command: check the grid, read its inputs, run the cells not yet finished,
    write sweep.json, sweep.md and the plots. Raises GridError before any cell runs."""
    started = time.perf_counter()
    grid = load_grid(grid_path)
    cells = expand_cells(grid)
    prepared = read_inputs(grid)
    check_policies(grid, cells, prepared.inputs)
    tasks = plan_tasks(grid, cells, prepared)
    done = finished_earlier(out_dir, tasks)
    todo = [t for t in tasks if t.key not in done]
    results: dict[str, tuple[dict[str, Any], dict[str, Any]]] = dict(done)
    progress.start(total=len(todo), earlier=len(done))
    ran_now: set[str] = set()
    try:
        if todo:
            needed = {t.input_id for t in todo}
            shared = {k: v for k, v in prepared.inputs.items() if k in needed}
            outcomes = executor.run(shared, todo, running=progress.running, note=progress.note)
            labels = {t.key: t.cell.label for t in todo}
            for outcome in outcomes:
                write_atomically(
                    cell_path(out_dir, outcome.key),
                    cell_file_text(outcome.record, outcome.measured),
                )
                results[outcome.key] = (outcome.record, outcome.measured)
                ran_now.add(outcome.key)
                progress.finished(
                    labels[outcome.key], outcome.record, outcome.measured.get("wall_seconds")
                )
    finally:
        progress.close()
    records = [
        results[t.key][0] if t.key in results else pending_record(t.cell, t.key) for t in tasks
    ]
    document = sweep_document(grid, records)
    json_path = out_dir / SWEEP_JSON
    write_atomically(json_path, render_json(document))
    drawn: list[Path] = []
    if plots.available():
        drawn = sweep_plots.write_plots(cloud_panels(document), heat_maps(document), out_dir)
    else:
        sweep_plots.remove_stale(out_dir)
    measures = [
        CellMeasure(
            t.cell.index,
            _number(results.get(t.key, ({}, {}))[1].get("wall_seconds")),
            _number(results.get(t.key, ({}, {}))[1].get("peak_rss_mib")),
            _text(results.get(t.key, ({}, {}))[1].get("host")),
            t.key in ran_now,
        )
        for t in tasks
    ]
    wall = time.perf_counter() - started
    peak = max(
        [peak_rss_any_mib(), *(m.peak_rss_mib for m in measures if m.ran_now and m.peak_rss_mib)]
    )
    md_path = out_dir / SWEEP_MD
    write_atomically(
        md_path,
        render_markdown(
            document,
            title=f"Sweep of {grid_path.name}",
            about=[
                f"grid: {grid_path}",
                f"executor: {executor.name}",
                f"this run: {len(ran_now)} cells run, {len(done)} found finished in "
                f"{out_dir / CELLS_DIR}; {wall:,.1f} s wall time, peak RSS {peak:,.0f} MiB "
                "(largest process)",
            ],
            measures=measures,
            plots=[p.name for p in drawn],
            plots_note=None
            if plots.available()
            else f"Not drawn: matplotlib is not installed; {plots.INSTALL_HINT}.",
        ),
    )
    failed = document["counts"]["failed"]
    out.write("\n".join(cell_table(document, markdown=False)) + "\n")
    for line in failures(document):
        out.write(f"failed: {line}\n")
    files = [json_path, md_path, *drawn]
    out.write(f"\nwrote {', '.join(str(f) for f in files)} and {len(tasks)} cell files\n")
    if not plots.available():
        out.write(f"no plots (matplotlib is not installed): {plots.INSTALL_HINT}\n")
    out.write(
        f"{len(tasks)} cells: {len(ran_now)} run now, {len(done)} finished earlier, "
        f"{failed} failed; {format_seconds(wall)} wall time, peak RSS {peak:,.0f} MiB\n"
    )
    out.flush()
    return SweepResult(document, len(ran_now), len(done), failed, files, wall, peak)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
