"""The loader's size limits: an oversized policy is refused quickly, clearly, and cheaply.

`quartermaster validate` runs in CI on whatever a pull request contains, so what a file can make
it do must be bounded. The loader promises two limits (controller/api/loader.py): a file over
MAX_FILE_BYTES is refused from its size alone, before it is read, and a directory of more than
MAX_DOCUMENTS documents is refused. A production reader needs two more, on nesting depth and on
YAML alias expansion (go-yaml, behind kubectl, refuses "excessive aliasing"): MAX_DEPTH and
MAX_EXPANDED_NODES.
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import loader
from controller.api.loader import MAX_DOCUMENTS, MAX_FILE_BYTES, load_path
from controller.api.policy_set import InvalidPolicyError, PolicyError
from controller.cli import EXIT_INVALID, main
from tests.builders import policy_doc, project_doc, set_path

REPO_ROOT = Path(__file__).parents[3]


def errors_of(path: Path) -> list[PolicyError]:
    try:
        load_path(path)
    except InvalidPolicyError as invalid:
        return list(invalid.errors)
    raise AssertionError(f"{path} loaded")


def validate(path: Path) -> tuple[int, str, str]:
    """`quartermaster validate -f path`, in process."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["validate", "-f", str(path)], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def write_valid_policy(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(yaml.safe_dump_all([policy_doc(), project_doc()]))


# --------------------------------------------------------------------------- bytes


def sparse_file(path: Path, size: int) -> Path:
    """A file of `size` bytes that costs no disk: reading it would still cost `size`."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(MAX_FILE_BYTES + 1, id="one byte over the limit"),
        pytest.param(64 * 1024**3, id="64 GiB, which reading would not survive"),
    ],
)
def test_a_file_over_the_byte_limit_is_refused_from_its_size_without_being_read(
    tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = sparse_file(tmp_path / "huge.yaml", size)
    read: list[Path] = []
    original = Path.read_text

    def spy(self: Path, *args: Any, **kwargs: Any) -> str:
        read.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", spy)
    started = time.monotonic()
    errors = errors_of(big)
    assert time.monotonic() - started < 1.0
    assert read == []
    assert errors == [
        PolicyError.in_file(str(big), f"file is {size} bytes, over the limit of {MAX_FILE_BYTES}")
    ]


def test_an_oversized_file_is_reported_with_the_errors_of_the_readable_ones(
    tmp_path: Path,
) -> None:
    """One bad file must not hide the mistakes in the others: a user fixes all in one pass."""
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy_doc()))
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(project_doc(tier="gold")))
    big = sparse_file(tmp_path / "generated.yaml", MAX_FILE_BYTES + 1)
    assert [(e.origin, e.path, e.message.split(";")[0]) for e in errors_of(tmp_path)] == [
        (str(big), "", f"file is {MAX_FILE_BYTES + 1} bytes, over the limit of {MAX_FILE_BYTES}"),
        (str(tmp_path / "vision.yaml"), "spec.tier", "unknown tier 'gold'"),
    ]


def test_the_cli_refuses_an_oversized_file_naming_it_and_the_limit(tmp_path: Path) -> None:
    big = sparse_file(tmp_path / "huge.yaml", 5 * 1024 * 1024)
    code, out, err = validate(big)
    assert (code, out) == (EXIT_INVALID, "")
    assert err.splitlines() == [
        f"{big}: file is {5 * 1024 * 1024} bytes, over the limit of {MAX_FILE_BYTES}",
        f"{big}: 1 error",
    ]


# --------------------------------------------------------------------------- documents


def many_documents(directory: Path, count: int, files: int = 3) -> Path:
    """`count` small documents spread over `files` files: the limit is over the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file, rest = divmod(count, files)
    for i in range(files):
        n = per_file + (1 if i < rest else 0)
        (directory / f"part-{i}.yaml").write_text("--- {kind: TrainingProject}\n" * n)
    return directory


def test_more_documents_than_the_limit_are_refused_and_the_cli_says_so_first(
    tmp_path: Path,
) -> None:
    """Errors are sorted by origin, and the directory sorts before the files in it."""
    directory = many_documents(tmp_path / "policy", MAX_DOCUMENTS + 1)
    started = time.monotonic()
    code, out, err = validate(directory)
    elapsed = time.monotonic() - started
    lines = err.splitlines()
    assert (code, out) == (EXIT_INVALID, "")
    assert lines[0] == (
        f"{directory}: {MAX_DOCUMENTS + 1} documents, over the limit of {MAX_DOCUMENTS}"
    )
    assert lines[-1] == f"{directory}: {len(lines) - 1} errors"
    # About 3 s on the build machine; the bound only catches a quadratic slip.
    assert elapsed < 60


def test_exactly_the_document_limit_is_not_refused_for_its_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is inclusive; a smaller limit keeps the test fast and proves the comparison."""
    monkeypatch.setattr(loader, "MAX_DOCUMENTS", 3)
    write_valid_policy(tmp_path)
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(project_doc("speech")))
    policy_set = load_path(tmp_path)
    assert [p.name for p in policy_set.projects] == ["speech", "vision"]
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump(project_doc("nlp")))
    assert [e.message for e in errors_of(tmp_path)] == ["4 documents, over the limit of 3"]


# --------------------------------------------------------------------------- depth and aliases


def nested(depth: int) -> str:
    """A flow mapping `depth` levels deep: a few kilobytes, far under every byte limit."""
    return "{a: " * depth + "1" + "}" * depth


MAX_DEPTH = loader.MAX_DEPTH
MAX_EXPANDED_NODES = loader.MAX_EXPANDED_NODES


@pytest.mark.parametrize(
    "depth",
    [pytest.param(8, id="8 levels"), pytest.param(40, id="40 levels")],
)
def test_moderate_nesting_is_reported_as_a_field_error(tmp_path: Path, depth: int) -> None:
    """A value nested deeper than its field allows is a type error at that field, not a crash."""
    write_valid_policy(tmp_path)
    doc = set_path(project_doc("speech"), "spec.tier", "PLACEHOLDER")
    text = yaml.safe_dump(doc).replace("PLACEHOLDER", nested(depth))
    (tmp_path / "speech.yaml").write_text(text)
    (error,) = errors_of(tmp_path)
    assert (error.name, error.path) == ("speech", "spec.tier")
    assert error.message.startswith('must be a string, got object {"a": {"a": ')


def test_a_deeply_nested_document_is_refused_with_an_error_naming_the_depth(
    tmp_path: Path,
) -> None:
    write_valid_policy(tmp_path)
    deep = tmp_path / "deep.yaml"
    deep.write_text(f"kind: TrainingProject\nspec: {nested(1000)}\n")
    started = time.monotonic()
    errors = [e for e in errors_of(tmp_path) if e.origin.startswith(str(deep))]
    assert time.monotonic() - started < 5
    assert [(e.kind, e.path) for e in errors] == [("", "")], errors
    assert "nest" in errors[0].message or "deep" in errors[0].message
    assert str(MAX_DEPTH) in errors[0].message


def alias_bomb(levels: int) -> str:
    """A project whose tier is a `levels`-deep alias bomb: 10**(levels+1) strings in ~1 KB."""
    anchors = ['    l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [
        f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels + 1)
    ]
    return "\n".join(
        [
            "apiVersion: quartermaster.dev/v1alpha1",
            "kind: TrainingProject",
            "metadata:",
            "  name: vision",
            "  labels:",
            *anchors,
            "spec:",
            f"  tier: *l{levels}",
            "  namespaces: [vision]",
            "  quotas: [{pool: a100, nominalGpus: 16}]",
            "",
        ]
    )


MEMORY_CAP = 400 * 1024 * 1024
"""Address space for the CLI under test: enough for the example, not for a billion laughs."""


def validate_in_a_capped_process(path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """The real command, in a child that cannot take the machine's memory or time with it."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "validate", "-f", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
        preexec_fn=cap,  # pytest runs tests from one thread, as preexec_fn needs
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def test_the_capped_process_validates_an_ordinary_policy(tmp_path: Path) -> None:
    """So that the alias-bomb test below fails for the bomb, not for the cap."""
    write_valid_policy(tmp_path)
    result = validate_in_a_capped_process(tmp_path, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_yaml_alias_bomb_is_refused_quickly_naming_the_aliases(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(8))
    assert bomb.stat().st_size < 1024
    try:
        result = validate_in_a_capped_process(bomb, timeout=20)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("validate did not finish in 20 s") from exc
    lines = result.stderr.splitlines()
    # A clean refusal ends with the CLI's count; a crash ends with a traceback or MemoryError.
    assert result.returncode == EXIT_INVALID, result.stderr[-500:]
    assert lines[-1].startswith(f"{bomb}: ") and lines[-1].endswith(("error", "errors")), lines[-1]
    # The path holds the test's name, so look for the words only in what follows it.
    said = [line.removeprefix(str(bomb)) for line in lines[:-1]]
    assert any("alias" in line and str(MAX_EXPANDED_NODES) in line for line in said), lines
