"""What the control-plane build shows while it runs, and what it reports at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from testenv.controlplane import (
    BUILD_SCRIPT,
    build_key,
    built_versions,
    kubectl_line,
    progress_line,
)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        pytest.param(
            "[build +0s] step 1/5: package lists of Debian sid\n",
            "[build +0s] step 1/5: package lists of Debian sid",
            id="a step line of the script is shown, without its newline",
        ),
        pytest.param(
            "[build +93s] compiled: 412 of 1030 Go packages (k8s.io/apiserver/pkg/server)\n",
            "[build +93s] compiled: 412 of 1030 Go packages (k8s.io/apiserver/pkg/server)",
            id="a progress line inside a step is shown",
        ),
        pytest.param(
            "    Get:12 http://deb.debian.org/debian sid/main amd64 golang-k8s-api-dev all\n",
            None,
            id="apt's own output goes to the log only",
        ),
        pytest.param("    k8s.io/apimachinery/pkg/util/sets\n", None, id="Go's package list too"),
        pytest.param("", None, id="an empty line is not shown"),
    ],
)
def test_progress_line(line: str, shown: str | None) -> None:
    assert progress_line(line) == shown


MANIFEST = """\
golang-1.27-go=1.27.3-1
golang-1.27-src=1.27.3-1
golang-1.26-go=1.26.9-1
golang-k8s-apiextensions-apiserver-dev=0.36.4-1
golang-k8s-api-dev=0.36.4-1
etcd-server=3.5.30-2
kubectl=1.36.4+ds-1
"""


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(
            MANIFEST,
            [
                "crd-apiserver (Kubernetes API server code): "
                "golang-k8s-apiextensions-apiserver-dev 0.36.4-1",
                "etcd: etcd-server 3.5.30-2",
                "kubectl: kubectl 1.36.4+ds-1",
                "compiled with: golang-1.27-go 1.27.3-1",
                "all 7 package versions: manifest.txt",
            ],
            id="the server, etcd, kubectl and the newest Go compiler are named",
        ),
        pytest.param(
            "etcd-server=3.5.30-2\n\nnot a package line\n",
            ["etcd: etcd-server 3.5.30-2", "all 1 package versions: manifest.txt"],
            id="missing packages are left out and stray lines ignored",
        ),
    ],
)
def test_built_versions(manifest: str, want: list[str]) -> None:
    assert built_versions(manifest) == want


@pytest.mark.parametrize(
    ("chosen", "on_path", "want"),
    [
        pytest.param(None, None, "kubectl:        none (any kubectl", id="none anywhere"),
        pytest.param(
            "/cache/bin/kubectl",
            "/usr/bin/kubectl",
            "kubectl:        /cache/bin/kubectl (the server's release; /usr/bin/kubectl on PATH "
            "is not used)",
            id="another on PATH is named as not the one used",
        ),
        pytest.param(
            "/cache/bin/kubectl",
            "/cache/bin/kubectl",
            "kubectl:        /cache/bin/kubectl",
            id="the one on PATH is the one used",
        ),
        pytest.param(
            "/usr/bin/kubectl",
            "/usr/bin/kubectl",
            "kubectl:        /usr/bin/kubectl",
            id="no build",
        ),
    ],
)
def test_kubectl_line_says_which_kubectl_is_used(
    chosen: str | None, on_path: str | None, want: str
) -> None:
    line = kubectl_line(Path(chosen) if chosen else None, on_path)
    assert line.startswith(want)
    assert line == want or chosen is None


def test_the_cache_folder_changes_with_the_build_script() -> None:
    """A checkout whose server differs builds its own binaries instead of using another's."""
    script = BUILD_SCRIPT.read_bytes()
    assert build_key(script) == build_key(bytes(script))
    assert build_key(script) != build_key(script + b"\n# one more line\n")
    assert len(build_key(script)) == 12
