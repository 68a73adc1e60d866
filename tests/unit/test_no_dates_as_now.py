"""No test, benchmark or e2e runner takes a literal date for "now" without saying so.

Issue 10: a test pinned to a date that has since passed failed every day after it. The rule:
times come from an injected clock (tests/clock.py) or are relative to now. A literal instant is
allowed where a test is about a fixed instant on purpose (cron arithmetic, parsing, a scenario
calibrated to one Monday noon), and then

- a `datetime(<year>, ...)` or `date(<year>, ...)` literal is bound to a name that says so:
  one containing FIXED, EPOCH or PAST (`FIXED_NOW`, `FIXED_MONDAY_NOON`);
- a constant named NOW (or `..._NOW_...`) bound to a literal instant is named FIXED as well;
- no function both uses such a name or literal and reads the wall clock (`datetime.now()`,
  `time.time()`, ...): a fixed instant compared with the real clock is a test that expires.

Modules whose subject is a table of instants are exempt from the first point only, each for
a stated reason. The rule reads source, so it sees only what is written in the test; `make
unit-future` runs the unit tests with the clock a year ahead to catch the rest.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "bench", "e2e")
MARKED = re.compile(r"FIXED|EPOCH|PAST", re.IGNORECASE)
ISO_DATE = re.compile(r"\d{4}-\d\d-\d\d")
EPOCH_SECONDS_FROM = 1e9  # 2001: a number this large bound to NOW is an instant
WALL_CLOCK_READS = frozenset(
    {
        ("datetime", "now"),
        ("datetime", "utcnow"),
        ("datetime", "today"),
        ("date", "today"),
        ("time", "time"),
        ("time", "time_ns"),
        ("", "utc_now"),
    }
)
TABLES_OF_INSTANTS = {
    "tests/unit/api/test_cron.py": "cron arithmetic at chosen instants, across DST changes",
}


def _is_date_literal(node: ast.AST) -> bool:
    """`datetime(2026, ...)` or `date(2026, ...)`, however `datetime` was imported."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    first = node.args[0]
    return (
        name in {"datetime", "date"}
        and isinstance(first, ast.Constant)
        and type(first.value) is int
    )


def _is_instant_literal(node: ast.AST) -> bool:
    """A literal that reads as an instant: a date literal (maybe `.timestamp()`-ed), an RFC
    3339 string, or epoch seconds."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value  # `datetime(...).timestamp()`
    if _is_date_literal(node):
        return True
    if not isinstance(node, ast.Constant):
        return False
    value = node.value
    if isinstance(value, str):
        return bool(ISO_DATE.match(value))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return value >= EPOCH_SECONDS_FROM


def _target_names(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _wall_clock_read(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return ("", func.id) in WALL_CLOCK_READS
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return (func.value.id, func.attr) in WALL_CLOCK_READS
    return False


def violations(source: str, path: str) -> list[str]:
    """What breaks the rule in one module, as `path:line: reason`."""
    tree = ast.parse(source, filename=path)
    found: list[str] = []
    named: set[int] = set()  # ids of date literals bound to a marked name
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            names = _target_names(node)
            if any(MARKED.search(n) for n in names):
                named.update(id(n) for n in ast.walk(node.value) if _is_date_literal(n))
            for name in names:
                says_now = "NOW" in name.upper().split("_") and not MARKED.search(name)
                if says_now and _is_instant_literal(node.value):
                    found.append(
                        f"{path}:{node.lineno}: {name} is a literal instant: name it "
                        "FIXED_... or take the time from a clock"
                    )
    if path not in TABLES_OF_INSTANTS:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_date_literal(node) and id(node) not in named:
                found.append(
                    f"{path}:{node.lineno}: a literal date outside a FIXED_/"
                    "EPOCH/PAST name: bind it to one, or make it relative to a clock"
                )
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        inside = list(ast.walk(function))
        fixed = any(
            (isinstance(n, ast.Name) and MARKED.search(n.id)) or _is_date_literal(n) for n in inside
        )
        reads = [n for n in inside if isinstance(n, ast.Call) and _wall_clock_read(n)]
        if fixed and reads:
            found.append(
                f"{path}:{reads[0].lineno}: {function.name} reads the wall clock and uses a "
                "fixed instant: inject one clock instead"
            )
    return found


def scanned_modules() -> Iterator[Path]:
    for directory in SCANNED:
        yield from sorted((REPO / directory).rglob("*.py"))


def test_no_module_uses_a_literal_date_as_now() -> None:
    found = [
        v
        for path in scanned_modules()
        for v in violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert found == []


def test_the_exempt_modules_exist() -> None:
    """An exemption outliving its module would exempt the next file of that name unseen."""
    assert all((REPO / path).is_file() for path in TABLES_OF_INSTANTS)


@pytest.mark.parametrize(
    ("source", "want"),
    [
        pytest.param(
            "NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)\n",
            ["NOW is a literal instant", "a literal date outside"],
            id="a date literal named NOW",
        ),
        pytest.param(
            "NOW = 1_800_000_000.0\n",
            ["NOW is a literal instant"],
            id="epoch seconds named NOW",
        ),
        pytest.param(
            "START_NOW = '2026-11-23T12:00:00Z'\n",
            ["START_NOW is a literal instant"],
            id="an RFC 3339 string named ..._NOW",
        ),
        pytest.param(
            "def test_x():\n    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))\n",
            ["a literal date outside"],
            id="a date literal inline in a test",
        ),
        pytest.param(
            "FIXED_NOW = datetime(2026, 1, 1, tzinfo=UTC)\n"
            "def test_x():\n    assert FIXED_NOW < datetime.now(UTC)\n",
            ["test_x reads the wall clock and uses a fixed instant"],
            id="a fixed instant compared with the real clock",
        ),
        pytest.param(
            "FIXED_NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()\n"
            "PAST_CUTOFF = date(2020, 1, 1)\n"
            "UNKNOWN = 1_800_000_000\n"
            "def test_x():\n    clock = Clock(FIXED_NOW)\n"
            "def test_y():\n    assert time.time() > 0\n",
            [],
            id="named fixed instants, and the real clock in another test, are fine",
        ),
    ],
)
def test_the_rule(source: str, want: list[str]) -> None:
    got = violations(source, "tests/unit/example.py")
    assert len(got) == len(want), got
    for message, fragment in zip(got, want, strict=True):
        assert fragment in message
