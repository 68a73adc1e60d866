"""Every query on the dashboards and in the alerts parses, and names only metrics that exist.

A dashboard is never compiled: a misspelt metric draws an empty panel that nobody notices
until the day it is needed, and a renamed metric silently breaks every panel and alert on it.
So every PromQL expression of `dashboards/*.json` (panel targets and template-variable
queries) and of the PrometheusRule is

- parsed by the real promtool (Debian's Prometheus 2.42, `testenv.prometheus`):
  written as recording rules, which `promtool check rules` parses one by one; and
- reduced to the metric names it selects, each of which must be exported by the controller
  (read from the registry of `controller.metrics.Metrics`, so the contract is the code, not a
  copy of it) or by Kueue (`tests.kueue_metrics`, copied from Kueue's `pkg/metrics/metrics.go`).

Grafana's variables are replaced with valid values first. Negative controls show that both
checks can fail. The remaining tests hold the dashboards to what Grafana provisioning expects:
valid JSON, unique panel ids, the data source as a template variable, and a per-project
dashboard whose every query is about the chosen project.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.metrics import Metrics
from controller.risk.recalibration import Judged, by_tier, calibrate
from testenv import prometheus
from tests.kueue_metrics import KUEUE_METRICS

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO_ROOT / "dashboards"
DASHBOARDS = (DASHBOARD_DIR / "overview.json", DASHBOARD_DIR / "project.json")
PROJECT_DASHBOARD = DASHBOARD_DIR / "project.json"
RULE_MANIFEST = REPO_ROOT / "manifests" / "base" / "prometheusrule.yaml"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

GRAFANA_VARIABLES: Mapping[str, str] = {
    # Grafana's built-ins, as it would fill them in for a 1-hour range.
    "__rate_interval": "5m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
    # Our template variables.
    "datasource": "prometheus",
    "project": "vision",
}
_VARIABLE = re.compile(
    r"\$\{(?P<braced>[A-Za-z_]\w*)(?::[^}]*)?\}|\[\[(?P<old>[A-Za-z_]\w*)\]\]|\$(?P<plain>[A-Za-z_]\w*)"
)


def substitute_variables(text: str) -> str:
    """Fill in the Grafana variables we know; unknown ones are left so the parse check fails.

    `$1`-style references inside `label_replace` strings are not variables and stay as they
    are (a variable name cannot start with a digit).
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("old") or match.group("plain")
        return GRAFANA_VARIABLES.get(name, match.group(0))

    return _VARIABLE.sub(replace, text)


# --------------------------------------------------------------------------- collecting queries


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it came from, for error messages that lead to it."""

    source: str
    expr: str


def load_dashboard(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def all_panels(panels: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Panels in order, including those nested in (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels") or [])


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<args>.*)\)\s*$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^\s*query_result\(\s*(?P<expr>.*)\)\s*$", re.DOTALL)
_LABEL_NAME = re.compile(r"^[A-Za-z_]\w*$")


def variable_expression(query: str) -> str | None:
    """The PromQL in a Prometheus template-variable query, or None when it has none.

    `label_values(metric{...}, label)` selects `metric{...}`; `label_values(label)` and
    `metrics(regex)` select no expression; `query_result(expr)` is `expr`; anything else is
    taken as an expression.
    """
    if match := _LABEL_VALUES.match(query):
        head, _, last = match.group("args").rpartition(",")
        if not head:
            return None
        if not _LABEL_NAME.match(last.strip()):
            return match.group("args")  # not a label: let the parse check report it
        return head.strip()
    if match := _QUERY_RESULT.match(query):
        return match.group("expr")
    if query.strip().startswith("metrics(") or not query.strip():
        return None
    return query


def dashboard_queries(path: Path) -> list[Query]:
    dashboard = load_dashboard(path)
    queries = []
    for panel in all_panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if "expr" in target:
                source = (
                    f"{path.name}: panel {panel.get('title')!r} (id {panel.get('id')}), "
                    f"target {target.get('refId')}"
                )
                queries.append(Query(source, substitute_variables(target["expr"])))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        raw = variable.get("query")
        text = raw.get("query", "") if isinstance(raw, Mapping) else str(raw or "")
        expr = variable_expression(text)
        if expr is not None:
            source = f"{path.name}: template variable {variable.get('name')!r}"
            queries.append(Query(source, substitute_variables(expr)))
    return queries


def rule_queries() -> list[Query]:
    manifest = yaml.safe_load(RULE_MANIFEST.read_text(encoding="utf-8"))
    return [
        Query(f"{RULE_MANIFEST.name}: {rule.get('alert') or rule.get('record')}", str(rule["expr"]))
        for group in manifest["spec"]["groups"]
        for rule in group["rules"]
    ]


def every_query() -> list[Query]:
    return [query for path in DASHBOARDS for query in dashboard_queries(path)] + rule_queries()


# --------------------------------------------------------------------------- parsing (promtool)


def _rules_document(queries: Iterable[Query]) -> dict[str, Any]:
    rules = [{"record": f"check:expr_{i}", "expr": q.expr} for i, q in enumerate(queries)]
    return {"groups": [{"name": "expressions", "rules": rules}]}


def _check(queries: list[Query], directory: Path) -> tuple[bool, str]:
    path = directory / "expressions.rules.yaml"
    path.write_text(yaml.safe_dump(_rules_document(queries), sort_keys=False))
    result = prometheus.check_rules(path)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def parse_errors(queries: list[Query], directory: Path) -> list[str]:
    """'<source>: <expr>: <promtool's complaint>' for every expression promtool rejects.

    One promtool run for all; only when that fails, one run per expression, so that each
    failure is named by its dashboard, panel and expression rather than a rule index.
    """
    ok, _ = _check(queries, directory)
    if ok:
        return []
    errors = []
    for query in queries:
        ok, output = _check([query], directory)
        if not ok:
            errors.append(f"{query.source}: {query.expr!r}: {output}")
    return errors or ["promtool rejected the expressions together but none alone"]


# --------------------------------------------------------------------------- metric names

# The functions of PromQL (Prometheus 2.42) and its aggregation operators.
FUNCTIONS = frozenset(
    {
        "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
        "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
        "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month",
        "deg", "delta", "deriv", "exp", "floor", "histogram_count", "histogram_fraction",
        "histogram_quantile", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
        "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
        "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
        "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
        "scalar", "sgn", "sin", "sinh", "sort", "sort_desc", "sqrt", "stddev_over_time",
        "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector",
        "year", "start", "end",
    }
)  # fmt: skip
AGGREGATIONS = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile",
    }
)  # fmt: skip
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = LABEL_LIST_KEYWORDS | {"bool", "offset", "and", "or", "unless", "atan2"}
NUMBER_WORDS = frozenset({"inf", "nan"})

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<number>0[xX][0-9a-fA-F]+
      |(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<open>[({\[])
  | (?P<close>[)}\]])
  | (?P<space>\s+)
  | (?P<other>.)
    """,
    re.VERBOSE,
)
_CLOSING = {"(": ")", "{": "}", "[": "]"}


def _tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) of every token but whitespace; strings, numbers and durations are tokens
    of their own, so nothing inside them is mistaken for a name."""
    tokens = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup or "other"
        if kind != "space":
            tokens.append((kind, match.group()))
    return tokens


def _skip_group(tokens: list[tuple[str, str]], start: int) -> int:
    """Index just past the bracketed group opening at `start`."""
    opening = tokens[start][1]
    depth = 0
    for index in range(start, len(tokens)):
        text = tokens[index][1]
        if text == opening:
            depth += 1
        elif text == _CLOSING[opening]:
            depth -= 1
            if depth == 0:
                return index + 1
    return len(tokens)  # unbalanced: promtool reports it


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects.

    Skipped: label matchers (everything inside `{...}`), range and subquery brackets, the label
    lists after by/without/on/ignoring/group_left/group_right, function and aggregation names
    (a name followed by `(`, or an aggregation followed by by/without), keywords, strings,
    numbers and durations.
    """
    tokens = _tokens(expr)
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "open" and text in ("{", "["):
            index = _skip_group(tokens, index)
            continue
        if kind == "ident":
            word = text.lower()
            if word in LABEL_LIST_KEYWORDS:
                index += 1
                if following == "(":
                    index = _skip_group(tokens, index)
                continue
            is_function = following == "(" or (
                word in AGGREGATIONS and following.lower() in ("by", "without")
            )
            if not (is_function or word in KEYWORDS or word in NUMBER_WORDS):
                names.add(text)
        index += 1
    return names


def exported_metric_names(metrics: Metrics) -> frozenset[str]:
    """Every series name the controller's registry exposes, as PromQL names it.

    Read from the metric families, not from samples: a labelled histogram or counter without
    children has no samples yet but will have them.
    """
    names: set[str] = set()
    for family in metrics.registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        elif family.type == "summary":
            names.update(f"{family.name}{suffix}" for suffix in ("", "_sum", "_count"))
        else:
            names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return frozenset(names)


def unknown_metrics(queries: Iterable[Query], known: frozenset[str]) -> list[str]:
    return [
        f"{query.source}: {query.expr!r}: unknown metric {name!r}"
        for query in queries
        for name in sorted(metric_names(query.expr) - known)
    ]


@pytest.fixture(scope="module")
def known_metrics() -> frozenset[str]:
    return exported_metric_names(Metrics()) | KUEUE_METRICS


# --------------------------------------------------------------------------- the checks


def test_there_are_queries_to_check() -> None:
    """Guards the collectors: a query collector that finds nothing would pass everything."""
    for path in DASHBOARDS:
        assert len(dashboard_queries(path)) >= 10, path
    assert len(rule_queries()) >= 6


def test_every_dashboard_and_alert_expression_parses(tmp_path: Path) -> None:
    errors = parse_errors(every_query(), tmp_path)
    assert errors == [], "\n".join(errors)


def test_every_metric_the_dashboards_and_alerts_use_is_exported(
    known_metrics: frozenset[str],
) -> None:
    errors = unknown_metrics(every_query(), known_metrics)
    assert errors == [], "\n".join(errors)


def test_no_grafana_variable_is_left_unsubstituted() -> None:
    leftovers = [f"{q.source}: {q.expr!r}" for q in every_query() if "$" in q.expr]
    assert leftovers == [], "\n".join(leftovers)


def test_the_parse_check_names_the_panel_of_an_expression_with_a_syntax_error(
    tmp_path: Path,
) -> None:
    queries = [
        Query("good.json: panel 'Fine'", "sum(rate(quartermaster_decisions_total[5m]))"),
        Query("bad.json: panel 'Broken'", "sum(rate(quartermaster_decisions_total[5m])"),
    ]
    errors = parse_errors(queries, tmp_path)
    assert len(errors) == 1, errors
    assert errors[0].startswith("bad.json: panel 'Broken': 'sum(rate("), errors


def test_the_metric_check_catches_an_unknown_metric(known_metrics: frozenset[str]) -> None:
    query = Query(
        "bad.json: panel 'Typo'",
        'sum by (pool) (quartermaster_warm_pool_target_gpu{pool="a100"})'
        " / on (pool) group_left max by (pool) (quartermaster_pool_idle_gpus)",
    )
    assert unknown_metrics([query], known_metrics) == [
        "bad.json: panel 'Typo': "
        f"{query.expr!r}: unknown metric 'quartermaster_warm_pool_target_gpu'"
    ]


def test_the_controller_registry_yields_series_names_as_prometheus_exposes_them() -> None:
    names = exported_metric_names(Metrics())
    assert {
        "quartermaster_decisions_total",
        "quartermaster_reconcile_errors_total",
        "quartermaster_reconcile_duration_seconds_bucket",
        "quartermaster_workload_duration_seconds_count",
        "quartermaster_deadline_risk_ratio",
        "quartermaster_build_info",
    } <= names
    assert "quartermaster_decisions" not in names  # counters are only exposed with `_total`


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param(
            'up{job="x", instance=~"a.*"}',
            {"up"},
            id="label names and values in braces are skipped",
        ),
        pytest.param(
            "sum by (pool, le) (rate(a_bucket[5m]))",
            {"a_bucket"},
            id="aggregations, functions and their by clause are skipped",
        ),
        pytest.param(
            "sum(rate(a_total[$__rate_interval])) without (instance)",
            {"a_total"},
            id="a trailing without clause is skipped",
        ),
        pytest.param(
            "a / on (pool) group_left (tier) b * ignoring (x) c",
            {"a", "b", "c"},
            id="vector matching label lists are skipped",
        ),
        pytest.param(
            "a > bool 0.2 and b unless c or d offset 1h30m",
            {"a", "b", "c", "d"},
            id="keywords, numbers and durations are skipped",
        ),
        pytest.param(
            'label_replace(a, "dst", "$1", "src", "(.*)") + Inf - NaN + 1e3 + 0x1F',
            {"a"},
            id="strings and special numbers are skipped",
        ),
        pytest.param(
            "max_over_time(a[1h:5m]) @ end() - time() - timestamp(b)",
            {"a", "b"},
            id="subqueries and the at modifier are skipped",
        ),
        pytest.param(
            'count_values by (v) ("v", a) + topk(3, b) + quantile without (x) (0.9, c)',
            {"a", "b", "c"},
            id="parameters of aggregations are skipped",
        ),
        pytest.param(
            "ns:recorded_rule:rate5m", {"ns:recorded_rule:rate5m"}, id="colons are part of names"
        ),
    ],
)
def test_metric_names_are_extracted_from_expressions(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param(
            'label_values(m{a="b"}, project)', 'm{a="b"}', id="label_values selects its metric"
        ),
        pytest.param(
            "label_values(project)", None, id="label_values of a label alone selects nothing"
        ),
        pytest.param(
            "query_result(topk(3, m))", "topk(3, m)", id="query_result selects its expression"
        ),
        pytest.param("metrics(quartermaster_.*)", None, id="metrics selects nothing"),
    ],
)
def test_template_variable_queries_are_reduced_to_their_expression(
    query: str, expected: str | None
) -> None:
    assert variable_expression(query) == expected


def test_grafana_variables_are_substituted_but_regex_references_are_not() -> None:
    assert (
        substitute_variables(
            'label_replace(rate(m{p="$project", q="${project:regex}"}[$__rate_interval]),'
            ' "d", "$1", "s", "(.*)")'
        )
        == 'label_replace(rate(m{p="vision", q="vision"}[5m]), "d", "$1", "s", "(.*)")'
    )


# --------------------------------------------------------------------------- dashboard structure


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_the_dashboard_is_json_with_a_uid_our_tag_and_a_current_schema(path: Path) -> None:
    dashboard = load_dashboard(path)
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert "quartermaster" in dashboard["tags"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert "id" not in dashboard or dashboard["id"] is None  # provisioning assigns it


def test_the_dashboards_have_different_uids() -> None:
    uids = [load_dashboard(path)["uid"] for path in DASHBOARDS]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_panel_ids_are_unique(path: Path) -> None:
    ids = [panel["id"] for panel in all_panels(load_dashboard(path)["panels"])]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_the_data_source_is_a_prometheus_template_variable(path: Path) -> None:
    variables = {v["name"]: v for v in load_dashboard(path)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_every_panel_and_target_reads_the_data_source_variable(path: Path) -> None:
    """A hard-coded data source uid breaks the dashboard in every other Grafana."""
    wrong = []
    for panel in all_panels(load_dashboard(path)["panels"]):
        if panel["type"] == "row":  # rows only group panels; they run no query
            continue
        if panel.get("datasource") != DATASOURCE:
            wrong.append(f"panel {panel['title']!r}: {panel.get('datasource')}")
        if not panel.get("targets"):
            wrong.append(f"panel {panel['title']!r}: no targets")
        for target in panel.get("targets") or []:
            if target.get("datasource") != DATASOURCE:
                wrong.append(f"panel {panel['title']!r} target {target.get('refId')}")
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_every_panel_has_a_title_a_description_and_a_place_on_the_grid(path: Path) -> None:
    for panel in all_panels(load_dashboard(path)["panels"]):
        assert panel.get("title"), panel["id"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel.get("description"), panel["title"]


_PROJECT_MATCHER = re.compile(r'\b(?:project|cluster_queue)\s*=~?\s*"\$(?:project|\{project\})"')


def test_every_query_of_the_project_dashboard_filters_on_the_project() -> None:
    """The ClusterQueue is named after its project (`controller.render.kueue`), so queue
    metrics match `cluster_queue="$project"` and project metrics `project="$project"`."""
    dashboard = load_dashboard(PROJECT_DASHBOARD)
    unfiltered = [
        f"{panel['title']!r} {target.get('refId')}: {target['expr']}"
        for panel in all_panels(dashboard["panels"])
        for target in panel.get("targets") or []
        if not _PROJECT_MATCHER.search(target["expr"])
    ]
    assert unfiltered == [], "\n".join(unfiltered)


def test_the_project_variable_lists_the_projects_with_deadlines() -> None:
    variables = {v["name"]: v for v in load_dashboard(PROJECT_DASHBOARD)["templating"]["list"]}
    project = variables["project"]
    assert project["type"] == "query"
    assert project["datasource"] == DATASOURCE
    assert project["query"]["query"] == "label_values(quartermaster_deadline_risk_ratio, project)"
    assert project["multi"] is False  # queries match `="$project"`, one project at a time


# --------------------------------------------------------------------------- the calibration row

CALIBRATION_PANELS = (
    "Reliability: deadlines missed by predicted risk",
    "Brier score in the time range",
    "Deadlines judged in the time range",
)
RISKS = tuple(k / 16 for k in range(17) if k not in (8, 12))
"""Risks that are exact binary fractions (so sums and squares are exact in any order) and not
on a decile's edge but 0 and 1 (Prometheus buckets hold their upper bound, the table's deciles
their lower one: they agree everywhere else). No risk falls in [0.7, 0.8): an empty decile."""


def judged_estimates() -> list[Judged]:
    """Sixty deadlines of two tiers, one to four estimates each, a third of them missed."""
    rng = random.Random(11)
    out = []
    for d in range(60):
        tier = ("production", "research")[d % 2]
        missed = rng.random() < 0.35
        for e in range(rng.randint(1, 4)):
            out.append(Judged(f"p{d}/d@{d}", tier, rng.choice(RISKS), float(e), missed, 9.0))
    return out


def calibration_queries() -> dict[str, list[tuple[str, str]]]:
    """Per panel of the Calibration row, (legend, expression) of each target, variables
    filled in (the range is an hour)."""
    dashboard = load_dashboard(DASHBOARD_DIR / "overview.json")
    panels = {p["title"]: p for p in all_panels(dashboard["panels"])}
    return {
        title: [
            (t["legendFormat"], substitute_variables(t["expr"])) for t in panels[title]["targets"]
        ]
        for title in CALIBRATION_PANELS
    }


def input_series(metrics: Metrics) -> list[dict[str, str]]:
    """The calibration series as promtool input: 0 an hour ago, today's value since."""
    _, _, body = metrics.render()
    out = []
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if "judged" not in sample.name:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out.append({"series": f"{sample.name}{{{labels}}}", "values": f"0 {sample.value!r}x60"})
    return out


def expect(expr: str, samples: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "expr": expr,
        "eval_time": "60m",
        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
    }


def test_the_calibration_row_shows_what_quartermaster_calibration_prints(
    tmp_path: Path,
) -> None:
    """Judged estimates exported as the controller exports them, an hour of them in Prometheus
    (promtool's rule tests): each reliability bar is the table's observed share of its decile
    (none for the empty one), the Brier score is the table's, in all and per tier, and the
    counts are the deadlines and estimates judged."""
    judged = judged_estimates()
    metrics = Metrics()
    metrics.observe_judged(judged)
    table = calibrate(judged)
    queries = calibration_queries()
    cases = []
    reliability = queries[CALIBRATION_PANELS[0]]
    assert len(reliability) == len(table.deciles) == 10
    assert any(d.count == 0 for d in table.deciles)
    for (legend, expr), decile in zip(reliability, table.deciles, strict=True):
        assert legend.endswith(f"{decile.high:.1f}]"), legend
        cases.append(expect(expr, [] if decile.observed is None else [("{}", decile.observed)]))
    (_, every), (_, per_tier) = queries[CALIBRATION_PANELS[1]]
    assert table.brier is not None
    cases.append(expect(every, [("{}", table.brier)]))
    cases.append(
        expect(
            per_tier,
            [
                (f'{{tier="{tier}"}}', calibrate(items).brier or 0.0)
                for tier, items in by_tier(judged).items()
            ],
        )
    )
    counts = dict(queries[CALIBRATION_PANELS[2]])
    missed = len({j.deadline_id for j in judged if j.missed})
    met = len({j.deadline_id for j in judged if not j.missed})
    assert 0 < missed < met
    cases.append(expect(counts["missed"], [("{}", missed)]))
    cases.append(expect(counts["met"], [("{}", met)]))
    cases.append(expect(counts["estimates"], [("{}", len(judged))]))

    (tmp_path / "none.rules.yaml").write_text("groups: []\n")
    document = {
        "rule_files": ["none.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "the calibration row",
                "interval": "1m",
                "input_series": input_series(metrics),
                "promql_expr_test": cases,
            }
        ],
    }
    path = tmp_path / "calibration.test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = prometheus.test_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
