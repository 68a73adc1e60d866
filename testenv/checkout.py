"""Which code a measurement ran: the commit, and the controller files changed beside it.

A soak or benchmark of an uncommitted change must say so in its report, or its figures will be
read as the commit's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def tree_state(root: Path) -> dict[str, Any]:
    """The commit at `root` and the controller files with uncommitted changes (read-only)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.rstrip("\n")  # a status row starts with a space: keep it

    changed = [row[3:] for row in git("status", "--porcelain").splitlines()]
    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_controller_files": [f for f in changed if f.startswith("controller/")],
    }
