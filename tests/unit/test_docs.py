"""The README is a landing page whose links lead into docs/, and the site's sources are whole.

`make docs` (MkDocs, --strict) checks the links between pages of docs/; the README lives
outside the site, so its links are checked here, where a moved page would otherwise leave
GitHub's front page pointing nowhere. The metrics page names every metric the controller
exports.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from controller.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _relative_links(text: str) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if "://" not in t and not t.startswith("#")]


def test_the_readme_is_a_landing_page_under_250_lines() -> None:
    assert len(README.read_text().splitlines()) < 250


def test_the_readme_starts_with_the_two_commands_a_newcomer_runs() -> None:
    text = README.read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in block] == [
        "sh e2e/install-deps.sh && make demo",
        "make test",
    ]


def test_every_relative_link_of_the_readme_exists() -> None:
    links = _relative_links(README.read_text())
    assert links, "the README links into docs/"
    missing = [link for link in links if not (ROOT / link.split("#")[0]).exists()]
    assert missing == []


def test_every_page_in_docs_is_in_the_navigation_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        if isinstance(node, list):
            return [p for item in node for p in pages(item)]
        return []

    nav = set(pages(config["nav"]))
    docs = ROOT / config["docs_dir"]
    on_disk = {str(p.relative_to(docs)) for p in docs.rglob("*.md")}
    assert nav == on_disk


def test_every_metric_the_controller_exports_is_on_the_metrics_page() -> None:
    """The page lists the series by name (counters with `_total`, as PromQL names them): a
    metric added to `controller/metrics.py` without a word there fails here."""
    page = (ROOT / "docs" / "operations" / "metrics.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(quartermaster_\w+)", page))
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in Metrics().registry.collect()
    }
    assert sorted(exported - named) == []
