"""The PrometheusRule is valid, Prometheus accepts it, and its alerts behave as their tests say.

`manifests/base/prometheusrule.yaml` is what the prometheus-operator turns into a rule file;
its `spec` is exactly that file's content. So the tests write the `spec` out, have the real
promtool (Debian's Prometheus 2.42, see `testenv.prometheus`) check it and run the
unit tests of `tests/alerts/quartermaster.test.yaml` against it, and check the object itself
against the pinned upstream PrometheusRule CRD. The coverage tests make sure a new alert cannot
be added without a case that fires and a case that must stay silent: an alert that has never
been seen firing in a test may well never fire.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from testenv import prometheus
from tests import upstream

REPO_ROOT = Path(__file__).resolve().parents[2]
RULE_MANIFEST = REPO_ROOT / "manifests" / "base" / "prometheusrule.yaml"
ALERT_TESTS = REPO_ROOT / "tests" / "alerts" / "quartermaster.test.yaml"
RULES_FILE_NAME = "quartermaster.rules.yaml"
"""The name the test file's `rule_files` refers to, relative to the test file."""

REQUIRED_ANNOTATIONS = ("summary", "description")
SEVERITIES = frozenset({"critical", "warning", "info"})


def load_rule_manifest() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(RULE_MANIFEST.read_text(encoding="utf-8"))
    return document


def alerting_rules(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        rule for group in manifest["spec"]["groups"] for rule in group["rules"] if "alert" in rule
    ]


def write_rules_file(directory: Path) -> Path:
    """The rule file the operator would generate: the PrometheusRule's `spec`, unchanged."""
    path = directory / RULES_FILE_NAME
    path.write_text(yaml.safe_dump(load_rule_manifest()["spec"], sort_keys=False))
    return path


def promtool_output(result: Any) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def alert_cases(tests_document: Mapping[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(test name, alert name, whether the case expects the alert to fire) for every case."""
    for index, group in enumerate(tests_document.get("tests") or []):
        name = str(group.get("name", f"tests[{index}]"))
        for case in group.get("alert_rule_test") or []:
            yield name, str(case["alertname"]), bool(case.get("exp_alerts"))


@pytest.fixture(scope="module")
def tests_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(ALERT_TESTS.read_text(encoding="utf-8"))
    return document


# --------------------------------------------------------------------------- promtool


def test_promtool_accepts_the_rules_generated_from_the_prometheus_rule(tmp_path: Path) -> None:
    rules = write_rules_file(tmp_path)
    result = prometheus.check_rules(rules)
    assert result.returncode == 0, promtool_output(result)
    assert "SUCCESS" in result.stdout + result.stderr, promtool_output(result)


def test_every_alert_unit_test_passes_under_promtool(tmp_path: Path) -> None:
    write_rules_file(tmp_path)
    # Beside the rules, so the test file's relative `rule_files` entry resolves.
    test_file = Path(shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name))
    result = prometheus.test_rules(test_file)
    assert result.returncode == 0, promtool_output(result)
    assert "SUCCESS" in result.stdout + result.stderr, promtool_output(result)


def test_a_failing_alert_expectation_makes_promtool_fail(
    tmp_path: Path, tests_document: dict[str, Any]
) -> None:
    """The negative control: a wrong expectation must fail, or a pass above means nothing."""
    write_rules_file(tmp_path)
    broken = copy.deepcopy(tests_document)
    for group in broken["tests"]:
        for case in group.get("alert_rule_test") or []:
            case["exp_alerts"] = [] if case.get("exp_alerts") else [{"exp_labels": {}}]
    test_file = tmp_path / "broken.test.yaml"
    test_file.write_text(yaml.safe_dump(broken, sort_keys=False))
    result = prometheus.test_rules(test_file)
    assert result.returncode != 0, promtool_output(result)


# --------------------------------------------------------------------------- coverage


def test_every_alert_has_a_case_that_fires_and_a_case_that_does_not(
    tests_document: dict[str, Any],
) -> None:
    cases = list(alert_cases(tests_document))
    missing = []
    for rule in alerting_rules(load_rule_manifest()):
        alert = rule["alert"]
        outcomes = {fires for _, name, fires in cases if name == alert}
        if True not in outcomes:
            missing.append(f"{alert}: no case where it fires")
        if False not in outcomes:
            missing.append(f"{alert}: no case where it must not fire (exp_alerts: [])")
    assert missing == [], "\n".join(missing)


def test_every_alert_the_tests_name_exists_in_the_rules(tests_document: dict[str, Any]) -> None:
    """A misspelt alert name would pass every `exp_alerts: []` case without testing anything."""
    defined = {rule["alert"] for rule in alerting_rules(load_rule_manifest())}
    unknown = sorted(
        {
            f"{test}: {alert}"
            for test, alert, _ in alert_cases(tests_document)
            if alert not in defined
        }
    )
    assert unknown == [], "cases for alerts the rules do not define:\n" + "\n".join(unknown)


def test_the_tests_read_the_rules_file_the_test_generates(tests_document: dict[str, Any]) -> None:
    assert tests_document["rule_files"] == [RULES_FILE_NAME]


# --------------------------------------------------------------------------- the alerts


@pytest.mark.parametrize(
    "rule", alerting_rules(load_rule_manifest()), ids=lambda rule: str(rule["alert"])
)
def test_every_alert_has_a_severity_a_summary_and_a_description(rule: dict[str, Any]) -> None:
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    for annotation in REQUIRED_ANNOTATIONS:
        text = rule.get("annotations", {}).get(annotation, "")
        assert isinstance(text, str) and text.strip(), f"{rule['alert']} has no {annotation}"


@pytest.mark.parametrize(
    "rule", alerting_rules(load_rule_manifest()), ids=lambda rule: str(rule["alert"])
)
def test_every_alert_description_says_what_to_do(rule: dict[str, Any]) -> None:
    """Whoever is paged reads the description first: it must go on from the symptom to steps."""
    assert "What to do:" in rule["annotations"]["description"]


def test_the_alerts_are_the_ones_the_controller_needs() -> None:
    assert sorted(rule["alert"] for rule in alerting_rules(load_rule_manifest())) == [
        "QuartermasterBudgetExceeded",
        "QuartermasterDeadlineRiskHigh",
        "QuartermasterNotReconciling",
        "QuartermasterPrometheusUnreachable",
        "QuartermasterReconcileErrors",
        "QuartermasterWarmPoolNotConverging",
    ]


# --------------------------------------------------------------------------- the object


def crd_errors(obj: Mapping[str, Any]) -> list[str]:
    """What the API server would reject in `obj` under the upstream PrometheusRule CRD.

    `tests.upstream.validate_against_crd` cannot be used as is: it checks the converted schema
    against the JSON Schema metaschema first, which compiles every `pattern` with Python's `re`,
    and the CRD's `partial_response_strategy` pattern `^(?i)(abort|warn)?$` is valid for the
    API server's Go regexp but not for Python (a global flag after `^`). Validating without
    that metaschema check still applies every pattern a field of ours is subject to.
    """
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    schema = upstream.crd_schema(api_version, kind)
    validator = jsonschema.Draft4Validator(upstream.to_json_schema(schema))
    defaulted = upstream.with_defaults(schema, obj)
    errors = [
        f"{upstream.json_path(tuple(error.path))}: {error.message}"
        for error in validator.iter_errors(defaulted)
    ]
    return errors + upstream.metadata_errors(obj, namespaced=True)


def with_namespace(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """As kustomize emits it: the base leaves the namespace to the overlay."""
    obj = copy.deepcopy(dict(manifest))
    obj["metadata"]["namespace"] = "quartermaster-system"
    return obj


def test_the_prometheus_rule_is_valid_under_the_upstream_crd() -> None:
    assert crd_errors(with_namespace(load_rule_manifest())) == []


def test_the_crd_check_rejects_a_bad_rule() -> None:
    """The negative control for the check above."""
    bad = with_namespace(load_rule_manifest())
    rule = bad["spec"]["groups"][0]["rules"][0]
    rule["for"] = "15 minutes"
    del rule["expr"]
    errors = crd_errors(bad)
    assert any("'15 minutes' does not match" in error for error in errors), errors
    assert any("'expr' is a required property" in error for error in errors), errors


def test_the_prometheus_rule_leaves_the_namespace_to_kustomize_and_carries_our_labels() -> None:
    metadata = load_rule_manifest()["metadata"]
    assert metadata["name"] == "quartermaster"
    assert "namespace" not in metadata
    assert metadata["labels"] == {
        "app.kubernetes.io/name": "quartermaster",
        "app.kubernetes.io/part-of": "quartermaster",
    }
