"""Reading a directory of policy YAML into a validated PolicySet.

GitOps repositories hold many files with several documents each; a user fixing a policy wants
every mistake in one run, each pointing at the file, the object and the field. Parsing the
objects one by one (`parse_document`) is shared with the controller, which reads the same
objects from the API server.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

import yaml

from controller.api.parse import FieldError, go_pattern, parse_object, show
from controller.api.parse import wrong_type as _wrong_type
from controller.api.policy_set import InvalidPolicyError, PolicyError, PolicySet
from controller.api.semantics import check_policy_set
from controller.api.types import (
    API_VERSION,
    CapacityPolicy,
    CapacityPolicySpec,
    ObjectMeta,
    TrainingProject,
    TrainingProjectSpec,
)

POLICY_SUFFIXES = (".yaml", ".yml")
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DOCUMENTS = 20000
_NAME = go_pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KINDS: dict[str, type[CapacityPolicy] | type[TrainingProject]] = {
    "CapacityPolicy": CapacityPolicy,
    "TrainingProject": TrainingProject,
}
_SPECS: dict[str, type] = {
    "CapacityPolicy": CapacityPolicySpec,
    "TrainingProject": TrainingProjectSpec,
}

PolicyObject = CapacityPolicy | TrainingProject
_TOP_LEVEL_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


MAX_DEPTH = 64
"""Nesting levels a document may have; a policy needs about ten."""
MAX_EXPANDED_NODES = 200_000
"""Nodes a document may have once its aliases are expanded (a 1,000-project policy has
~10,000 per document): an 800-byte "billion laughs" file expands to 10**9."""


class _Loader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: timestamps stay strings, duplicate keys are errors, and a
    document nested too deep or whose aliases expand too far is refused before it is built."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        if node is not None and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand this document beyond {MAX_EXPANDED_NODES} nodes",
                node.start_mark,
            )
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes in the document with every alias expanded, counted once per shared node."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    sizes[id(node)] = size
    return size


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_documents(path: Path) -> tuple[list[tuple[str, Any]], list[PolicyError]]:
    """Every YAML document under `path` (a file or a directory), labelled `file#index`."""
    if not path.exists():
        return [], [PolicyError(str(path), "file", "", "-", "no such file or directory")]
    files = (
        [path]
        if path.is_file()
        else sorted(
            p
            for p in path.rglob("*")
            if p.suffix in POLICY_SUFFIXES
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
            and p.name not in ("kustomization.yaml", "kustomization.yml")
        )
    )
    documents: list[tuple[str, Any]] = []
    errors: list[PolicyError] = []
    for file in files:
        label = str(file)
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            errors.append(
                PolicyError(
                    label,
                    "file",
                    "",
                    "-",
                    f"file is {size} bytes, over the limit of {MAX_FILE_BYTES}",
                )
            )
            continue
        try:
            loaded = list(yaml.load_all(file.read_text(encoding="utf-8"), Loader=_Loader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
            problem = getattr(exc, "problem", None) or str(exc)
            errors.append(PolicyError(where, "file", "", "-", f"invalid YAML: {problem}"))
            continue
        except UnicodeDecodeError as exc:
            errors.append(PolicyError(label, "file", "", "-", f"not UTF-8 text: {exc.reason}"))
            continue
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # PyYAML's constructors raise these for a tag on a value it cannot hold
            # (`!!int sixteen`, `!!bool maybe`), or an integer of more than 4,300 digits.
            errors.append(
                PolicyError(label, "file", "", "-", f"invalid YAML: {str(exc)[:200] or exc!r}")
            )
            continue
        documents.extend(
            (f"{label}#{i}" if len(loaded) > 1 else label, doc)
            for i, doc in enumerate(loaded, start=1)
            if doc is not None
        )
    if len(documents) > MAX_DOCUMENTS:
        errors.append(
            PolicyError(
                str(path),
                "policy",
                "",
                "-",
                f"{len(documents)} documents, over the limit of {MAX_DOCUMENTS}",
            )
        )
    return documents, errors


def parse_document(origin: str, doc: Any) -> tuple[PolicyObject | None, list[PolicyError]]:
    """One Kubernetes object as a CapacityPolicy or TrainingProject, or its errors."""
    if not isinstance(doc, dict):
        return None, [PolicyError(origin, "document", "", "-", "must be a YAML mapping")]
    kind = doc.get("kind")
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    shown_name = name if isinstance(name, str) else ""
    if not isinstance(kind, str) or kind not in _KINDS:
        reason = "required field is missing" if kind is None else f"unsupported kind {kind!r}"
        return None, [
            PolicyError(
                origin,
                str(kind or "document"),
                shown_name,
                "kind",
                f"{reason}; expected CapacityPolicy or TrainingProject",
            )
        ]
    assert isinstance(kind, str)

    def error(path: str, message: str) -> PolicyError:
        return PolicyError(origin, kind, shown_name, path, message)

    errors: list[PolicyError] = [
        error(key if isinstance(key, str) and key else show(key), "unknown field")
        for key in doc
        if key not in _TOP_LEVEL_FIELDS
    ]
    api_version = doc.get("apiVersion")
    if api_version is None:
        errors.append(error("apiVersion", f"required field is missing; must be {API_VERSION!r}"))
    elif api_version != API_VERSION:
        errors.append(error("apiVersion", f"must be {API_VERSION!r}, got {api_version!r}"))
    if metadata is None:
        errors.append(error("metadata", "required field is missing"))
    elif not isinstance(metadata, dict):
        errors.append(error("metadata", _wrong_type("object", metadata)))
    elif name is None or name == "":
        errors.append(error("metadata.name", "required field is missing"))
    elif not isinstance(name, str):
        errors.append(error("metadata.name", _wrong_type("string", name)))
    elif len(name) > 63 or not _NAME.search(name):
        errors.append(
            error(
                "metadata.name",
                f"invalid value {name!r}: must be a lowercase RFC 1123 label "
                "of at most 63 characters",
            )
        )
    field_errors: list[FieldError] = []
    spec = None
    if "spec" not in doc or doc["spec"] is None:
        field_errors.append(FieldError("spec", "required field is missing"))
    else:
        spec = parse_object(_SPECS[kind], doc["spec"], "spec", field_errors)
    errors.extend(error(e.path, e.message) for e in field_errors)
    if errors or spec is None:
        return None, errors
    assert isinstance(metadata, dict) and isinstance(name, str)
    generation = metadata.get("generation")
    labels = metadata.get("labels")
    meta = ObjectMeta(
        name=name,
        generation=generation if isinstance(generation, int) else None,
        labels=dict(labels) if isinstance(labels, dict) else {},
    )
    return _KINDS[kind](metadata=meta, spec=spec), []


def load_policy_set(documents: Iterable[tuple[str, Any]]) -> PolicySet:
    """Validate documents into a PolicySet, or raise InvalidPolicyError with every error."""
    errors: list[PolicyError] = []
    policies: list[tuple[str, CapacityPolicy]] = []
    projects: dict[str, tuple[str, TrainingProject]] = {}
    for origin, doc in documents:
        obj, doc_errors = parse_document(origin, doc)
        errors.extend(doc_errors)
        if isinstance(obj, CapacityPolicy):
            policies.append((origin, obj))
        elif isinstance(obj, TrainingProject):
            if obj.name in projects:
                errors.append(
                    PolicyError(
                        origin,
                        "TrainingProject",
                        obj.name,
                        "metadata.name",
                        f"duplicate TrainingProject (also in {projects[obj.name][0]})",
                    )
                )
            else:
                projects[obj.name] = (origin, obj)
    if len(policies) > 1:
        first = policies[0][0]
        errors.extend(
            PolicyError(
                origin,
                "CapacityPolicy",
                p.name,
                "metadata.name",
                f"only one CapacityPolicy is supported (another is in {first})",
            )
            for origin, p in policies[1:]
        )
    if not policies:
        if not errors:
            errors.append(
                PolicyError(
                    "policy",
                    "CapacityPolicy",
                    "",
                    "-",
                    "no CapacityPolicy found; exactly one is required",
                )
            )
        raise InvalidPolicyError(errors)
    origins = {("CapacityPolicy", policies[0][1].name): policies[0][0]}
    origins.update({("TrainingProject", name): origin for name, (origin, _) in projects.items()})
    policy_set = PolicySet(
        policy=policies[0][1],
        projects=tuple(p for _, (_, p) in sorted(projects.items())),
        origins=origins,
    )
    errors.extend(check_policy_set(policy_set))
    if errors:
        raise InvalidPolicyError(errors)
    return policy_set


def load_path(path: Path) -> PolicySet:
    """Read and validate every policy document under `path`."""
    documents, errors = read_documents(path)
    if errors and not documents:
        raise InvalidPolicyError(errors)
    if errors:
        # Report file-level problems together with whatever the readable files contain.
        try:
            load_policy_set(documents)
        except InvalidPolicyError as invalid:
            errors.extend(invalid.errors)
        raise InvalidPolicyError(errors)
    return load_policy_set(documents)
