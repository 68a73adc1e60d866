"""The `quartermaster` command as a user and a GitOps CI job meet it."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, main
from controller.examples import EXAMPLE_DIR
from tests.builders import policy_doc, project_doc

GOLDEN = Path(__file__).parents[1] / "golden" / "example-render.yaml"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
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
        assert err.splitlines()[0] == f"{tmp_path / 'nope'}: file: -: no such file or directory"


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

    def test_the_example_files_users_copy_are_the_bundled_ones(self) -> None:
        shipped = Path(__file__).parents[2] / "manifests" / "examples"
        assert sorted(p.name for p in shipped.glob("*.yaml")) == sorted(
            p.name for p in EXAMPLE_DIR.glob("*.yaml")
        )
        for path in shipped.glob("*.yaml"):
            assert path.read_text() == (EXAMPLE_DIR / path.name).read_text()
