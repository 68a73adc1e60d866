"""The `quartermaster` command as a user and a GitOps CI job meet it."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from controller.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, main
from controller.examples import EXAMPLE_DIR
from tests.builders import policy_doc, project_doc

GOLDEN = Path(__file__).parents[1] / "golden" / "example-render.yaml"
SHIPPED_EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples"
FIXED_NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
"""The clock `validate` judges deadlines by: before every one-off deadline of the example."""
FIXED_BEFORE_LAUNCH = datetime(2025, 5, 1, tzinfo=UTC)
"""Ten days before the `launch` deadline of the warning tests."""


def run(*argv: str, now: datetime = FIXED_NOW) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, now=lambda: now)
    return code, out.getvalue(), err.getvalue()


def write_policy(directory: Path, *docs: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(yaml.safe_dump_all(docs))
    return directory


class TestValidate:
    def test_the_bundled_example_is_valid(self) -> None:
        code, out, err = run("validate")
        assert (code, err) == (EXIT_OK, "")
        assert "valid: CapacityPolicy gpu-fleet (3 tiers, 2 pools), 7 TrainingProjects" in out

    def test_every_error_is_one_line_naming_file_object_and_field(self, tmp_path: Path) -> None:
        bad_project = project_doc("vision", tier="gold")
        bad_project["spec"]["quotas"][0]["nominalGpus"] = -1
        path = write_policy(tmp_path / "p", policy_doc(), bad_project, project_doc("nlp", tier="x"))
        code, out, err = run("validate", "-f", str(path))
        assert code == EXIT_INVALID
        assert out == ""
        file = path / "policy.yaml"
        assert err.splitlines() == [
            f"{file}#2: TrainingProject/vision: spec.quotas[0].nominalGpus: "
            "must be greater than or equal to 0, got -1",
            f"{file}#3: TrainingProject/nlp: spec.tier: unknown tier 'x'; "
            "defined tiers: production, research",
            f"{path}: 2 errors",
        ]

    def test_a_missing_directory_is_an_error_not_a_traceback(self, tmp_path: Path) -> None:
        code, _, err = run("validate", "-f", str(tmp_path / "nope"))
        assert code == EXIT_INVALID
        assert err.splitlines()[0] == f"{tmp_path / 'nope'}: no such file or directory"


class TestRender:
    def test_the_example_matches_the_golden_file(self) -> None:
        """Regenerate with `make golden` and review the diff when rendering changes."""
        code, out, _ = run("render")
        assert code == EXIT_OK
        assert out == GOLDEN.read_text()

    def test_output_is_byte_identical_across_processes(self, tmp_path: Path) -> None:
        """Separate interpreters (fresh hash seeds) must write the same bytes."""
        outputs = []
        for i in range(2):
            target = tmp_path / f"out{i}.yaml"
            subprocess.run(
                [sys.executable, "-m", "controller.cli", "render", "-o", str(target)],
                check=True,
                capture_output=True,
                env={"PYTHONHASHSEED": str(i + 1)},
            )
            outputs.append(target.read_bytes())
        assert outputs[0] == outputs[1]
        assert outputs[0] == GOLDEN.read_bytes()

    def test_an_on_demand_target_moves_nodepool_limits(self) -> None:
        code, out, _ = run("render", "--on-demand", "a100=64")
        assert code == EXIT_OK
        pools = {
            d["metadata"]["name"]: d["spec"]["limits"]["nvidia.com/gpu"]
            for d in yaml.safe_load_all(out)
            if d["kind"] == "NodePool"
        }
        assert pools["a100-on-demand"] == 64
        assert pools["a100-spot"] == 64  # the 124 - 64 = 60 spot GPUs, on whole 8-GPU nodes

    @pytest.mark.parametrize(
        ("argv", "want_error"),
        [
            pytest.param(
                ["--on-demand", "a100"],
                "--on-demand 'a100': expected POOL=GPUS, e.g. a100=32",
                id="a target without a count is refused",
            ),
            pytest.param(
                ["--on-demand", "v100=8"],
                "--on-demand: unknown pool(s) v100",
                id="a target for an unknown pool is refused",
            ),
        ],
    )
    def test_bad_targets_are_usage_errors(self, argv: list[str], want_error: str) -> None:
        code, out, err = run("render", *argv)
        assert (code, out, err.strip()) == (EXIT_USAGE, "", want_error)

    def test_an_invalid_policy_writes_nothing(self, tmp_path: Path) -> None:
        path = write_policy(tmp_path / "p", policy_doc(), project_doc(tier="gold"))
        target = tmp_path / "rendered.yaml"
        target.write_text("previous render\n")
        code, _, err = run("render", "-f", str(path), "-o", str(target))
        assert code == EXIT_INVALID
        assert "spec.tier: unknown tier 'gold'" in err
        assert target.read_text() == "previous render\n"


class TestExamples:
    def test_the_shipped_examples_are_real_files_identical_to_the_bundled_ones(self) -> None:
        """manifests/examples is what users copy; controller/examples is what the package
        ships. Copies, not links (a copied link dangles), so this keeps them from drifting."""
        shipped = sorted(SHIPPED_EXAMPLES.glob("*.yaml"))
        assert [p.name for p in shipped] == sorted(p.name for p in EXAMPLE_DIR.glob("*.yaml"))
        for path in shipped:
            assert not path.is_symlink(), f"{path} is a link"
            assert path.read_bytes() == (EXAMPLE_DIR / path.name).read_bytes(), path.name

    def test_a_copy_of_the_shipped_examples_is_valid(self, tmp_path: Path) -> None:
        """What `cp -r manifests/examples my-policy` gives (links are copied as links)."""
        copy = tmp_path / "my-policy"
        shutil.copytree(SHIPPED_EXAMPLES, copy, symlinks=True)
        code, out, err = run("validate", "-f", str(copy))
        assert (code, err) == (EXIT_OK, "")
        assert out.startswith(f"{copy}: valid: CapacityPolicy gpu-fleet")

    def test_a_copy_with_dangling_links_names_each_link(self, tmp_path: Path) -> None:
        copy = tmp_path / "my-policy"
        copy.mkdir()
        for name in ("policy.yaml", "projects.yaml"):
            (copy / name).symlink_to(f"../../controller/examples/{name}")
        code, out, err = run("validate", "-f", str(copy))
        assert (code, out) == (EXIT_INVALID, "")
        assert err.splitlines() == [
            f"{copy / name}: cannot read: a symbolic link to ../../controller/examples/{name}, "
            "which does not exist"
            for name in ("policy.yaml", "projects.yaml")
        ] + [f"{copy}: 2 errors"]


class TestValidateMessages:
    def test_a_past_one_off_deadline_is_a_warning_and_validate_passes(self, tmp_path: Path) -> None:
        late = project_doc(deadlines=[{"name": "launch", "at": "2025-05-11T00:00:00Z"}])
        path = write_policy(tmp_path / "p", policy_doc(), late)
        code, out, err = run("validate", "-f", str(path))
        assert code == EXIT_OK
        assert err.splitlines() == [
            f"{path / 'policy.yaml'}#2: TrainingProject/vision: spec.deadlines[0].at: warning: "
            "deadline 'launch' (2025-05-11T00:00:00Z) passed 562d12h ago; move or remove it"
        ]
        assert out == (
            f"{path}: valid: CapacityPolicy fleet (2 tiers, 1 pools), 1 TrainingProjects; "
            "1 warning\n"
        )

    def test_the_same_deadline_ahead_of_the_clock_is_no_warning(self, tmp_path: Path) -> None:
        late = project_doc(deadlines=[{"name": "launch", "at": "2025-05-11T00:00:00Z"}])
        path = write_policy(tmp_path / "p", policy_doc(), late)
        code, _, err = run("validate", "-f", str(path), now=FIXED_BEFORE_LAUNCH)
        assert (code, err) == (EXIT_OK, "")

    @pytest.mark.parametrize(
        ("files", "want"),
        [
            pytest.param(
                {"projects.yaml": "spec:\n  namespaces: [a,\n    b\n  quotas: []\n"},
                [
                    "{dir}/projects.yaml:4:9: invalid YAML: expected ',' or ']', but got ':' "
                    "(the flow sequence started at line 2, column 15)",
                    "{dir}: 1 error",
                ],
                id="a YAML error names the line and column, and where the [ began",
            ),
            pytest.param(
                {"projects.yaml": yaml.safe_dump(project_doc())},
                ["{dir}: no CapacityPolicy found; exactly one is required", "{dir}: 1 error"],
                id="no CapacityPolicy is reported against the directory",
            ),
            pytest.param(
                {"notes.txt": "not policy"},
                ["{dir}: no policy files (*.yaml, *.yml) in this directory", "{dir}: 1 error"],
                id="a directory with no YAML files says so",
            ),
            pytest.param(
                {"projects.yaml": "--- [a list]\n"},
                [
                    '{dir}/projects.yaml: the document must be a YAML mapping, got array ["a '
                    'list"]',
                    "{dir}: 1 error",
                ],
                id="a document that is not an object",
            ),
        ],
    )
    def test_file_level_errors_have_no_placeholders(
        self, tmp_path: Path, files: dict[str, str], want: list[str]
    ) -> None:
        directory = tmp_path / "p"
        directory.mkdir()
        for name, text in files.items():
            (directory / name).write_text(text)
        code, out, err = run("validate", "-f", str(directory))
        assert (code, out) == (EXIT_INVALID, "")
        assert err.splitlines() == [line.format(dir=directory) for line in want]


class TestRenderToDirectory:
    def rendered_documents(self) -> list[dict[str, object]]:
        return [d for d in yaml.safe_load_all(GOLDEN.read_text()) if d]

    @pytest.mark.parametrize(
        "trailing_slash", [pytest.param(True, id="DIR/"), pytest.param(False, id="existing DIR")]
    )
    def test_one_file_per_object(self, tmp_path: Path, trailing_slash: bool) -> None:
        target = tmp_path / "out"
        if not trailing_slash:
            target.mkdir()
        code, out, err = run("render", "-o", f"{target}/" if trailing_slash else str(target))
        assert (code, out) == (EXIT_OK, "")
        expected = self.rendered_documents()
        files = sorted(target.iterdir())
        assert len(files) == len(expected) == 35
        by_file = {p.name: yaml.safe_load(p.read_text()) for p in files}
        assert sorted(by_file.values(), key=str) == sorted(expected, key=str)
        assert by_file["localqueue_llm_llm-pretrain.yaml"]["kind"] == "LocalQueue"
        assert by_file["nodepool_a100-spot.yaml"]["metadata"]["name"] == "a100-spot"
        assert err.startswith(
            f"wrote 35 objects to {target}/, one file each: 35 written, 0 unchanged ("
        )

    def test_a_second_render_rewrites_nothing_and_removes_only_its_own_stale_files(
        self, tmp_path: Path
    ) -> None:
        target = tmp_path / "out"
        assert run("render", "-o", f"{target}/")[0] == EXIT_OK
        stale = target / "nodepool_v100-spot.yaml"
        stale.write_text((target / "nodepool_a100-spot.yaml").read_text())
        theirs = target / "kustomization.yaml"
        theirs.write_text("resources: []\n")
        notes = target / "README.md"
        notes.write_text("rendered by CI\n")
        code, _, err = run("render", "-o", str(target))
        assert code == EXIT_OK
        assert "one file each: 0 written, 35 unchanged, 1 of an earlier render removed" in err
        assert not stale.exists()
        assert theirs.read_text() == "resources: []\n"
        assert notes.exists()

    def test_a_changed_target_rewrites_only_the_files_that_change(self, tmp_path: Path) -> None:
        target = tmp_path / "out"
        assert run("render", "-o", f"{target}/")[0] == EXIT_OK
        code, _, err = run("render", "-o", str(target), "--on-demand", "a100=64")
        assert code == EXIT_OK
        # The two a100 NodePools and the ClusterQueues of the projects the 48 GPUs go to in
        # whole nodes; the others' quotas stay as they were.
        assert "one file each: 5 written, 30 unchanged" in err

    @pytest.mark.parametrize(
        "output",
        [
            pytest.param("{file}/out/", id="a directory under a file"),
            pytest.param("{file}/out.yaml", id="a file under a file"),
            pytest.param("{file}/", id="a file given as a directory"),
        ],
    )
    def test_a_path_that_cannot_be_written_is_an_error_not_a_traceback(
        self, tmp_path: Path, output: str
    ) -> None:
        blocking = tmp_path / "rendered.yaml"
        blocking.write_text("kept\n")
        target = output.format(file=blocking)
        code, out, err = run("render", "-o", target)
        assert (code, out) == (EXIT_INVALID, "")
        assert err == (
            f"render: cannot write {Path(target)}: {blocking} is a file, not a directory\n"
        )
        assert blocking.read_text() == "kept\n"


class TestRenderClampNotes:
    @pytest.mark.parametrize(
        ("argv", "want"),
        [
            pytest.param(
                ["--on-demand", "a100=999"],
                "--on-demand a100=999: rendering 124 on-demand GPUs instead: above the pool's "
                "quota (124 GPUs: projects' nominal quotas plus tier reservations); on-demand "
                "GPUs beyond it would have no quota to use them\n",
                id="above the pool's quota",
            ),
            pytest.param(
                ["--on-demand", "a100=4"],
                "--on-demand a100=4: rendering 16 on-demand GPUs instead: below the pool's "
                "on-demand floor (onDemand.floorGpus: 16)\n",
                id="below the floor",
            ),
            pytest.param(["--on-demand", "a100=64"], "", id="within the bounds: no note"),
        ],
    )
    def test_a_clamped_target_is_said_on_stderr(self, argv: list[str], want: str) -> None:
        code, out, err = run("render", *argv)
        assert code == EXIT_OK
        assert err == want
        assert out.startswith("---\n")
