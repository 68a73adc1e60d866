"""The moved-clock harness of `make unit-future`: its environment and its check of the clock.

The check itself runs for real at the start of `make unit-future` (it refuses to run the tests
on a clock that is not moved); here its judgement is tested on readings made up for each case.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testenv import faketime
from testenv.faketime import SITE_DIR, clock_problems, moved_environment

DAY = 86400.0
REAL_WALL = 1_000.0
REAL_MONOTONIC = 5_000.0


def python_reads(wall: float, *, monotonic: float = REAL_MONOTONIC) -> dict[str, float]:
    return {"wall": wall, "now": wall, "monotonic": monotonic}


@pytest.mark.parametrize(
    ("date_wall", "python", "want"),
    [
        pytest.param(
            REAL_WALL + 365 * DAY + 2,
            python_reads(REAL_WALL + 365 * DAY + 3, monotonic=REAL_MONOTONIC + 3),
            [],
            id="a year ahead, seconds later, monotonic real: fine",
        ),
        pytest.param(
            REAL_WALL + 2,
            python_reads(REAL_WALL + 365 * DAY),
            ["date reads +0.00 days"],
            id="date not moved",
        ),
        pytest.param(
            REAL_WALL + 365 * DAY,
            python_reads(REAL_WALL + 365 * 3600),
            ["Python time.time() reads +15.21 days", "Python datetime.now() reads +15.21"],
            id="Python moved by hours where days were meant",
        ),
        pytest.param(
            REAL_WALL + 365 * DAY,
            python_reads(REAL_WALL + 365 * DAY, monotonic=REAL_MONOTONIC + 365 * DAY),
            ["monotonic clock moved too"],
            id="the monotonic clock moved with the wall clock",
        ),
    ],
)
def test_clock_problems(date_wall: float, python: dict[str, float], want: list[str]) -> None:
    got = clock_problems(
        days=365,
        real_wall=REAL_WALL,
        real_monotonic=REAL_MONOTONIC,
        date_wall=date_wall,
        python=python,
    )
    assert len(got) == len(want), got
    for problem, fragment in zip(got, want, strict=True):
        assert fragment in problem


def test_the_environment_moves_the_wall_clock_only_and_keeps_what_was_there() -> None:
    library = Path("/cache/libfaketime.so.1")
    base = {"LD_PRELOAD": "/other.so", "PYTHONPATH": "/mine", "HOME": "/home/me"}

    env = moved_environment(base, library=library, days=365)

    assert env["LD_PRELOAD"] == f"{library}:/other.so"
    assert env["FAKETIME"] == "+365d"
    assert env["DONT_FAKE_MONOTONIC"] == "1"
    assert env["PYTHONPATH"].split(":") == [str(SITE_DIR), "/mine"]
    assert env["HOME"] == "/home/me"
    assert base == {"LD_PRELOAD": "/other.so", "PYTHONPATH": "/mine", "HOME": "/home/me"}
    assert moved_environment({}, library=library, days=-30)["FAKETIME"] == "-30d"
    assert moved_environment({}, library=library, days=1)["LD_PRELOAD"] == str(library)


def test_the_site_shim_sleeps_as_time_sleep_does() -> None:
    """It waits, and refuses a negative time. Run in a child: importing the shim here would
    replace this process's time.sleep."""
    probe = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); import sitecustomize\n"
        "assert time.sleep is sitecustomize._sleep\n"
        "start = time.monotonic(); time.sleep(0.05); slept = time.monotonic() - start\n"
        "assert 0.04 <= slept < 5, slept\n"
        "try:\n    time.sleep(-1)\nexcept ValueError:\n    print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(SITE_DIR)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_a_fetch_of_libfaketime_is_announced_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing installed, nothing cached: the fetch says what it fetches before it starts
    (`make unit-future` would otherwise pause without a word), and what it got after."""
    monkeypatch.delenv("FAKETIME_LIB", raising=False)
    monkeypatch.setenv("QUARTERMASTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(faketime, "INSTALL_ROOT", tmp_path / "nothing-installed")
    events: list[str] = []

    def unpacked(package: str, target: Path, **_: object) -> Path:
        events.append(f"fetch {package}")
        library = target / "root" / "usr" / "lib" / "x86_64-linux-gnu" / "faketime"
        library.mkdir(parents=True)
        (library / "libfaketime.so.1").write_bytes(b"")
        return target / "root"

    monkeypatch.setattr(faketime, "unpacked_package", unpacked)
    found = faketime.library_path(report=events.append)
    assert found.name == "libfaketime.so.1"
    assert len(events) == 3, events
    assert events[0].startswith("Fetching libfaketime (once): Debian's `libfaketime` package")
    assert events[1] == "fetch libfaketime"
    assert events[2].startswith("Fetched libfaketime in ") and events[2].endswith(str(found))
    # Cached now: found again without a word.
    events.clear()
    assert faketime.library_path(report=events.append) == found
    assert events == []
