"""Kueue's configuration as e2e/kind.sh patches it: our label keys copied from Jobs (pure).

The configurations below are written as Kueue's release manifests ship them in the
`kueue-manager-config` ConfigMap (v1beta1 in older releases, v1beta2 in newer ones).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from e2e.kueue_config import ConfigError, main, patched_config_map, with_label_keys

OURS = [
    "quartermaster.dev/deadline",
    "quartermaster.dev/expected-duration-seconds",
    "quartermaster.dev/checkpoint-interval-seconds",
]
SHIPPED = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8443
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
integrations:
  frameworks:
  - "batch/job"
  - "kubeflow.org/pytorchjob"
  - "ray.io/rayjob"
  - "jobset.x-k8s.io/jobset"
"""


def config(**changes: Any) -> str:
    doc = yaml.safe_load(SHIPPED)
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize(
    ("before", "extra", "want_keys"),
    [
        pytest.param(SHIPPED, [], OURS, id="the shipped configuration gets our three keys"),
        pytest.param(
            SHIPPED,
            ["example.com/paper"],
            [*OURS, "example.com/paper"],
            id="a deadline's matchLabels key comes after ours",
        ),
        pytest.param(
            config(integrations={"frameworks": ["batch/job"], "labelKeysToCopy": ["team"]}),
            [],
            ["team", *OURS],
            id="keys listed already stay first",
        ),
        pytest.param(
            config(integrations={"labelKeysToCopy": [OURS[1], "team"]}),
            ["team"],
            [OURS[1], "team", OURS[0], OURS[2]],
            id="a key listed already is not listed twice",
        ),
        pytest.param(
            config(apiVersion="config.kueue.x-k8s.io/v1beta1", integrations=None),
            [],
            OURS,
            id="a v1beta1 configuration with integrations empty",
        ),
        pytest.param(
            yaml.safe_dump(
                {k: v for k, v in yaml.safe_load(SHIPPED).items() if k != "integrations"}
            ),
            [],
            OURS,
            id="a configuration without integrations",
        ),
    ],
)
def test_the_label_keys_are_added(before: str, extra: list[str], want_keys: list[str]) -> None:
    got = yaml.safe_load(with_label_keys(before, [*OURS, *extra]))
    assert got["integrations"]["labelKeysToCopy"] == want_keys
    untouched = yaml.safe_load(before)
    assert got["apiVersion"] == untouched["apiVersion"]
    for key in ("health", "metrics", "webhook", "leaderElection"):
        assert got[key] == untouched[key]
    frameworks = (untouched.get("integrations") or {}).get("frameworks")
    assert got["integrations"].get("frameworks") == frameworks


@pytest.mark.parametrize(
    ("text", "want_message"),
    [
        pytest.param("a: [b", "is not YAML", id="not YAML"),
        pytest.param("kind: ConfigMap\n", "is not a Kueue Configuration", id="another kind"),
        pytest.param(
            config(integrations=["batch/job"]),
            "integrations is not a mapping",
            id="integrations a list",
        ),
        pytest.param(
            config(integrations={"labelKeysToCopy": "team"}),
            "labelKeysToCopy is not a list",
            id="labelKeysToCopy a string",
        ),
        pytest.param(
            config(integrations={"labelKeysToCopy": [f"k{i}" for i in range(62)]}),
            "at most 64 keys",
            id="62 keys and our 3 are over Kueue's 64",
        ),
        pytest.param(
            config(integrations={"labelKeysToCopy": ["example.com/" + "k" * 60]}),
            "too long: ['example.com/kkk",
            id="a key over 64 characters",
        ),
    ],
)
def test_a_configuration_it_cannot_patch_is_refused_with_the_reason(
    text: str, want_message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        with_label_keys(text, OURS)
    assert want_message in str(raised.value)


def config_map(data: dict[str, str] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
    }
    doc["metadata"]["resourceVersion"] = "4711"
    if data is not None:
        doc["data"] = data
    return doc


def test_the_config_map_keeps_its_identity_and_other_data() -> None:
    before = config_map({"controller_manager_config.yaml": SHIPPED, "other": "kept"})
    got = patched_config_map(before, ["example.com/paper"])
    assert got["metadata"] == before["metadata"]
    assert got["data"]["other"] == "kept"
    patched = yaml.safe_load(got["data"]["controller_manager_config.yaml"])
    assert patched["integrations"]["labelKeysToCopy"] == [*OURS, "example.com/paper"]


@pytest.mark.parametrize("data", [None, {}, {"controller_manager_config.yaml": 7}])
def test_a_config_map_without_the_configuration_is_refused(data: dict[str, Any] | None) -> None:
    with pytest.raises(ConfigError) as raised:
        patched_config_map(config_map(data), [])
    assert "has no data.controller_manager_config.yaml" in str(raised.value)


def test_main_reads_the_config_map_on_stdin_and_prints_it_patched(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = config_map({"controller_manager_config.yaml": SHIPPED})
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(before)))
    assert main(["example.com/paper"]) == 0
    out = json.loads(capsys.readouterr().out)
    patched = yaml.safe_load(out["data"]["controller_manager_config.yaml"])
    assert patched["integrations"]["labelKeysToCopy"] == [*OURS, "example.com/paper"]


def test_main_says_what_is_wrong_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(config_map(None))))
    assert main([]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "e2e.kueue_config: ConfigMap kueue-manager-config has no "
        "data.controller_manager_config.yaml\n"
    )
