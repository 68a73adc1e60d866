"""e2e/install-deps.sh, the README's first command, as root and as a user, with stand-ins.

apt-get, sudo, id and dpkg-query are stand-ins that record their calls (the real ones would
install packages on this machine); the script itself runs for real, under /bin/sh.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "e2e" / "install-deps.sh"
PACKAGES = "make python3 python3-venv openssl ca-certificates debian-archive-keyring apt dpkg git"


@dataclass(frozen=True)
class Machine:
    uid: int
    sudo: bool
    missing: tuple[str, ...] = ()
    lists: bool = True


@dataclass(frozen=True)
class Outcome:
    code: int
    calls: list[str]
    stderr: str


def run_on(machine: Machine, tmp_path: Path) -> Outcome:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    calls.touch()

    def stub(name: str, body: str) -> None:
        path = stubs / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    stub("id", f"echo {machine.uid}")
    missing = " ".join(machine.missing)
    stub(
        "dpkg-query",
        f'for p in {missing or "-"}; do [ "$3" = "$p" ] && exit 1; done\n'
        "echo 'install ok installed'",
    )
    stub("apt-get", f'echo "apt-get $*" >> {calls}')
    if machine.sudo:
        stub("sudo", f'echo "sudo" >> {calls}\nexec "$@"')
    os.symlink("/usr/bin/env", stubs / "env")
    lists = tmp_path / "lists"
    lists.mkdir()
    if machine.lists:
        (lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4").touch()
    result = subprocess.run(
        ["/bin/sh", str(SCRIPT)],
        env={"PATH": str(stubs), "APT_LISTS_DIR": str(lists)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return Outcome(result.returncode, calls.read_text().splitlines(), result.stderr)


INSTALL = "apt-get install -y -q --no-install-recommends"


@pytest.mark.parametrize(
    ("machine", "want"),
    [
        pytest.param(
            Machine(uid=0, sudo=False, missing=("make", "python3-venv"), lists=False),
            Outcome(0, ["apt-get update -q", f"{INSTALL} make python3-venv"], ""),
            id="a fresh container: root, no sudo, no lists; apt-get runs directly",
        ),
        pytest.param(
            Machine(uid=1000, sudo=True, missing=("openssl",)),
            Outcome(0, ["sudo", "apt-get update -q", "sudo", f"{INSTALL} openssl"], ""),
            id="a user who may sudo: apt-get runs through sudo",
        ),
        pytest.param(
            Machine(uid=1000, sudo=True),
            Outcome(0, [], ""),
            id="everything present: nothing runs, no password asked",
        ),
        pytest.param(
            Machine(uid=0, sudo=False, lists=False),
            Outcome(0, ["apt-get update -q"], ""),
            id="packages present but no lists: they are fetched, for apt-get download",
        ),
        pytest.param(
            Machine(uid=1000, sudo=False, missing=("make",)),
            Outcome(
                1,
                [],
                "install-deps: run this as root, or install sudo: apt-get needs root to "
                "install make\n",
            ),
            id="a user without sudo is told what to do",
        ),
    ],
)
def test_install_deps(machine: Machine, want: Outcome, tmp_path: Path) -> None:
    assert run_on(machine, tmp_path) == want


def test_the_readme_and_ci_name_the_same_packages() -> None:
    """One list: the script's. .ci/run installs through it rather than keeping its own."""
    text = SCRIPT.read_text()
    assert f'PACKAGES="{PACKAGES}"' in text
    ci = (SCRIPT.parents[1] / ".ci" / "run").read_text()
    assert "e2e/install-deps.sh" in ci
    assert "apt-get install" not in ci
