"""Property-based fuzzing of the policy loader: it answers every input with a PolicySet or errors.

`quartermaster validate` reads whatever a pull request puts in a GitOps repository, and the
controller parses whatever the API server stores. Neither may meet an input it answers with a
traceback or never answers at all: the CLI's contract is one line per error, each naming the
file, the object and the field (controller/api/loader.py, controller/api/policy_set.py). The
property checked on every input is therefore:

    the loader returns a PolicySet, or raises InvalidPolicyError whose errors each name an
    origin (file, file#document or file:line:column) and, for an error in an object, its kind
    and a field path, within a few seconds; no other exception escapes.

Three strategies share the 10,000 examples:

* mutations of the bundled example policy (controller/examples), in memory: any node at any
  depth replaced by a JSON-ish value of another type, deleted, duplicated or renamed, and
  unknown keys added, so the parser and the cross-object checks see near-valid input;
* YAML text through the file reader: the builders' policy and project as text with line
  edits, generated YAML with anchors, tags, flow and block collections, huge numbers, NaN/inf,
  unicode and control characters, raw bytes;
* random documents whose trees use the policy's own field names, so that every parser is
  reached with random values.

The runs are reproducible (`derandomize=True`, no example database) and have no per-example
deadline; a hang is caught by an alarm instead. On the build machine (2 cores) the module takes
about 45 s, of which the mutations take 19 s, the texts 16 s and the trees 6 s.

Inputs that crash the loader today are generated like any other, but an example that ends in
one of the `KNOWN_CRASHES` (an exception type raised through a named function) is rejected,
so that the run goes on looking for new ones; each known crash is pinned by a strict xfail at
the end of this module. When a fix makes one pass, its xfail fails: remove its entry, and the
strategies cover that input from then on.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import signal
import string
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from controller.api.introspect import Kind, fields_of, item_hint, kind_of, to_json
from controller.api.loader import load_path, load_policy_set, read_documents
from controller.api.parse import FieldError, parse_object
from controller.api.policy_set import InvalidPolicyError, PolicySet
from controller.api.types import (
    API_VERSION,
    CapacityPolicy,
    CapacityPolicySpec,
    TrainingProject,
    TrainingProjectSpec,
)
from controller.examples import EXAMPLE_DIR
from tests.builders import policy_doc, project_doc

# --------------------------------------------------------------------------- budget and profile

MUTATION_EXAMPLES = 5_000
TEXT_EXAMPLES = 3_000
TREE_EXAMPLES = 2_000
TOTAL_EXAMPLES = 10_000
HANG_SECONDS = 10.0
"""No single input may take longer; the slowest legitimate one takes well under a second."""

settings.register_profile(
    "quartermaster-parser-fuzz",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("quartermaster-parser-fuzz")


def test_the_strategies_share_ten_thousand_examples() -> None:
    assert MUTATION_EXAMPLES + TEXT_EXAMPLES + TREE_EXAMPLES == TOTAL_EXAMPLES


# --------------------------------------------------------------------------- the property


class Hang(Exception):  # noqa: N818 - the name is what the failure report should say
    """An input kept the loader busy for longer than HANG_SECONDS."""


@contextmanager
def hang_guard(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Interrupt the block after `seconds`, so that a hang fails one example, not the run."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"the loader took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclasses.dataclass(frozen=True)
class KnownCrash:
    """A crash the loader has today: an exception type raised through a function of a file.

    The property tests reject (skip) an example that ends in one, so that they keep looking
    for new crashes; `test_a_known_crash_is_a_policy_error` pins each one as a strict xfail.
    """

    exception: type[BaseException]
    file: str
    function: str
    bug: str

    def matches(self, exc: BaseException) -> bool:
        if not isinstance(exc, self.exception):
            return False
        frames = traceback.extract_tb(exc.__traceback__)
        return any(f.filename.endswith(self.file) and f.name == self.function for f in frames)


_LOADER, _PARSE, _SEMANTICS = "api/loader.py", "api/parse.py", "api/semantics.py"
_YAML = "yaml/constructor.py"
KNOWN_CRASHES: dict[str, KnownCrash] = {}
"""Crashes the property tests skip while a fix is pending: none now. The inputs that found the
ones fixed are kept in `FORMER_CRASH_INPUTS` and must stay located errors."""


def known_crash(exc: BaseException) -> KnownCrash | None:
    return next((known for known in KNOWN_CRASHES.values() if known.matches(exc)), None)


def outcome(load: Callable[[], PolicySet], origins: Callable[[str], bool]) -> PolicySet | None:
    """The PolicySet `load` returns, or None when it raised well-formed policy errors.

    Anything else (another exception, an error without a location, a hang) fails the example,
    except a KNOWN_CRASH, which rejects it. `origins` says whether an error's origin is one the
    input could produce.
    """
    with hang_guard():
        try:
            result = load()
        except InvalidPolicyError as invalid:
            assert invalid.errors, "InvalidPolicyError without errors"
            for error in invalid.errors:
                assert origins(error.origin), f"unexpected origin in {error}"
                # An object's error names its kind and field; a whole file's or document's
                # names neither, and prints as `origin: message` (no placeholders).
                assert bool(error.kind) == bool(error.path), f"kind without path in {error}"
                assert error.kind or not error.name, f"a name without a kind in {error}"
                assert error.message.strip(), f"no message in {error}"
                assert str(error).startswith(f"{error.origin}: "), str(error)
            return None
        except Exception as exc:
            if known_crash(exc) is None:
                raise
            reject()
    assert isinstance(result, PolicySet)
    return result


def assert_round_trips(policy_set: PolicySet) -> None:
    """An accepted object's JSON, as the controller would store it, parses back to itself."""
    objects: list[CapacityPolicy | TrainingProject] = [policy_set.policy, *policy_set.projects]
    for obj in objects:
        errors: list[FieldError] = []
        assert parse_object(type(obj.spec), to_json(obj.spec), "spec", errors) == obj.spec
        assert errors == []


# --------------------------------------------------------------------------- shared values

# Strings a person or a tool plausibly writes into a policy, beside random text.
TRICKY_STRINGS = (
    "",
    " ",
    "0",
    "-1",
    "1e3",
    "0x10",
    "true",
    "null",
    "NaN",
    "a100",
    "h100",
    "production",
    "research",
    "Production",
    "vision",
    "vision\n",
    "-vision",
    "nvidia.com/gpu",
    "kubernetes.io/gpu",
    "karpenter.sh/capacity-type",
    "example.com/key",
    "us-east-1a",
    "http://prometheus:9090",
    "LowerPriority",
    "Manual",
    "Freeze",
    "TriggerAuthentication",
    "2026-12-15T17:00:00Z",
    "2026-12-15t17:00:00z",
    "2026-12-15T17:00:00.123456789+05:30",
    "2026-02-29T00:00:00Z",
    "2026-12-15",
    "0000-01-01T00:00:00Z",
    "@weekly",
    "@fortnightly",
    "0 18 * * FRI",
    "0 0 31 2 *",
    "60 * * * *",
    "*/0 * * * *",
    "0 0 * * 7",
    "UTC",
    "Europe/Berlin",
    "Europe/Berln",
    "Europe",
    "../../etc/passwd",
    "UTC\x00",
    "x" * 300,
    "ünïcødé ☃ 🚀",
    "\u202eevil",
    "\ud800",
)

CRON_TOKENS: tuple[str, ...] = (
    "*",
    "*/5",
    "*/0",
    "0",
    "7",
    "23",
    "24",
    "31",
    "59",
    "60",
    "1-5",
    "5-1",
    "1,15",
)
CRON_TOKENS += ("MON", "FRI", "fri", "SUN-SAT", "JAN", "DEC", "L", "?", "1-", ",", "0/15", "-3")

cron_strings = st.lists(st.sampled_from(CRON_TOKENS), min_size=1, max_size=7).map(" ".join)


DATE_SHAPES: tuple[str, ...] = (
    "-12-15T17:00:00",
    "-12-15t17:00:00",
    "-12-15 17:00:00",
    "-02-29T00:00:00",
    "-02-30T00:00:00",
    "-13-01T00:00:00",
    "-12-15T24:00:00",
    "-12-31T23:59:60",
    "-12-15T17:00",
    "-12-15T17:00:00.5",
    "-12-15T17:00:00.123456",
    "-12-15T17:00:00.1234567891",
    "-1-5T7:0:0",
)
DATE_ZONES: tuple[str, ...] = ("Z", "z", "+00:00", "-01:00", "+05:30", "+24:00", "+0100", "")

# RFC 3339-shaped times, valid and not, in every four-digit year.
date_times = st.builds(
    lambda year, shape, zone: f"{year:04d}{shape}{zone}",
    st.integers(0, 9999) | st.sampled_from([1, 9999]),
    st.sampled_from(DATE_SHAPES),
    st.sampled_from(DATE_ZONES),
)


# Documents reach the loader through YAML or JSON, which read integers from text, and Python
# converts at most 4300 digits (sys.get_int_max_str_digits()); YAML text may hold more.
huge_integers = st.integers(1, 4300).map(lambda digits: 10**digits - 1)
huge_digit_strings = st.integers(1, 5000).map(lambda digits: "9" * digits)

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 16, 63, 64, 65, 100000, 100001, 2**63, -(2**63) - 1]),
    huge_integers,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 0.9999, 1.0, 1e-300, 1e308, math.inf, -math.inf, math.nan]),
    st.text(max_size=16),
    st.sampled_from(TRICKY_STRINGS),
    cron_strings,
    date_times,
)


def nest(
    leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[str], depth: int
) -> st.SearchStrategy[Any]:
    """Lists and mappings `depth` levels deep over `leaves`, mostly leaves at each level.

    Hand-rolled rather than st.recursive, which costs several times more per example.
    """
    level = leaves
    for _ in range(depth):
        level = st.one_of(
            leaves,
            leaves,
            st.lists(level, max_size=3),
            st.dictionaries(keys, level, max_size=3),
        )
    return level


json_values = nest(scalars, st.text(max_size=8), depth=2)


def _field_names(cls: type, seen: set[type] | None = None) -> set[str]:
    """Every serialized field name under `cls`, so random trees can reach every parser."""
    seen = seen if seen is not None else set()
    if cls in seen:
        return set()
    seen.add(cls)
    names: set[str] = set()
    for info in fields_of(cls):
        names.add(info.json_name)
        hint = info.hint
        if kind_of(hint) is Kind.ARRAY:
            hint = item_hint(hint)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            names |= _field_names(hint, seen)
    return names


FIELD_NAMES = tuple(sorted(_field_names(CapacityPolicySpec) | _field_names(TrainingProjectSpec)))


# --------------------------------------------------------------------------- (i) mutations

EXAMPLE_DOCUMENTS, _EXAMPLE_ERRORS = read_documents(EXAMPLE_DIR)
EXAMPLE_ORIGINS = frozenset(origin for origin, _ in EXAMPLE_DOCUMENTS) | {"policy"}

Path_ = tuple[str | int, ...]


def nodes(value: Any, at: Path_ = ()) -> Iterator[Path_]:
    """The path of every node of a JSON-ish tree, the root included."""
    yield at
    if isinstance(value, dict):
        for key, child in value.items():
            yield from nodes(child, (*at, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from nodes(child, (*at, i))


def parent_of(doc: Any, at: Path_) -> Any:
    for step in at[:-1]:
        doc = doc[step]
    return doc


MUTATIONS = ("replace", "delete", "duplicate", "add-unknown", "rename", "wrap", "unwrap")


@st.composite
def mutated_examples(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """The example policy with one to three mutations, each anywhere in any document."""
    documents = copy.deepcopy(EXAMPLE_DOCUMENTS)
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(documents) - 1))
        origin, doc = documents[index]
        at = draw(st.sampled_from(list(nodes(doc))))
        mutation = draw(st.sampled_from(MUTATIONS))
        if not at:  # the document itself
            documents[index] = (origin, draw(json_values))
            continue
        parent, step = parent_of(doc, at), at[-1]
        if mutation == "replace":
            parent[step] = draw(json_values)
        elif mutation == "delete":
            del parent[step]
        elif mutation == "duplicate" and isinstance(parent, list) and isinstance(step, int):
            parent.insert(step, copy.deepcopy(parent[step]))
        elif mutation == "add-unknown" and isinstance(parent, dict):
            key = draw(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=12)))
            parent[key] = draw(json_values)
        elif mutation == "rename" and isinstance(parent, dict):
            key = str(step)
            renamed = draw(st.sampled_from([key.lower(), key.upper(), key + "s", key[:-1]]))
            value = parent.pop(step)
            parent[renamed] = value
        elif mutation == "wrap":
            wrapped = parent[step]
            parent[step] = [wrapped] if draw(st.booleans()) else {"value": wrapped}
        elif mutation == "unwrap" and isinstance(parent[step], list | dict) and parent[step]:
            inner = parent[step]
            parent[step] = inner[0] if isinstance(inner, list) else next(iter(inner.values()))
        else:
            parent[step] = draw(json_values)
    return documents


def test_the_examples_the_mutations_start_from_are_valid() -> None:
    assert _EXAMPLE_ERRORS == []
    assert outcome(lambda: load_policy_set(EXAMPLE_DOCUMENTS), EXAMPLE_ORIGINS.__contains__)


@settings(PROFILE, max_examples=MUTATION_EXAMPLES)
@given(documents=mutated_examples())
def test_mutated_examples_load_or_fail_with_located_errors(
    documents: list[tuple[str, Any]],
) -> None:
    policy_set = outcome(lambda: load_policy_set(documents), EXAMPLE_ORIGINS.__contains__)
    if policy_set is not None:
        assert_round_trips(policy_set)


# --------------------------------------------------------------------------- (ii) YAML text

POLICY_TEXT = yaml.safe_dump(policy_doc(), sort_keys=False)
PROJECT_TEXT = yaml.safe_dump(
    project_doc(
        deadlines=[{"name": "launch", "schedule": "0 18 * * FRI", "timeZone": "Europe/Berlin"}],
        budget={"dollarsPerMonth": 1000},
    ),
    sort_keys=False,
)

YAML_WORDS: tuple[str, ...] = (
    "yes",
    "no",
    "on",
    "off",
    "~",
    "null",
    ".nan",
    ".inf",
    "-.inf",
    "0o17",
    "0x1F",
)
YAML_WORDS += ("1_000", "1:20", "2026-12-15", "12e3", "1.5e3", "<<", "=", "@foo", "`x`", "%x")
# Keys that YAML reads as strings, and now and then one it reads as a number or a boolean.
WORD_KEYS = st.from_regex(r"\A[a-zA-Z][a-zA-Z0-9_-]{0,10}\Z").filter(
    lambda key: key.lower() not in {"yes", "no", "on", "off", "true", "false", "null", "y", "n"}
)
PLAIN_KEYS = st.one_of(
    st.sampled_from(FIELD_NAMES),
    st.sampled_from(FIELD_NAMES),
    WORD_KEYS,
    st.sampled_from(["1", "2.5", "true", "null", "!!binary aGk="]),
)
# Explicit tags, with content that fits them and content that does not.
TAGS: tuple[str, ...] = ("!!str 5", "!!int 7", "!!float 1.5", "!!null ''", "!!bool true")
TAGS += ("!!binary aGk=", "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1, a: 2]", "!local x")
TAGS += ("!!seq [1]", "!!int x", "!!float x", "!!bool maybe", "!!timestamp friday", "!!map []")


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


yaml_scalars = st.one_of(
    st.sampled_from(YAML_WORDS),
    st.sampled_from(TAGS),
    st.integers(-(10**30), 10**30).map(str),
    huge_digit_strings,
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(TRICKY_STRINGS).map(quoted),
    st.text(alphabet=string.ascii_letters + string.digits + " -_./:", max_size=20).map(quoted),
    st.text(max_size=12).map(quoted),
    cron_strings.map(quoted),
    date_times,
)


def yaml_flow(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        children,
        children,
        st.lists(children, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(PLAIN_KEYS, children), max_size=3).map(
            lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
        ),
    )


yaml_values = yaml_flow(yaml_flow(yaml_scalars))


@st.composite
def block_documents(draw: st.DrawFn) -> str:
    """A block mapping with the policy's own keys, flow values and now and then an alias."""
    lines: list[str] = []
    anchors: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        indent = "  " * draw(st.integers(0, 3))
        key = draw(PLAIN_KEYS)
        choice = draw(st.integers(0, 9))
        if choice == 0 and anchors:
            value = "*" + draw(st.sampled_from(anchors))
        elif choice == 1:
            anchor = f"a{len(anchors)}"
            anchors.append(anchor)
            value = f"&{anchor} {draw(yaml_values)}"
        elif choice == 2:
            value = ""  # a nested block follows, or a null
        elif choice == 3:
            value = (
                "|\n"
                + indent
                + "  "
                + draw(st.text(max_size=20).map(lambda s: s.replace("\n", " ")))
            )
        else:
            value = draw(yaml_values)
        lines.append(f"{indent}{key}: {value}".rstrip())
        if draw(st.integers(0, 9)) == 0:
            lines.append(f"{indent}- {draw(yaml_values)}")
    return "\n".join(lines) + "\n"


@st.composite
def edited_text(draw: st.DrawFn) -> str:
    """The builders' policy and project as YAML text, with a few line and character edits."""
    text = POLICY_TEXT + "---\n" + PROJECT_TEXT
    for _ in range(draw(st.integers(1, 3))):
        lines = text.splitlines(keepends=True)
        i = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.integers(0, 6))
        if edit == 0:
            del lines[i]
        elif edit == 1:
            lines.insert(i, lines[i])
        elif edit == 2:
            lines[i] = "  " + lines[i]
        elif edit == 3:
            lines[i] = lines[i][2:]
        elif edit == 4:
            key = lines[i].split(":")[0]
            lines[i] = f"{key}: {draw(yaml_values)}\n"
        elif edit == 5:
            lines.insert(i, draw(block_documents()))
        else:
            position = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:position] + draw(st.text(max_size=3)) + lines[i][position:]
        text = "".join(lines)
    return text


def nested_text(depth: int, opener: str, closer: str) -> str:
    return "spec: " + opener * depth + "1" + closer * depth + "\n"


yaml_texts: st.SearchStrategy[str | bytes] = st.one_of(
    edited_text(),
    edited_text(),
    block_documents(),
    st.lists(block_documents(), min_size=1, max_size=4).map(
        lambda docs: "%YAML 1.1\n---\n" + "---\n".join(docs) + "...\n"
    ),
    yaml_values.map(lambda value: f"kind: TrainingProject\nspec: {value}\n"),
    # Nesting stays under the depth PyYAML's recursion survives (see test_policy_limits.py).
    st.integers(1, 120).flatmap(
        lambda depth: st.sampled_from(
            [nested_text(depth, "[", "]"), nested_text(depth, "{a: ", "}")]
        )
    ),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.binary(max_size=50).map(lambda raw: b"\xef\xbb\xbf" + POLICY_TEXT.encode() + raw),
)


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file rewritten for each example: the loader's own reader, not a copy of it."""
    return tmp_path_factory.mktemp("fuzz") / "policy.yaml"


@settings(PROFILE, max_examples=TEXT_EXAMPLES)
@given(text=yaml_texts)
def test_yaml_texts_load_or_fail_with_located_errors(fuzz_file: Path, text: str | bytes) -> None:
    if isinstance(text, bytes):
        fuzz_file.write_bytes(text)
    else:
        fuzz_file.write_text(text, encoding="utf-8", errors="surrogatepass")
    prefix = str(fuzz_file)
    policy_set = outcome(
        lambda: load_path(fuzz_file), lambda o: o.startswith(prefix) or o == "policy"
    )
    if policy_set is not None:
        assert_round_trips(policy_set)


# --------------------------------------------------------------------------- (iii) random trees

tree_values = nest(scalars, st.sampled_from(FIELD_NAMES) | st.text(max_size=8), depth=3)

random_documents: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "apiVersion": st.sampled_from([API_VERSION, "quartermaster.dev/v1", "v1"]) | scalars,
            "kind": st.sampled_from(["CapacityPolicy", "TrainingProject", "Project"]) | scalars,
            "metadata": st.fixed_dictionaries(
                {},
                optional={
                    "name": st.sampled_from(TRICKY_STRINGS) | scalars,
                    "labels": tree_values,
                    "generation": scalars,
                },
            )
            | tree_values,
            "spec": tree_values,
            "extra": tree_values,
        },
    ),
    tree_values,
)


@settings(PROFILE, max_examples=TREE_EXAMPLES)
@given(
    documents=st.lists(random_documents, max_size=3),
    with_example_policy=st.booleans(),
)
def test_random_trees_load_or_fail_with_located_errors(
    documents: list[Any], with_example_policy: bool
) -> None:
    labelled = [(f"tree.yaml#{i}", doc) for i, doc in enumerate(documents, start=1)]
    if with_example_policy:
        labelled = [d for d in EXAMPLE_DOCUMENTS if d[1]["kind"] == "CapacityPolicy"] + labelled
    origins = {origin for origin, _ in labelled} | {"policy"}
    policy_set = outcome(lambda: load_policy_set(labelled), origins.__contains__)
    if policy_set is not None:
        assert_round_trips(policy_set)


# --------------------------------------------------------------------------- known crashes

POLICY_FILE = yaml.safe_dump(policy_doc(), sort_keys=False)


PROJECT_TEMPLATE = """\
apiVersion: quartermaster.dev/v1alpha1
kind: {kind}
metadata:
  name: vision
spec:
  tier: {tier}
  namespaces: {namespaces}
  allowSpot: {allowSpot}
  quotas:
    - pool: a100
      nominalGpus: {nominalGpus}
  deadlines:
    - name: launch
      {deadline}
  budget:
    dollarsPerMonth: {dollarsPerMonth}
"""
PROJECT_FIELDS = {
    "kind": "TrainingProject",
    "tier": "production",
    "namespaces": "[vision]",
    "allowSpot": "true",
    "nominalGpus": "16",
    "deadline": "schedule: '0 18 * * FRI'\n      timeZone: UTC",
    "dollarsPerMonth": "1000",
}


def project_text(**fields: str) -> str:
    """A valid project as YAML text, with the given template fields written verbatim."""
    assert fields.keys() <= PROJECT_FIELDS.keys()
    return PROJECT_TEMPLATE.format(**{**PROJECT_FIELDS, **fields})


def test_the_project_template_is_valid_beside_the_builders_policy(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY_FILE)
    (tmp_path / "project.yaml").write_text(project_text())
    assert [p.name for p in load_path(tmp_path).projects] == ["vision"]


FORMER_CRASH_INPUTS = [
    ("unhashable kind", "a kind written as a list", project_text(kind="[TrainingProject]")),
    (
        "unsortable keys",
        "namespaces written as a mapping with a number key",
        project_text(namespaces="{1: vision, team: vision}"),
    ),
    ("unhashable key", "a mapping key that is a list", project_text() + "? [a, b]\n: c\n"),
    (
        "date overflow",
        "a deadline one hour before the end of year 9999 in UTC",
        project_text(deadline="at: '9999-12-31T23:59:59-01:00'"),
    ),
    (
        "date overflow",
        "a deadline in year one east of Greenwich",
        project_text(deadline="at: '0001-01-01T00:00:00+01:00'"),
    ),
    (
        "number overflow",
        "a budget written out in 400 digits",
        project_text(dollarsPerMonth="1" + "0" * 400),
    ),
    (
        "number overflow",
        "a quota written out in 400 digits",
        project_text(nominalGpus="1" + "0" * 400),
    ),
    (
        "time zone directory",
        "the time zone Europe",
        project_text(deadline="schedule: '0 18 * * FRI'\n      timeZone: Europe"),
    ),
    ("bad !!int", "an !!int tag on a word", project_text(nominalGpus="!!int sixteen")),
    ("bad !!int", "an integer of 5000 digits", project_text(nominalGpus="1" * 5000)),
    ("bad !!float", "a !!float tag on a word", project_text(dollarsPerMonth="!!float lots")),
    ("bad !!bool", "a !!bool tag on maybe", project_text(allowSpot="!!bool maybe")),
    ("bad !!timestamp", "a !!timestamp tag on friday", project_text(tier="!!timestamp friday")),
]


@pytest.mark.parametrize(
    ("text",),
    [pytest.param(text, id=f"{name} (once: {crash})") for crash, name, text in FORMER_CRASH_INPUTS],
)
def test_a_former_crash_is_a_policy_error(tmp_path: Path, text: str) -> None:
    """Each input once raised out of the loader; each must stay a located error."""
    (tmp_path / "policy.yaml").write_text(POLICY_FILE)
    (tmp_path / "project.yaml").write_text(text)
    with hang_guard(), pytest.raises(InvalidPolicyError) as invalid:
        load_path(tmp_path)
    assert invalid.value.errors
    assert all(error.message and (error.path or not error.kind) for error in invalid.value.errors)


def test_an_empty_top_level_key_is_reported_at_a_path(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY_FILE)
    (tmp_path / "project.yaml").write_text(project_text() + "'': stray\n")
    with pytest.raises(InvalidPolicyError) as invalid:
        load_path(tmp_path)
    assert [error.path for error in invalid.value.errors] == ['""']
