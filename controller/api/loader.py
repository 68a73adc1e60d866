"""Reading a directory of policy YAML into a validated PolicySet.

GitOps repositories hold many files with several documents each; a user fixing a policy wants
every mistake in one run, each pointing at the file, the object and the field. Parsing the
objects one by one (`parse_document`) is shared with the controller, which reads the same
objects from the API server.
"""

from __future__ import annotations

import re
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
_CONTEXT = re.compile(r"while (?:parsing|scanning|constructing) an? (.+)")
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


def _policy_files(directory: Path) -> list[Path]:
    """The YAML files under `directory`, hidden ones and kustomizations aside.

    A symbolic link whose target is missing is kept: skipping it silently would report a copied
    example with dangling links as "no CapacityPolicy found" instead of naming the link.
    """
    return sorted(
        p
        for p in directory.rglob("*")
        if p.suffix in POLICY_SUFFIXES
        and (p.is_file() or (p.is_symlink() and not p.exists()))
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and p.name not in ("kustomization.yaml", "kustomization.yml")
    )


def _unreadable(path: Path, exc: OSError) -> str:
    """Why a file cannot be read, naming a dangling link's target."""
    if path.is_symlink() and not path.exists():
        try:
            target = str(path.readlink())
        except OSError:
            target = "?"
        return f"cannot read: a symbolic link to {target}, which does not exist"
    return f"cannot read: {exc.strerror or exc}"


def _yaml_problem(exc: yaml.YAMLError) -> tuple[Any, str]:
    """The mark to point at and the reason, with where the broken construct began.

    PyYAML reports the problem where it noticed it (often a line or two after the mistake) and,
    as the context, where the construct it was reading started: an unclosed `[` is found at the
    next key but began on an earlier line, so both are shown.
    """
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if (
        context
        and context_mark is not None
        and (mark is None or (context_mark.line, context_mark.column) != (mark.line, mark.column))
    ):
        where = f"line {context_mark.line + 1}, column {context_mark.column + 1}"
        construct = _CONTEXT.match(context)
        problem += (
            f" (the {construct.group(1)} started at {where})"
            if construct
            else f" ({context} at {where})"
        )
    return mark, problem


def _read_file(file: Path) -> tuple[list[Any], PolicyError | None]:
    """The documents of one file, or why it cannot be read or parsed."""
    label = str(file)
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            return [], PolicyError.in_file(
                label, f"file is {size} bytes, over the limit of {MAX_FILE_BYTES}"
            )
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return [], PolicyError.in_file(label, f"not UTF-8 text: {exc.reason}")
    except OSError as exc:
        return [], PolicyError.in_file(label, _unreadable(file, exc))
    try:
        return list(yaml.load_all(text, Loader=_Loader)), None
    except yaml.YAMLError as exc:
        mark, problem = _yaml_problem(exc)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        return [], PolicyError.in_file(where, f"invalid YAML: {problem}")
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        # PyYAML's constructors raise these for a tag on a value it cannot hold
        # (`!!int sixteen`, `!!bool maybe`), or an integer of more than 4,300 digits.
        return [], PolicyError.in_file(label, f"invalid YAML: {str(exc)[:200] or exc!r}")


def read_documents(path: Path) -> tuple[list[tuple[str, Any]], list[PolicyError]]:
    """Every YAML document under `path` (a file or a directory), labelled `file#index`."""
    if path.is_dir():
        files = _policy_files(path)
        if not files:
            return [], [
                PolicyError.in_file(str(path), "no policy files (*.yaml, *.yml) in this directory")
            ]
    elif path.exists() or path.is_symlink():
        files = [path]
    else:
        return [], [PolicyError.in_file(str(path), "no such file or directory")]
    documents: list[tuple[str, Any]] = []
    errors: list[PolicyError] = []
    for file in files:
        loaded, error = _read_file(file)
        if error is not None:
            errors.append(error)
            continue
        label = str(file)
        documents.extend(
            (f"{label}#{i}" if len(loaded) > 1 else label, doc)
            for i, doc in enumerate(loaded, start=1)
            if doc is not None
        )
    if len(documents) > MAX_DOCUMENTS:
        errors.append(
            PolicyError.in_file(
                str(path), f"{len(documents)} documents, over the limit of {MAX_DOCUMENTS}"
            )
        )
    return documents, errors


def parse_document(origin: str, doc: Any) -> tuple[PolicyObject | None, list[PolicyError]]:
    """One Kubernetes object as a CapacityPolicy or TrainingProject, or its errors."""
    if not isinstance(doc, dict):
        reason = "the document " + _wrong_type("YAML mapping", doc)
        return None, [PolicyError.in_file(origin, reason)]
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


def _identity(doc: Any) -> tuple[str, str] | None:
    """A document's (kind, name) as written, even when the rest of it is wrong."""
    if not isinstance(doc, dict):
        return None
    kind, metadata = doc.get("kind"), doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if isinstance(kind, str) and kind in _KINDS and isinstance(name, str) and name:
        return str(kind), name
    return None


def load_policy_set(documents: Iterable[tuple[str, Any]], *, source: str = "policy") -> PolicySet:
    """Validate documents into a PolicySet, or raise InvalidPolicyError with every error.

    `source` names where the documents came from (the path given to `validate`), for the one
    error that belongs to no document: that there is no CapacityPolicy at all.

    Duplicates are found from each document's kind and name as written, so a second project of
    the same name is reported even when one of the two also has a schema error; the later
    document in load order is the one blamed, naming the first.
    """
    errors: list[PolicyError] = []
    policies: list[tuple[str, str, CapacityPolicy | None]] = []
    first_origin: dict[str, str] = {}
    projects: dict[str, tuple[str, TrainingProject]] = {}
    for origin, doc in documents:
        obj, doc_errors = parse_document(origin, doc)
        errors.extend(doc_errors)
        identity = _identity(doc)
        if identity is None:
            continue
        kind, name = identity
        if kind == CapacityPolicy.KIND:
            policies.append((origin, name, obj if isinstance(obj, CapacityPolicy) else None))
        elif name in first_origin:
            errors.append(
                PolicyError(
                    origin,
                    TrainingProject.KIND,
                    name,
                    "metadata.name",
                    f"duplicate TrainingProject (also in {first_origin[name]})",
                )
            )
        else:
            first_origin[name] = origin
            if isinstance(obj, TrainingProject):
                projects[name] = (origin, obj)
    errors.extend(
        PolicyError(
            origin,
            CapacityPolicy.KIND,
            name,
            "metadata.name",
            f"only one CapacityPolicy is supported (another is in {policies[0][0]})",
        )
        for origin, name, _ in policies[1:]
    )
    policy = policies[0][2] if policies else None
    if policy is None:
        if not errors:
            errors.append(
                PolicyError.in_file(source, "no CapacityPolicy found; exactly one is required")
            )
        raise InvalidPolicyError(errors)
    origins = {(CapacityPolicy.KIND, policy.name): policies[0][0]}
    origins.update({(TrainingProject.KIND, name): origin for name, (origin, _) in projects.items()})
    policy_set = PolicySet(
        policy=policy,
        projects=tuple(p for _, (_, p) in sorted(projects.items())),
        origins=origins,
    )
    errors.extend(check_policy_set(policy_set, order=list(projects)))
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
            load_policy_set(documents, source=str(path))
        except InvalidPolicyError as invalid:
            errors.extend(invalid.errors)
        raise InvalidPolicyError(errors)
    return load_policy_set(documents, source=str(path))
