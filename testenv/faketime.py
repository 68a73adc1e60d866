"""Run a command with the wall clock moved (libfaketime), to show no test depends on the date.

`make unit-future` runs the unit tests a year ahead: a test that compares a literal date with
the real clock, or an example whose deadlines have passed, fails there today instead of on the
day it expires. libfaketime is preloaded (LD_PRELOAD) with FAKETIME="+365d": every libc clock
read moves, so Python's `datetime.now()` and `time.time()` and `date` all see next year.
DONT_FAKE_MONOTONIC=1 leaves the monotonic clock alone, so timeouts and sleeps keep their real
length. Go programs (promtool, kustomize) read the clock without libc and keep real time.

The library comes from Debian's `libfaketime` package, fetched with `apt-get download` from the
machine's own apt sources (it must match the machine's glibc) and unpacked with `dpkg -x` into
`~/.cache/quartermaster/faketime` ($QUARTERMASTER_CACHE moves it); nothing is installed. An
installed libfaketime is used when present, and $FAKETIME_LIB overrides both. Debian's
`faketime` wrapper is not needed: it finds the library only at its installed path.

Debian 12's libfaketime 0.9.10 breaks Python's `time.sleep` when the monotonic clock is left
alone (see faketime_site/sitecustomize.py), so that directory goes on PYTHONPATH too: every
Python started under the moved clock sleeps with select() instead.

Before running the command, the clock is checked from outside: `date` and a Python child must
both read it `--days` ahead (within an hour), their monotonic clock must be the real one, and
the child's `time.sleep` must work; otherwise this exits 2 without running the command.

Usage: `python -m testenv.faketime [--days N] -- COMMAND [ARG...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from testenv.debian import unpacked_package

PACKAGE = "libfaketime"
LIBRARY_GLOB = "usr/lib/*/faketime/libfaketime.so.1"
INSTALL_ROOT = Path("/")
"""Where an installed libfaketime is looked for (LIBRARY_GLOB below it)."""
SITE_DIR = Path(__file__).with_name("faketime_site")
DEFAULT_DAYS = 365
WALL_TOLERANCE_SECONDS = 3600.0
"""How far from the requested offset a moved clock may read: the checks take seconds, and an
offset given in days must not be confused with one in hours."""
MONOTONIC_TOLERANCE_SECONDS = 60.0
PROBE = """
import json, time
from datetime import UTC, datetime
time.sleep(0.01)
print(json.dumps({"wall": time.time(), "now": datetime.now(UTC).timestamp(),
                  "monotonic": time.monotonic()}))
"""


class FaketimeError(RuntimeError):
    """libfaketime could not be found or fetched, or the clock it gives is not the one asked."""


def cache_dir() -> Path:
    """Beside the other test tools, so one $QUARTERMASTER_CACHE moves them all."""
    root = os.environ.get("QUARTERMASTER_CACHE") or Path.home() / ".cache" / "quartermaster"
    return Path(root) / "faketime"


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def library_path(*, fetch: bool = True, report: Callable[[str], None] = to_stderr) -> Path:
    """$FAKETIME_LIB if set (it must exist: a typo should not silently fall back), else an
    installed libfaketime, else the cache, fetching Debian's package into it when `fetch`.

    A fetch is announced before it starts and reported after, as the other downloads of the
    harness are: a download should never be a silent pause."""
    explicit = os.environ.get("FAKETIME_LIB")
    if explicit:
        if not Path(explicit).is_file():
            raise FaketimeError(f"FAKETIME_LIB={explicit} is not a file")
        return Path(explicit)
    installed = sorted(INSTALL_ROOT.glob(LIBRARY_GLOB))
    if installed:
        return installed[0]
    cached = sorted((cache_dir() / "root").glob(LIBRARY_GLOB))
    if cached:
        return cached[0]
    if not fetch:
        raise FaketimeError(f"no libfaketime in {cache_dir()}; run `make unit-future`")
    report(
        f"Fetching libfaketime (once): Debian's `{PACKAGE}` package from this machine's apt "
        f"sources (under 100 kB) into {cache_dir()}"
    )
    started = time.monotonic()
    root = unpacked_package(PACKAGE, cache_dir(), required=(LIBRARY_GLOB,), error=FaketimeError)
    library = sorted(root.glob(LIBRARY_GLOB))[0]
    report(f"Fetched libfaketime in {time.monotonic() - started:.0f} s: {library}")
    return library


def moved_environment(base: Mapping[str, str], *, library: Path, days: int) -> dict[str, str]:
    """`base` with the clock moved `days` ahead for every process started with it."""
    env = dict(base)
    env["LD_PRELOAD"] = ":".join(p for p in (str(library), base.get("LD_PRELOAD", "")) if p)
    env["FAKETIME"] = f"{days:+d}d"
    env["DONT_FAKE_MONOTONIC"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR), base.get("PYTHONPATH", "")) if p)
    return env


def clock_problems(
    *,
    days: int,
    real_wall: float,
    real_monotonic: float,
    date_wall: float,
    python: Mapping[str, float],
) -> list[str]:
    """What is wrong with the moved clock as `date` and a Python child read it, given the real
    clock read just before; empty when both see it `days` ahead and monotonic time is real."""
    want = days * 86400.0
    problems = []
    for who, seen in (
        ("date", date_wall),
        ("Python time.time()", python["wall"]),
        ("Python datetime.now()", python["now"]),
    ):
        offset = seen - real_wall
        if abs(offset - want) > WALL_TOLERANCE_SECONDS:
            problems.append(
                f"{who} reads {offset / 86400:+.2f} days from the real clock, not {days:+d}"
            )
    drift = python["monotonic"] - real_monotonic
    if abs(drift) > MONOTONIC_TOLERANCE_SECONDS:
        problems.append(f"Python's monotonic clock moved too ({drift:+.0f} s): set it apart")
    return problems


def check(env: Mapping[str, str], *, days: int) -> datetime:
    """Read the moved clock with `date` and a Python child; the instant they see, or
    FaketimeError saying what is wrong."""
    real_wall, real_monotonic = time.time(), time.monotonic()
    date = subprocess.run(
        ["date", "+%s"], env=dict(env), capture_output=True, text=True, check=False
    )
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=dict(env), capture_output=True, text=True, check=False
    )
    if date.returncode != 0 or probe.returncode != 0:
        raise FaketimeError(
            "a process under libfaketime failed:\n"
            f"date: {date.stderr.strip()}\npython: {probe.stderr.strip()[-2000:]}"
        )
    python = json.loads(probe.stdout)
    problems = clock_problems(
        days=days,
        real_wall=real_wall,
        real_monotonic=real_monotonic,
        date_wall=float(date.stdout),
        python=python,
    )
    if problems:
        raise FaketimeError("the clock is not moved as asked: " + "; ".join(problems))
    return datetime.fromtimestamp(python["now"], UTC)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m testenv.faketime",
        description="Run COMMAND with the wall clock moved DAYS ahead (libfaketime).",
    )
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: -- COMMAND [ARG...]")
    try:
        library = library_path()
        env = moved_environment(os.environ, library=library, days=args.days)
        seen = check(env, days=args.days)
    except FaketimeError as exc:
        print(f"faketime: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"faketime: {library}: date and Python read {seen:%Y-%m-%d %H:%M} UTC "
        f"({args.days:+d} days); the monotonic clock is real",
        flush=True,
    )
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
