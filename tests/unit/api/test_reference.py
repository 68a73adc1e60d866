"""The policy API reference in docs/: current with the types, and complete.

The page is generated from `controller/api/types.py` (`make reference`), as the CRDs are; a
reference that lags the types would tell a platform team about bounds the API server no longer
enforces, so the committed page must be exactly what the generator writes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.api.introspect import fields_of
from controller.api.reference import main, reference_markdown
from controller.api.types import (
    CapacityPolicySpec,
    Deadline,
    GpuPool,
    Preemption,
    RiskSettings,
    TrainingProjectSpec,
)

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "reference" / "policy-api.md"


def test_the_committed_reference_is_exactly_what_the_types_generate() -> None:
    assert PAGE.read_text() == reference_markdown(), "stale: run `make reference`"


def test_check_mode_fails_on_a_stale_page_and_passes_on_a_current_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "policy-api.md"
    assert main([str(page), "--check"]) == 1
    assert "make reference" in capsys.readouterr().err
    assert main([str(page)]) == 0
    assert main([str(page), "--check"]) == 0
    page.write_text(page.read_text() + "edited by hand\n")
    assert main([str(page), "--check"]) == 1


@pytest.mark.parametrize(
    "cls", [CapacityPolicySpec, TrainingProjectSpec, GpuPool, RiskSettings, Deadline]
)
def test_every_field_is_listed_with_its_description(cls: type) -> None:
    text = reference_markdown()
    section = text.split(f"\n### {cls.__name__}\n", 1)[1].split("\n### ", 1)[0]
    for info in fields_of(cls):
        row = next(
            line for line in section.splitlines() if line.startswith(f"| `{info.json_name}` |")
        )
        words = info.spec.description.split(";")[0][:40]
        for raw, shown in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|")):
            words = words.replace(raw, shown)
        assert words in row


def test_defaults_bounds_enums_and_rules_are_spelled_out() -> None:
    text = reference_markdown()
    tier = text.split("\n### Tier\n", 1)[1].split("\n### ", 1)[0]
    preemption = next(line for line in tier.splitlines() if line.startswith("| `preemption` |"))
    assert "[Preemption](#preemption)" in preemption
    assert f"Default: `{Preemption.LOWER_PRIORITY.value}`" in preemption
    assert all(f"`{m.value}`" in preemption for m in Preemption)
    priority = next(line for line in tier.splitlines() if line.startswith("| `priority` |"))
    assert "at least -1000000; at most 1000000000" in priority
    deadline = text.split("\n### Deadline\n", 1)[1].split("\n### ", 1)[0]
    assert "- exactly one of at (a one-off time) or schedule" in deadline
    assert "`has(self.at) != has(self.schedule)`" in deadline


def test_every_type_link_has_its_section() -> None:
    text = reference_markdown()
    anchors = {heading.lower() for heading in re.findall(r"^#{2,3} (\w+)$", text, re.MULTILINE)}
    links = set(re.findall(r"\]\(#([a-z]+)\)", text))
    assert links <= anchors
    assert len(anchors) == len(re.findall(r"^#{2,3} ", text, re.MULTILINE)), "duplicate names"
