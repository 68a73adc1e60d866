"""One Debian package, downloaded and unpacked into a cache directory, never installed.

The test tools that are not Python (Prometheus, libfaketime) come from the machine's own apt
sources, so they match its libc and need no other registry: `apt-get download` fetches the
.deb and `dpkg -x` unpacks it under `<cache>/root`. Nothing is installed system-wide and no
root is needed unless the package lists must be refreshed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _apt_get(args: list[str], *, cwd: Path, log: Path) -> subprocess.CompletedProcess[str]:
    options = []
    if os.geteuid() == 0:
        # apt hands downloads to its unprivileged _apt user, which cannot enter ~root; it then
        # downloads as root anyway, with a warning. Say so up front and skip the warning.
        options = ["-o", "APT::Sandbox::User=root"]
    result = subprocess.run(
        ["apt-get", "-q", *options, *args],
        cwd=cwd,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        text=True,
        check=False,
    )
    with log.open("a") as handle:
        handle.write(f"$ apt-get {' '.join(args)}\n{result.stdout}{result.stderr}\n")
    return result


def unpacked_package(
    package: str,
    target: Path,
    *,
    required: Sequence[str],
    error: type[Exception] = RuntimeError,
) -> Path:
    """`target/root`, holding `package` unpacked, once every path in `required` (relative to
    the root, glob patterns allowed) exists there; downloads and unpacks it if any is missing.

    Holds a lock on the cache, so two processes starting at once fetch it only once. Failures
    raise `error` with a message naming the log.
    """
    target.mkdir(parents=True, exist_ok=True)
    root = target / "root"
    with (target / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(root, required):
            _fetch_into(package, target, required=required, error=error)
    return root


def _complete(root: Path, required: Sequence[str]) -> bool:
    return root.is_dir() and all(any(root.glob(pattern)) for pattern in required)


def _fetch_into(
    package: str, target: Path, *, required: Sequence[str], error: type[Exception]
) -> None:
    """`apt-get download` needs the package lists. A fresh machine may have none, or lists
    older than the archive (the version they name is gone), so on failure the lists are
    refreshed once with `apt-get update` (as root, as CI runs) and the download tried again.
    """
    log = target / "fetch.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(prefix="download-", dir=target) as tmp:
        work = Path(tmp)
        result = _apt_get(["download", package], cwd=work, log=log)
        if result.returncode != 0:
            if os.geteuid() != 0:
                raise error(
                    f"`apt-get download {package}` failed and only root can refresh the package"
                    f" lists: run `sudo apt-get update` and try again (log: {log}):\n"
                    f"{result.stderr.strip()}"
                )
            update = _apt_get(["update"], cwd=work, log=log)
            if update.returncode != 0:
                result = update
            else:
                result = _apt_get(["download", package], cwd=work, log=log)
        debs = sorted(work.glob(f"{package}_*.deb"))
        if result.returncode != 0 or not debs:
            raise error(
                f"could not download Debian's {package} package (log: {log}):\n"
                f"{result.stderr.strip()}"
            )
        unpacked = work / "root"
        extract = subprocess.run(
            ["dpkg", "-x", str(debs[-1]), str(unpacked)],
            capture_output=True,
            text=True,
            check=False,
        )
        if extract.returncode != 0:
            raise error(f"dpkg -x {debs[-1].name} failed:\n{extract.stderr.strip()}")
        missing = [pattern for pattern in required if not any(unpacked.glob(pattern))]
        if missing:
            raise error(f"{debs[-1].name} has no {', '.join(missing)}")
        # Swap the finished tree in whole, so an interrupted fetch never leaves half a tree
        # that looks complete to the next run.
        final = target / "root"
        if final.exists():
            shutil.rmtree(final)
        unpacked.rename(final)
        (target / "package").write_text(debs[-1].name + "\n")
