"""The real kustomize, for building the manifests in tests and in the kind e2e path.

`KUSTOMIZE_BIN`, else `kustomize` on PATH, else Debian's package fetched once into
`~/.cache/quartermaster/kustomize` ($QUARTERMASTER_CACHE moves it) by `fetch-kustomize.sh`.
Run `python -m testenv.kustomize` to fetch it and print its package.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from testenv.controlplane import Report, disk_usage, to_stderr

SCRIPT = Path(__file__).with_name("fetch-kustomize.sh")


class KustomizeError(RuntimeError):
    """kustomize could not be found, fetched, or could not build a directory."""


def cache_dir() -> Path:
    root = os.environ.get("QUARTERMASTER_CACHE") or Path.home() / ".cache" / "quartermaster"
    return Path(root) / "kustomize"


def kustomize_path(*, fetch: bool = True, report: Report = to_stderr) -> Path:
    explicit = os.environ.get("KUSTOMIZE_BIN")
    if explicit:
        if not Path(explicit).is_file():
            raise KustomizeError(f"KUSTOMIZE_BIN={explicit} is not a file")
        return Path(explicit)
    installed = shutil.which("kustomize")
    if installed:
        return Path(installed)
    target = cache_dir()
    binary = target / "bin" / "kustomize"
    if binary.is_file():
        return binary
    if not fetch:
        raise KustomizeError(f"no kustomize in {binary.parent}; run `make kustomize`")
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            report(
                "Fetching kustomize (once): Debian's `kustomize` package from its sid suite "
                f"(about 7 MB to download, 22 MB kept; private apt configuration) into {target}"
            )
            started = time.monotonic()
            result = subprocess.run(
                ["bash", str(SCRIPT)],
                env={**os.environ, "KZ_DIR": str(target)},
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0 or not binary.is_file():
                raise KustomizeError(
                    f"could not fetch Debian's kustomize package:\n{result.stderr.strip()}"
                )
            package = (target / "package").read_text().strip()
            report(
                f"Fetched {package} in {time.monotonic() - started:.0f} s "
                f"({disk_usage(target) / 2**20:.0f} MB kept): {binary}"
            )
    return binary


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` prints, in its order."""
    result = subprocess.run(
        [str(kustomize_path()), "build", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise KustomizeError(f"kustomize build {directory} failed:\n{result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def main() -> None:
    path = kustomize_path()
    package = cache_dir() / "package"
    print(path, package.read_text().strip() if package.is_file() else "")


if __name__ == "__main__":
    main()
