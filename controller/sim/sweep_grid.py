"""A sweep's grid file: what it may say, the cells it expands to, and the policy each cell runs.

A grid is read by people who wrote it by hand and run for hours, so every mistake is found
before the first cell starts and each is named by its place in the file
(`overrides.risk.raiseThreshold[2]: ...`), never by a traceback twenty minutes in. Everything
here is a pure function of the grid's YAML (and, for `apply_overrides`, of the policy's
documents), so it is tested table by table without a trace or a process.

Policy overrides name a field of the CapacityPolicy's spec by its path as the YAML writes it
(`risk.raiseThreshold`); an item of a list is named by its key, as `plan` names it
(`tiers[production].demoteLost`, `pools[gpu].prices.spotPerGpuHour`), so a path keeps meaning
the same item whatever order the policy lists them in. A path is checked against the policy
API's own declarations (`controller.api.introspect`), and each value against that field's own
parser, so the reason given is the one `quartermaster validate` would give; what only the whole
policy can tell (a lower threshold above the raise threshold) is checked once the overrides are
applied, by the loader every policy goes through.

A cell's key is derived from everything that decides its result (trace and its content's
digest, window, lead-in, seed, baselines, the policy's digest, the settings) and nothing else,
so a finished cell is found again by a later run of the same grid, or of a grid that adds
values to it, and a cell whose inputs changed is not mistaken for it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.api.introspect import FieldInfo, Kind, fields_of, item_hint, kind_of
from controller.api.parse import FieldError, parse_object, show
from controller.api.types import CapacityPolicy, CapacityPolicySpec
from controller.sim.run import parse_baselines
from controller.sim.trace import parse_lead_in, parse_window

GRID_FIELDS = ("traces", "windows", "seeds", "baselines", "policy", "overrides")
TRACE_FIELDS = ("trace", "window", "leadIn")
DEFAULT_SEEDS = (0,)
DEFAULT_BASELINES = "all"
SPEC_PATH = "spec"
"""Where override paths start: the CapacityPolicy's spec, as the policy's YAML nests it."""
KEY_DIGITS = 16
"""Hex digits of the cell key's hash: 64 bits, no collision in any grid a person writes."""

_SEGMENT = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:\[([^\[\]]+)\])?$")
_SLUG = re.compile(r"[^A-Za-z0-9.]+")


class GridError(ValueError):
    """The grid is refused: every problem found, each `field path: reason`."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        count = len(self.errors)
        super().__init__(
            f"{count} error{'s' if count != 1 else ''} in the grid: " + "; ".join(self.errors)
        )


# --------------------------------------------------------------------------- override paths


@dataclass(frozen=True)
class Segment:
    """One step of an override path: a field, and for a list of named items, which item."""

    field: str
    key: str | None = None
    """The item's key value (`production` in `tiers[production]`)."""
    key_field: str | None = None
    """The field the items are keyed by (`name`, or `pool` for reservations)."""


@dataclass(frozen=True)
class OverridePath:
    """A checked path to one field of the CapacityPolicy's spec."""

    text: str
    segments: tuple[Segment, ...]
    container: type
    """The policy type holding the field (RiskSettings for `risk.raiseThreshold`)."""
    container_path: str
    """Where that object sits, as the loader names it (`spec.risk`, `spec.tiers[production]`)."""
    field: FieldInfo

    @property
    def policy_path(self) -> str:
        """The field's path as the loader's errors name it (`spec.risk.raiseThreshold`)."""
        return f"{self.container_path}.{self.field.json_name}"


def _field_names(cls: type) -> str:
    return ", ".join(info.json_name for info in fields_of(cls))


def parse_override_path(text: str) -> OverridePath:
    """The field `text` names, checked against the policy API. Raises ValueError saying why
    it names none: an unknown field (listing the known ones), a list item selected in what is
    not a list of named items, a field asked of a value."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            "a policy field path must be a non-empty string such as risk.raiseThreshold"
        )
    parts = text.split(".")
    if parts[0] == SPEC_PATH and len(parts) > 1:
        parts = parts[1:]  # spec.risk.raiseThreshold reads the same as risk.raiseThreshold
    cls: type = CapacityPolicySpec
    at = SPEC_PATH
    segments: list[Segment] = []
    for i, part in enumerate(parts):
        match = _SEGMENT.match(part)
        if match is None:
            raise ValueError(
                f"{part!r} is not a field name, or a field name with an item key in brackets "
                "(e.g. tiers[production])"
            )
        name, key = match.group(1), match.group(2)
        infos = {info.json_name: info for info in fields_of(cls)}
        info = infos.get(name)
        if info is None:
            raise ValueError(f"unknown field {name!r} in {at} (its fields: {_field_names(cls)})")
        kind = kind_of(info.hint)
        last = i == len(parts) - 1
        named_items = (
            kind is Kind.ARRAY
            and kind_of(item_hint(info.hint)) is Kind.OBJECT
            and len(info.spec.list_map_keys) == 1
        )
        if key is not None:
            if not named_items:
                raise ValueError(
                    f"{at}.{name} is not a list of named items: [{key}] selects nothing in it"
                )
            if last:
                raise ValueError(
                    f"{at}.{name}[{key}] is a whole item: name one of its fields "
                    f"({_field_names(item_hint(info.hint))})"
                )
            key_field = info.spec.list_map_keys[0]
            segments.append(Segment(name, key, key_field))
            cls = item_hint(info.hint)
            at = f"{at}.{name}[{key}]"
            continue
        segments.append(Segment(name))
        if last:
            return OverridePath(text, tuple(segments), cls, at, info)
        if kind is Kind.OBJECT:
            cls = info.hint
            at = f"{at}.{name}"
            continue
        if named_items:
            raise ValueError(
                f"{at}.{name} is a list: name an item by its {info.spec.list_map_keys[0]}, "
                f"as {name}[NAME].{parts[i + 1]}"
            )
        article = "an" if kind.value[0] in "aeiou" else "a"
        raise ValueError(
            f"{at}.{name} is {article} {kind.value}, which has no field {parts[i + 1]!r}: "
            "override it whole"
        )
    raise AssertionError("unreachable: the loop returns at the last part")  # pragma: no cover


def value_errors(path: OverridePath, value: Any) -> list[str]:
    """What the policy's own parser says of `value` in that field alone, as `validate` would
    word it (`spec.risk.raiseThreshold: must be less than or equal to 1, got 1.5`); none when
    the field would take it. Rules between fields wait for the whole policy."""
    errors: list[FieldError] = []
    parse_object(path.container, {path.field.json_name: value}, path.container_path, errors)
    own = path.policy_path
    return [str(e) for e in errors if e.path == own or e.path.startswith((own + ".", own + "["))]


# --------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class TraceInput:
    """One trace as the sweep replays it: the file as named, in a window, with a lead-in."""

    trace: str
    window: str | None = None
    lead_in: str | None = None

    @property
    def lead_in_seconds(self) -> float:
        return parse_lead_in(self.lead_in) if self.lead_in else 0.0

    @property
    def label(self) -> str:
        """How tables and plots name it: `philly.csv.gz (busiest14d, lead-in 3d)`."""
        extra = [w for w in (self.window, f"lead-in {self.lead_in}" if self.lead_in else None) if w]
        return self.trace + (f" ({', '.join(extra)})" if extra else "")

    def document(self) -> dict[str, Any]:
        return {"trace": self.trace, "window": self.window, "lead_in": self.lead_in}


@dataclass(frozen=True)
class Override:
    """A policy field and the values the sweep gives it, in the grid's order."""

    path: OverridePath
    values: tuple[Any, ...]

    @property
    def text(self) -> str:
        return self.path.text


@dataclass(frozen=True)
class Grid:
    inputs: tuple[TraceInput, ...]
    """Each trace in each of its windows, in the grid's order."""
    seeds: tuple[int, ...]
    baselines: tuple[str, ...]
    """As `run.parse_baselines` returns them."""
    policy: str | None
    """A policy file or directory; None for the policy sized to each trace."""
    overrides: tuple[Override, ...]

    @property
    def swept(self) -> tuple[str, ...]:
        """The override paths given more than one value: the axes of the heat maps."""
        return tuple(o.text for o in self.overrides if len(o.values) > 1)

    def document(self) -> dict[str, Any]:
        """The grid as sweep.json records it: what was asked, whatever the file's spelling."""
        return {
            "inputs": [i.document() for i in self.inputs],
            "seeds": list(self.seeds),
            "baselines": list(self.baselines),
            "policy": self.policy,
            "overrides": {o.text: list(o.values) for o in self.overrides},
            "swept": list(self.swept),
        }


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def value_text(value: Any) -> str:
    """A setting's value as tables, labels and errors show it: JSON, as the grid could write
    it (`true`, `0.1`, `"Never"`)."""
    return json.dumps(value, sort_keys=True)


def _unknown(where: str, key: Any, known: Sequence[str]) -> str:
    shown = key if isinstance(key, str) else show(key)
    return f"{where}{shown}: unknown field; expected {', '.join(known)}"


def _window_error(path: str, text: Any) -> str | None:
    if not isinstance(text, str):
        return f"{path}: must be a window such as 56d:70d or busiest14d, got {show(text)}"
    try:
        parse_window(text)
    except ValueError as exc:
        return f"{path}: {exc}"
    return None


def _trace_entries(raw: Any, errors: list[str]) -> list[tuple[str, str | None, str | None, bool]]:
    """(trace, window, lead-in, whether a window was given) of each `traces` item."""
    if not isinstance(raw, list) or not raw:
        errors.append(
            "traces: must be a non-empty list of trace files (a name in third_party/traces, "
            f"or a path), or of {{{', '.join(TRACE_FIELDS)}}} mappings; got {show(raw)}"
        )
        return []
    out: list[tuple[str, str | None, str | None, bool]] = []
    for i, item in enumerate(raw):
        at = f"traces[{i}]"
        if isinstance(item, str) and item:
            out.append((item, None, None, False))
            continue
        if not isinstance(item, dict):
            errors.append(f"{at}: must be a trace file name or a mapping, got {show(item)}")
            continue
        bad = False
        for key in item:
            if key not in TRACE_FIELDS:
                errors.append(_unknown(f"{at}.", key, TRACE_FIELDS))
                bad = True
        trace = item.get("trace")
        if not isinstance(trace, str) or not trace:
            errors.append(f"{at}.trace: required: a trace file name or path, got {show(trace)}")
            bad = True
        window = item.get("window")
        if window is not None and (problem := _window_error(f"{at}.window", window)):
            errors.append(problem)
            bad = True
        lead_in = item.get("leadIn")
        if lead_in is not None:
            if window is None:
                errors.append(f"{at}.leadIn: needs a window (a whole trace has nothing before it)")
                bad = True
            elif not isinstance(lead_in, str | int | float) or isinstance(lead_in, bool):
                errors.append(f"{at}.leadIn: must be a time such as 3d, got {show(lead_in)}")
                bad = True
            else:
                try:
                    parse_lead_in(str(lead_in))
                except ValueError as exc:
                    errors.append(f"{at}.leadIn: {exc}")
                    bad = True
        if not bad and isinstance(trace, str):
            lead = None if lead_in is None else str(lead_in)
            out.append((trace, None if window is None else str(window), lead, window is not None))
    return out


def _windows(raw: Any, errors: list[str]) -> tuple[str | None, ...]:
    if raw is None:
        return (None,)
    if not isinstance(raw, list) or not raw:
        errors.append(
            "windows: must be a non-empty list of windows (56d:70d, busiest14d; null for the "
            f"whole trace), got {show(raw)}"
        )
        return (None,)
    out: list[str | None] = []
    for i, window in enumerate(raw):
        if window is None:
            out.append(None)
        elif problem := _window_error(f"windows[{i}]", window):
            errors.append(problem)
        elif window in out:
            errors.append(f"windows[{i}]: duplicate window {window!r}")
        else:
            out.append(window)
    return tuple(out)


def _seeds(raw: Any, errors: list[str]) -> tuple[int, ...]:
    if raw is None:
        return DEFAULT_SEEDS
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        errors.append("seeds: must list at least one seed")
        return ()
    out: list[int] = []
    for i, seed in enumerate(items):
        at = f"seeds[{i}]" if isinstance(raw, list) else "seeds"
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            errors.append(f"{at}: must be an integer >= 0, got {show(seed)}")
        elif seed in out:
            errors.append(f"{at}: duplicate seed {seed}")
        else:
            out.append(seed)
    return tuple(out)


def _baselines(raw: Any, errors: list[str]) -> tuple[str, ...]:
    if raw is None:
        raw = DEFAULT_BASELINES
    if isinstance(raw, list):
        if not all(isinstance(item, str) and item for item in raw):
            errors.append(f"baselines: must be a list of baseline names, got {show(raw)}")
            return ()
        text = ",".join(raw) if raw else "none"
    elif isinstance(raw, str):
        text = raw
    else:
        errors.append(
            f"baselines: must be a list such as as `simulate --baselines` takes, got {show(raw)}"
        )
        return ()
    try:
        return parse_baselines(text)
    except ValueError as exc:
        errors.append(f"baselines: {exc}")
        return ()


def _overrides(raw: Any, errors: list[str]) -> tuple[Override, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        errors.append(
            "overrides: must map policy field paths to lists of values, e.g. "
            f"risk.raiseThreshold: [0.1, 0.2], got {show(raw)}"
        )
        return ()
    out: list[Override] = []
    for text, given in raw.items():
        at = f"overrides.{text}"
        try:
            path = parse_override_path(text)
        except ValueError as exc:
            errors.append(f"{at}: {exc}")
            continue
        values = given if isinstance(given, list) else [given]
        if not values:
            errors.append(f"{at}: must list at least one value")
            continue
        kept: list[Any] = []
        seen: set[str] = set()
        for i, value in enumerate(values):
            where = f"{at}[{i}]" if isinstance(given, list) else at
            if not _is_json(value):
                errors.append(f"{where}: not a plain YAML value (a number, string, list...)")
                continue
            problems = value_errors(path, value)
            if problems:
                errors.extend(f"{where}: {p}" for p in problems)
                continue
            canonical = _canonical(value)
            if canonical in seen:
                errors.append(f"{where}: duplicate value {show(value)}")
                continue
            seen.add(canonical)
            kept.append(value)
        if len(kept) == len(values):
            out.append(Override(path, tuple(kept)))
    first: dict[str, str] = {}
    for override in out:
        earlier = first.setdefault(override.path.policy_path, override.text)
        if earlier != override.text:
            errors.append(
                f"overrides.{override.text}: names {override.path.policy_path}, as "
                f"overrides.{earlier} does"
            )
    return tuple(out)


def parse_grid(raw: Any) -> Grid:
    """The grid a YAML document describes. Raises GridError naming every problem.

    The fields: `traces` (required: file names or {trace, window, leadIn}), `windows` (crossed
    with every trace given without its own window; null is the whole trace), `seeds` (default
    [0]), `baselines` (as `simulate --baselines`, a text or a list; default all), `policy` (a
    policy file or directory; default the policy sized to each trace) and `overrides` (policy
    field path -> list of values; the cells are every combination).
    """
    if not isinstance(raw, dict):
        raise GridError([f"grid: must be a mapping of {', '.join(GRID_FIELDS)}, got {show(raw)}"])
    errors = [_unknown("", key, GRID_FIELDS) for key in raw if key not in GRID_FIELDS]
    entries = _trace_entries(raw.get("traces"), errors)
    windows = _windows(raw.get("windows"), errors)
    seeds = _seeds(raw.get("seeds"), errors)
    baselines = _baselines(raw.get("baselines"), errors)
    policy = raw.get("policy")
    if policy is not None and (not isinstance(policy, str) or not policy):
        errors.append(f"policy: must be a policy file or directory, got {show(policy)}")
    overrides = _overrides(raw.get("overrides"), errors)
    inputs: list[TraceInput] = []
    for trace, window, lead_in, own_window in entries:
        for chosen in (window,) if own_window else windows:
            found = TraceInput(trace, chosen, lead_in)
            if found in inputs:
                errors.append(f"traces: {found.label} is listed twice")
            else:
                inputs.append(found)
    if errors:
        raise GridError(errors)
    return Grid(tuple(inputs), seeds, baselines, policy, overrides)


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    """One `simulate` run of the sweep: a trace input, a seed, a value for each override."""

    index: int
    """Its place in the grid's order: inputs, then override combinations, then seeds."""
    input: TraceInput
    seed: int
    settings: tuple[tuple[str, Any], ...]
    """(override path as written, value), in the grid's override order."""

    @property
    def label(self) -> str:
        settings = ", ".join(f"{path}={value_text(value)}" for path, value in self.settings)
        return f"{self.input.label} seed {self.seed}" + (f" [{settings}]" if settings else "")


def expand_cells(grid: Grid) -> list[Cell]:
    """Every cell, in the grid's order: for each trace input, each combination of override
    values (the first override's values slowest), each seed. Seeds vary fastest so a table's
    neighbouring rows differ by seed alone."""
    combos = list(itertools.product(*(o.values for o in grid.overrides)))
    texts = [o.text for o in grid.overrides]
    cells: list[Cell] = []
    for trace_input in grid.inputs:
        for combo in combos:
            for seed in grid.seeds:
                settings = tuple(zip(texts, combo, strict=True))
                cells.append(Cell(len(cells), trace_input, seed, settings))
    return cells


def cell_key(
    cell: Cell,
    *,
    baselines: Sequence[str],
    trace_digest: str,
    policy_digest: str | None,
) -> str:
    """A file name for the cell's result that only the same inputs give: a readable prefix
    (trace, window, seed) and a hash of everything that decides the result."""
    material = {
        "trace": cell.input.trace,
        "trace_sha256": trace_digest,
        "window": cell.input.window,
        "lead_in": cell.input.lead_in,
        "seed": cell.seed,
        "baselines": list(baselines),
        "policy_sha256": policy_digest,
        "settings": [[path, value] for path, value in cell.settings],
    }
    digest = hashlib.sha256(_canonical(material).encode()).hexdigest()[:KEY_DIGITS]
    name = cell.input.trace.rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".csv")
    parts = [name, cell.input.window, cell.input.lead_in and f"lead{cell.input.lead_in}"]
    slug = "-".join(_SLUG.sub("_", p).strip("_") for p in parts if p)
    return f"{slug}-seed{cell.seed}-{digest}"


def documents_digest(documents: Sequence[tuple[str, Any]]) -> str:
    """The policy documents' content, hashed (their file names aside)."""
    return hashlib.sha256(_canonical([doc for _, doc in documents]).encode()).hexdigest()


# --------------------------------------------------------------------------- applying overrides


class OverrideError(ValueError):
    """An override the policy's documents have no place for (a list item it lacks)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _item_keys(items: list[Any], key_field: str) -> list[str]:
    return [str(i.get(key_field)) for i in items if isinstance(i, dict)]


def apply_overrides(
    documents: Sequence[tuple[str, Any]],
    settings: Sequence[tuple[OverridePath, Any]],
) -> list[tuple[str, Any]]:
    """Copies of the policy's documents with each field set to its value (null removes it, so
    it takes its default). Mappings on the way that the policy leaves out are added; a list
    item it lacks is not (OverrideError naming the path and the items it has). The result is
    for `load_policy_set`, which judges the values as it judges any policy.
    """
    out = copy.deepcopy(list(documents))
    policy = _capacity_policy(out)
    if policy is None:
        if settings:
            raise OverrideError(settings[0][0].text, "the policy has no CapacityPolicy to change")
        return out
    for path, value in settings:
        node = policy.get("spec")
        if not isinstance(node, dict):
            raise OverrideError(path.text, "the CapacityPolicy has no spec mapping")
        at = SPEC_PATH
        for i, segment in enumerate(path.segments):
            last = i == len(path.segments) - 1
            if last:
                if value is None:
                    node.pop(segment.field, None)
                else:
                    node[segment.field] = copy.deepcopy(value)
                break
            if segment.key is None:
                child = node.get(segment.field)
                if child is None:
                    child = node[segment.field] = {}
                if not isinstance(child, dict):
                    raise OverrideError(path.text, f"{at}.{segment.field} is not a mapping")
                node, at = child, f"{at}.{segment.field}"
                continue
            assert segment.key_field is not None
            items = node.get(segment.field)
            listed = items if isinstance(items, list) else []
            found = next(
                (
                    item
                    for item in listed
                    if isinstance(item, dict) and str(item.get(segment.key_field)) == segment.key
                ),
                None,
            )
            if found is None:
                have = ", ".join(_item_keys(listed, segment.key_field)) or "none"
                raise OverrideError(
                    path.text,
                    f"the policy has no {at}.{segment.field} item with {segment.key_field} "
                    f"{segment.key!r} (it has: {have})",
                )
            node, at = found, f"{at}.{segment.field}[{segment.key}]"
    return out


def _capacity_policy(documents: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    return next(
        (
            doc
            for _, doc in documents
            if isinstance(doc, dict) and doc.get("kind") == CapacityPolicy.KIND
        ),
        None,
    )


def indexed_path(documents: Sequence[tuple[str, Any]], path: OverridePath) -> str:
    """The field's path as the loader's errors name it in these documents, items by position
    (`spec.pools[0].onDemand.floorGpus` for `pools[gpu].onDemand.floorGpus`), so an error can
    be traced back to the override that set the field. Items not found keep their key."""
    policy = _capacity_policy(documents)
    node: Any = policy.get("spec") if policy is not None else None
    at = SPEC_PATH
    for segment in path.segments:
        child = node.get(segment.field) if isinstance(node, dict) else None
        if segment.key is None:
            node, at = child, f"{at}.{segment.field}"
            continue
        items = child if isinstance(child, list) else []
        index = next(
            (
                i
                for i, item in enumerate(items)
                if isinstance(item, dict) and str(item.get(segment.key_field)) == segment.key
            ),
            None,
        )
        node = None if index is None else items[index]
        at = f"{at}.{segment.field}[{segment.key if index is None else index}]"
    return at
