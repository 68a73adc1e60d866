"""What the repository carries from other projects is what its METADATA says it is.

Each folder of third_party/crds names its release and the sha256 of every file; the traces have
a SHA256SUMS. An upstream CRD edited by hand (to make a test pass, say) would make the tests
check against a schema no cluster runs, so the checksums are held here. The METADATA format is
read and written by `testenv.thirdparty`, which `make crds-refresh` uses; it is tested here too,
with a stand-in for the network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testenv.thirdparty import (
    CRDS_DIR,
    METADATA,
    TRACES_DIR,
    Metadata,
    MetadataError,
    crd_projects,
    digest,
    mismatches,
    parse_metadata,
    read_metadata,
    refresh,
    render_metadata,
)

PINNED = {
    "karpenter": "v1.14.1",
    "keda": "v2.20.2",
    "kueue": "v0.19.2",
    "prometheus-operator": "v0.93.0",
}


def test_the_four_projects_are_pinned_at_their_releases() -> None:
    assert {p: read_metadata(CRDS_DIR / p).release for p in crd_projects()} == PINNED


@pytest.mark.parametrize("project", sorted(PINNED))
def test_every_crd_file_matches_its_checksum(project: str) -> None:
    folder = CRDS_DIR / project
    meta = read_metadata(folder)
    assert meta.license.startswith("Apache-2.0")
    assert mismatches(folder, meta) == []
    assert render_metadata(meta) == (folder / METADATA).read_text(), "METADATA not canonical"


def test_the_license_the_crds_need_is_beside_them() -> None:
    assert "Apache License" in (CRDS_DIR / "LICENSE").read_text()


def test_the_traces_match_their_checksums() -> None:
    sums = {}
    for line in (TRACES_DIR / "SHA256SUMS").read_text().splitlines():
        want, name = line.split()
        sums[name] = want
    assert sorted(sums) == ["alibaba_openb_2023.csv.gz", "philly.csv.gz"]
    for name, want in sums.items():
        assert digest((TRACES_DIR / name).read_bytes()) == want, name


SAMPLE = Metadata(
    name="kueue",
    repository="kubernetes-sigs/kueue",
    release="v0.19.2",
    path="config/crd",
    license="Apache-2.0",
    note="",
    sha256={"a.yaml": digest(b"a: 1\n"), "b.yaml": digest(b"b: 1\n")},
)


def test_metadata_reads_back_what_it_writes() -> None:
    assert parse_metadata(render_metadata(SAMPLE)) == SAMPLE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("name: x\nsha256:\n  00  a.yaml\n", "expected '  <sha256>", id="short"),
        pytest.param("name: x\nversion: 1\n", "unknown key 'version'", id="unknown key"),
        pytest.param("name: x\nsha256:\n", "missing repository", id="fields missing"),
    ],
)
def test_metadata_that_does_not_parse_says_where(text: str, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_metadata(text)


def write_folder(folder: Path, files: dict[str, bytes], meta: Metadata) -> None:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / METADATA).write_text(render_metadata(meta))


def test_mismatches_names_changed_missing_and_unlisted_files(tmp_path: Path) -> None:
    folder = tmp_path / "kueue"
    write_folder(folder, {"a.yaml": b"a: 2\n", "c.yaml": b"c: 1\n"}, SAMPLE)
    found = mismatches(folder, read_metadata(folder))
    assert [line.split(": ", 1)[0].rsplit("/", 1)[1] for line in found] == [
        "a.yaml",
        "b.yaml",
        "c.yaml",
    ]
    assert "sha256" in found[0] and "missing" in found[1] and "not listed" in found[2]


def test_a_refresh_fetches_the_same_files_at_the_new_release(tmp_path: Path) -> None:
    folder = tmp_path / "kueue"
    write_folder(folder, {"a.yaml": b"a: 1\n", "b.yaml": b"b: 1\n"}, SAMPLE)
    asked: list[str] = []

    def get(url: str) -> bytes:
        asked.append(url)
        return b"new " + url.rsplit("/", 1)[1].encode()

    refreshed = refresh(folder, "v0.20.0", get=get)
    assert asked == [
        "https://raw.githubusercontent.com/kubernetes-sigs/kueue/v0.20.0/config/crd/a.yaml",
        "https://raw.githubusercontent.com/kubernetes-sigs/kueue/v0.20.0/config/crd/b.yaml",
    ]
    assert (folder / "a.yaml").read_bytes() == b"new a.yaml"
    assert read_metadata(folder) == refreshed
    assert refreshed.release == "v0.20.0"
    assert mismatches(folder, refreshed) == []


def test_a_release_missing_a_file_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "kueue"
    write_folder(folder, {"a.yaml": b"a: 1\n", "b.yaml": b"b: 1\n"}, SAMPLE)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def get(url: str) -> bytes:
        if url.endswith("b.yaml"):
            raise OSError("404 Not Found")
        return b"new"

    with pytest.raises(OSError, match="404"):
        refresh(folder, "v0.20.0", get=get)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
