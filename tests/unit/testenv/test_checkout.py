"""What a soak records of the code it measured: the commit, and every controller file changed
in the working tree (the first row of `git status --porcelain` starts with a space, which a
stripped output loses, and with it the first letter of the first file's path)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testenv.checkout import tree_state


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_every_changed_controller_file_is_recorded(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "controller").mkdir()
    for name in ("a.py", "b.py"):
        (tmp_path / "controller" / name).write_text("x = 1\n")
    (tmp_path / "README.md").write_text("x\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    for name in ("a.py", "b.py"):
        (tmp_path / "controller" / name).write_text("x = 2\n")
    state = tree_state(tmp_path)
    assert state["commit"] == git(tmp_path, "rev-parse", "HEAD")
    assert state["uncommitted_controller_files"] == ["controller/a.py", "controller/b.py"]
