"""What the repository carries from other projects, and the way to refresh the upstream CRDs.

`third_party/` holds the pinned upstream CRDs (Kueue, KEDA, Karpenter, the Prometheus Operator)
that the tests, the demo and `make cluster` load into the API server, and the two job traces
the simulator replays. A project people clone must carry what its tests need, so these live in
the tree, each folder with a METADATA file: where the files came from, the release, the
license and every file's sha256. A unit test holds the files to those checksums, so a hand
edit of an upstream file cannot pass unnoticed.

`make crds-refresh PROJECT=kueue RELEASE=v0.19.3` (`python -m testenv.thirdparty`) downloads the
same files from the project's GitHub repository at the named release tag, then rewrites the
folder's METADATA with the new release and checksums; review the diff like any upgrade.
Without PROJECT it refreshes every project at its pinned release (a check that nothing moved).

`$QUARTERMASTER_UPSTREAM_CRDS` and `$QUARTERMASTER_TRACES` may still point the harness and the
simulator elsewhere (a newer release under trial, say).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = REPO_ROOT / "third_party"
CRDS_DIR = THIRD_PARTY / "crds"
TRACES_DIR = THIRD_PARTY / "traces"
METADATA = "METADATA"

_FIELDS = ("name", "repository", "release", "path", "license", "note")
_SHA256 = re.compile(r"^\s+([0-9a-f]{64})\s+(\S+)$")


class MetadataError(ValueError):
    """A METADATA file that does not parse; the message names the line."""


@dataclass(frozen=True)
class Metadata:
    """One folder's METADATA: the source of its files and their checksums."""

    name: str
    repository: str
    """`owner/name` on GitHub."""
    release: str
    """The tag the files were taken at."""
    path: str
    """The folder inside the repository at that tag."""
    license: str
    note: str
    sha256: Mapping[str, str]
    """file name -> hex digest."""

    def url(self, file_name: str) -> str:
        """Where `file_name` is published at this release."""
        return (
            f"https://raw.githubusercontent.com/{self.repository}/{self.release}/"
            f"{self.path}/{file_name}"
        )


def parse_metadata(text: str) -> Metadata:
    """`key: value` lines, then `sha256:` and one indented `<digest>  <file>` line per file."""
    fields: dict[str, str] = {}
    sums: dict[str, str] = {}
    in_sums = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        if in_sums:
            match = _SHA256.match(line)
            if not match:
                raise MetadataError(f"line {number}: expected '  <sha256>  <file>': {line!r}")
            sums[match.group(2)] = match.group(1)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise MetadataError(f"line {number}: expected 'key: value': {line!r}")
        if key == "sha256":
            in_sums = True
        elif key in _FIELDS:
            fields[key] = value.strip()
        else:
            raise MetadataError(f"line {number}: unknown key {key!r}")
    missing = [k for k in _FIELDS if k != "note" and k not in fields]
    if missing:
        raise MetadataError(f"missing {', '.join(missing)}")
    if not sums:
        raise MetadataError("no files under sha256:")
    return Metadata(
        name=fields["name"],
        repository=fields["repository"],
        release=fields["release"],
        path=fields["path"],
        license=fields["license"],
        note=fields.get("note", ""),
        sha256=sums,
    )


def render_metadata(meta: Metadata) -> str:
    """The text `parse_metadata` reads back to `meta`."""
    lines = [
        "# Copied unchanged from upstream; refresh with "
        f"`make crds-refresh PROJECT={meta.name} RELEASE=<tag>`.",
        f"name: {meta.name}",
        f"repository: {meta.repository}",
        f"release: {meta.release}",
        f"path: {meta.path}",
        f"license: {meta.license}",
    ]
    if meta.note:
        lines.append(f"note: {meta.note}")
    lines.append("sha256:")
    lines += [f"  {digest}  {name}" for name, digest in sorted(meta.sha256.items())]
    return "\n".join(lines) + "\n"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mismatches(folder: Path, meta: Metadata) -> list[str]:
    """What differs between `folder` and its METADATA: files changed, missing or unlisted."""
    problems = []
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != METADATA}
    for name, want in sorted(meta.sha256.items()):
        if name not in present:
            problems.append(f"{folder / name}: listed in {METADATA} but missing")
        elif (got := digest((folder / name).read_bytes())) != want:
            problems.append(f"{folder / name}: sha256 {got}, {METADATA} says {want}")
    problems += [
        f"{folder / name}: not listed in {METADATA}"
        for name in sorted(present - set(meta.sha256))
        if not name.endswith(".md")
    ]
    return problems


def read_metadata(folder: Path) -> Metadata:
    return parse_metadata((folder / METADATA).read_text())


# --------------------------------------------------------------------------- the refresh
Fetch = Callable[[str], bytes]


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        data: bytes = response.read()
    return data


def refresh(folder: Path, release: str | None, *, get: Fetch = fetch) -> Metadata:
    """Download the folder's files at `release` (its pinned one when None) and rewrite it.

    Every file is downloaded before any is written, so a release that lacks one of them
    leaves the folder as it was.
    """
    meta = read_metadata(folder)
    target = replace(meta, release=release or meta.release)
    contents = {name: get(target.url(name)) for name in sorted(meta.sha256)}
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    refreshed = replace(target, sha256={name: digest(data) for name, data in contents.items()})
    (folder / METADATA).write_text(render_metadata(refreshed))
    return refreshed


def crd_projects() -> list[str]:
    return sorted(p.name for p in CRDS_DIR.iterdir() if (p / METADATA).is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make crds-refresh",
        description="Download the pinned upstream CRDs in third_party/crds again, from GitHub, "
        "at a named release tag, and rewrite their METADATA (release and sha256).",
    )
    parser.add_argument("project", nargs="?", help=f"one of {', '.join(crd_projects())}")
    parser.add_argument("release", nargs="?", help="a tag, e.g. v0.19.3 (default: the pinned)")
    args = parser.parse_args(argv)
    projects = [args.project] if args.project else crd_projects()
    if args.release and not args.project:
        parser.error("a RELEASE needs a PROJECT: releases differ from project to project")
    for project in projects:
        folder = CRDS_DIR / project
        if not (folder / METADATA).is_file():
            parser.error(f"no {folder / METADATA}; projects: {', '.join(crd_projects())}")
        before = read_metadata(folder)
        after = refresh(folder, args.release)
        changed = sorted(n for n in after.sha256 if after.sha256[n] != before.sha256.get(n))
        print(
            f"{project}: {before.release} -> {after.release}, {len(after.sha256)} files, "
            f"{len(changed)} changed{': ' + ', '.join(changed) if changed else ''}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
