"""Results kept across passes while their objects do not change (`controller.reconcile.memo`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.reconcile.memo import DiffMemo, VersionMemo


def obj(name: str, version: str | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if version is not None:
        meta["resourceVersion"] = version
    return {"kind": "Workload", "metadata": meta, **extra}


class Counting:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, o: Mapping[str, Any], context: str) -> str:
        self.calls.append(o["metadata"]["name"])
        return f"{o['metadata']['name']}@{o['metadata'].get('resourceVersion')}/{context}"


def test_a_value_is_derived_again_only_when_its_object_or_context_changes() -> None:
    derive = Counting()
    memo: VersionMemo[str, str] = VersionMemo(derive)
    assert memo(obj("a", "1"), "gpu") == "a@1/gpu"
    memo.end_pass()
    assert memo(obj("a", "1"), "gpu") == "a@1/gpu"  # same version: kept
    memo.end_pass()
    assert memo(obj("a", "2"), "gpu") == "a@2/gpu"  # new version
    assert memo(obj("b", "2"), "gpu") == "b@2/gpu"
    memo.end_pass()
    assert memo(obj("a", "2"), "tpu") == "a@2/tpu"  # new context
    assert derive.calls == ["a", "a", "b", "a"]


def test_objects_without_a_version_are_always_derived_and_gone_ones_forgotten() -> None:
    derive = Counting()
    memo: VersionMemo[str, str] = VersionMemo(derive)
    memo(obj("a", None), "gpu")
    memo(obj("a", None), "gpu")
    memo(obj("b", "7"), "gpu")
    memo.end_pass()
    assert derive.calls == ["a", "a", "b"]
    assert len(memo) == 1
    memo.end_pass()  # a pass that did not see b
    assert len(memo) == 0
    memo(obj("b", "7"), "gpu")
    assert derive.calls == ["a", "a", "b", "b"]


def test_a_diff_is_remembered_for_the_same_rendered_object_and_live_version() -> None:
    asked: list[tuple[int, str]] = []

    def differs(rendered: dict[str, Any], live: Mapping[str, Any]) -> bool:
        asked.append((id(rendered), live["metadata"]["resourceVersion"]))
        return bool(rendered["spec"] != live.get("spec"))

    memo = DiffMemo(differs)
    rendered = {"kind": "ClusterQueue", "metadata": {"name": "q"}, "spec": {"x": 1}}
    live = obj("q", "5", spec={"x": 1})
    assert memo(rendered, live) is False
    memo.end_pass()
    assert memo(rendered, live) is False  # same pair: not compared again
    memo.end_pass()
    assert memo(dict(rendered, spec={"x": 2}), live) is True  # another rendered object
    memo.end_pass()
    assert memo(rendered, obj("q", "6", spec={"x": 3})) is True  # the live object changed
    assert len(asked) == 3
