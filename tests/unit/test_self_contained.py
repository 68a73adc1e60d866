"""The repository stands alone: no tracked file names a path outside it.

A clone is all a user has. Code, tests, the Makefile or docs that read a folder beside the
checkout, or an absolute path of the machine they were written on, pass there and fail
for everyone else, so the suite fails first. What the project needs from elsewhere lives in
`third_party/` (with an environment variable to point elsewhere on purpose).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Built from pieces, so this file does not name what it looks for. The third alternative is
# Path(...) / "shared" / ...: a folder of that name joined on in code.
OUTSIDE = re.compile(
    "|".join(
        [
            re.escape(".." + "/shared"),  # the folder beside a checkout
            r"(?<![\w.~-])/" + "work/",  # the absolute paths of the machine it was written on
            r"""["']""" + r"""shared["']\s*/\s*["']""",
            r"ROOT" + r"\.parent\b(?!\.)|ROOT" + r"\.parents\[",  # climbing out of the root
        ]
    )
)
SKIPPED_SUFFIXES = (".gz", ".png", ".svg")
"""Data, not text a path could hide in."""


def tracked_files() -> list[Path]:
    """`git ls-files`: what a clone holds (untracked output and the venv are not the project)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot list the tracked files (git ls-files in {REPO_ROOT}): {exc}")
    return [REPO_ROOT / name for name in listed.decode().split("\0") if name]


def outside_paths(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line naming a path outside the repository."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE.search(line)
    ]


@pytest.mark.parametrize(
    ("line", "outside"),
    [
        pytest.param("CRDS = REPO_ROOT / 'third_party' / 'crds'", False, id="inside"),
        pytest.param("see ../" + "shared/crds/README.md", True, id="the folder beside"),
        pytest.param('TRACES = Path("/' + 'work/shared/traces")', True, id="an absolute path"),
        pytest.param("git clone /" + "work/main /tmp/x", True, id="another checkout"),
        pytest.param("REPO_ROOT" + '.parent / "crds"', True, id="climbing out in code"),
        pytest.param(
            'Path(...) / "shar' + 'ed" / "crds"', True, id="a folder named shared in code"
        ),
        pytest.param("_REPO_ROOT" + ".parent", True, id="climbing out, however named"),
        pytest.param("REPO_ROOT" + ".parents[1]", True, id="climbing out by index"),
        pytest.param("cd repo/work/", False, id="a relative path that contains the word"),
        pytest.param("~/" + "work/x", False, id="a folder in the home directory"),
        pytest.param("a cluster shared by teams", False, id="the word shared"),
    ],
)
def test_the_pattern_tells_outside_from_inside(line: str, outside: bool) -> None:
    assert bool(outside_paths(line)) == outside


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    files = tracked_files()
    assert any(f.name == "Makefile" for f in files), "git ls-files listed no Makefile"
    found = []
    for path in files:
        if path.suffix in SKIPPED_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO_ROOT)}:{n}: {line}" for n, line in outside_paths(text)]
    assert not found, "paths outside the repository:\n" + "\n".join(found)
