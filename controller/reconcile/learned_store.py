"""What the controller learned, kept across restarts in a ConfigMap beside it.

`OutcomeLearning` (runtimes from finished work, risk estimates judged against outcomes, the
recalibration fitted on them) is built up pass by pass; this module keeps its `summary()` in
the ConfigMap `quartermaster-learned` of the controller's namespace, so that a restart, a
rolling update or a new leader goes on from what the last leader knew.

**Why a ConfigMap, and not rebuilt from Prometheus or kept in a status.** The cluster does not
keep what a rebuild needs: Kueue deletes a finished Workload with its Job, and Prometheus holds
no series with a workload's declared runtime next to its real one, nor the risk each deadline
was estimated at with the Workloads counting toward it (our series are per deadline and
aggregated; `quartermaster_deadline_risk_judged_ratio` exports the judged estimates, but not
which deadline and estimate time they belong to, which the ledger's once-only judging needs).
A status is the wrong place: the CapacityPolicy's status is rewritten by every pass that
changes it, read by `kubectl get` and `explain`, and would carry up to a megabyte of learned
state on every watch event of the policy. A ConfigMap is written only when the learning changed
and at most every `WRITE_INTERVAL_SECONDS`, read once at start, and watched by nobody.

**Format.** `data.version` is `FORMAT_VERSION`; `binaryData["learned.json.gz"]` is the gzipped
JSON of `OutcomeLearning.summary()`. A summary this controller cannot read (another format
version, a summary version `from_summary` refuses, a corrupt payload) is ignored with a
warning, and the learning starts afresh: lost history costs accuracy, never correctness, and
the next write replaces it.

**Bounded.** A ConfigMap holds 1 MiB; the compressed summary is kept under `MAX_BYTES`. When it
is larger, the ledger's oldest judged estimates and the learner's least recently updated keys
are dropped, the same share of each, until it fits; the drop is logged
(`learned_state_truncated`) and counted (`quartermaster_learned_state_dropped_total`). What is
dropped goes from what is written, not from memory. Full as the ledger and the learner get
(100,000 judged estimates of 1,000 deadlines, 4,000 runtime keys) it is about 800 KiB, encoded
in half a second, at most once per interval.

**When.** Loaded once, at the first pass as leader, before that pass learns anything (and again
when this replica leads after another did: the other's writes are newer). Written when the
learning changed since the last write (`OutcomeLearning.revision`), at most once per
`WRITE_INTERVAL_SECONDS` on the injected monotonic clock, and once more on graceful shutdown;
only by the leader. Where the API server serves no core `v1` (the CRD-only test server this
project runs against), there is no ConfigMap to keep: that is logged once
(`learning_in_memory_only`), `quartermaster_learned_state_persisted` is 0, and every pass runs
as before. A read or write that fails is logged and retried later (a read at the next pass, a
write after the interval); it never fails a pass. Nothing is written before a read succeeded,
and a read that succeeds late replaces what the passes before it learned (the finished
Workloads still listed are counted again, into what was read).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from controller import names
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.metrics import Metrics
from controller.reconcile.learning import OutcomeLearning

log = structlog.get_logger(__name__)

FORMAT_VERSION = "1"
DATA_KEY = "learned.json.gz"
MAX_BYTES = 900 * 1024
"""The compressed summary's bound: a ConfigMap holds 1 MiB, with room left for the rest."""
MAX_INFLATED_BYTES = 256 * 1024 * 1024
"""A payload inflating beyond this is refused as unreadable (not a summary we wrote)."""
WRITE_INTERVAL_SECONDS = 300.0
"""At most one write per this much time while the learning keeps changing."""
_SHRINK_ROUNDS = 40


class StoreState(StrEnum):
    """Where what was learned lives."""

    UNKNOWN = "unknown"
    """Not read yet: nothing is written until it was (a write would replace a summary that a
    read a pass later would have restored)."""
    CONFIGMAP = "configmap"
    MEMORY = "memory"
    """The API server serves no ConfigMaps: kept in memory only, lost on restart."""


class UnreadableSummaryError(ValueError):
    """A stored summary this controller cannot read; the message says why."""


@dataclass(frozen=True)
class Encoded:
    """A summary as stored: gzipped JSON, and what was dropped from it to fit."""

    payload: bytes
    judged_dropped: int = 0
    """The ledger's oldest judged estimates left out."""
    keys_dropped: int = 0
    """The learner's least recently updated keys left out."""

    @property
    def size(self) -> int:
        return len(self.payload)

    @property
    def truncated(self) -> bool:
        return bool(self.judged_dropped or self.keys_dropped)


def _compress(summary: Mapping[str, Any]) -> bytes:
    text = json.dumps(summary, separators=(",", ":"), allow_nan=False)
    return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)


def _without_oldest(summary: Mapping[str, Any], judged: int, keys: int) -> dict[str, Any]:
    """`summary` without the ledger's first `judged` judged estimates (the oldest) and the
    learner's first `keys` keys (the least recently updated: `to_dict` lists them in that
    order)."""
    ledger = dict(summary["ledger"])
    runtimes = dict(summary["runtimes"])
    ledger["judged"] = list(ledger["judged"])[judged:]
    runtimes["keys"] = list(runtimes["keys"])[keys:]
    since_fit = int(summary.get("sinceFit", 0))
    return {
        **summary,
        "ledger": ledger,
        "runtimes": runtimes,
        "sinceFit": min(since_fit, len(ledger["judged"])),
    }


def encode(summary: Mapping[str, Any], *, limit: int = MAX_BYTES) -> Encoded:
    """`OutcomeLearning.summary()` compressed to at most `limit` bytes: whole when it fits,
    else without the same share of the oldest judged estimates and the least recent runtime
    keys, the share shrunk until it fits.

    Raises ValueError when even without all of them it does not fit, or the summary holds
    something JSON cannot (a NaN).
    """
    payload = _compress(summary)
    if len(payload) <= limit:
        return Encoded(payload)
    judged = len(summary["ledger"]["judged"])
    keys = len(summary["runtimes"]["keys"])
    keep = 1.0
    for _ in range(_SHRINK_ROUNDS):
        # Compressed size is about proportional to what is kept; aim a little below the limit.
        keep *= min(0.9 * limit / len(payload), 0.95)
        drop_judged = judged - int(judged * keep)
        drop_keys = keys - int(keys * keep)
        payload = _compress(_without_oldest(summary, drop_judged, drop_keys))
        if len(payload) <= limit:
            return Encoded(payload, judged_dropped=drop_judged, keys_dropped=drop_keys)
        if drop_judged == judged and drop_keys == keys:
            break
    raise ValueError(
        f"the learned summary does not fit in {limit} bytes even without its {judged} judged "
        f"estimates and {keys} runtime keys ({len(payload)} bytes)"
    )


def decode(payload: bytes) -> dict[str, Any]:
    """The summary in a payload `encode` made. Raises UnreadableSummaryError saying why."""
    inflater = zlib.decompressobj(wbits=31)  # gzip
    try:
        text = inflater.decompress(payload, MAX_INFLATED_BYTES)
    except zlib.error as exc:
        raise UnreadableSummaryError(f"not gzip: {exc}") from None
    if inflater.unconsumed_tail:
        raise UnreadableSummaryError(f"inflates beyond {MAX_INFLATED_BYTES} bytes")
    if not inflater.eof:
        raise UnreadableSummaryError("truncated gzip stream")
    try:
        summary = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnreadableSummaryError(f"not JSON: {exc}") from None
    if not isinstance(summary, dict):
        raise UnreadableSummaryError(f"a JSON {type(summary).__name__}, not an object")
    return summary


def config_map(
    namespace: str, encoded: Encoded, *, name: str = names.LEARNED_STATE_NAME
) -> dict[str, Any]:
    """The ConfigMap keeping `encoded` (its binaryData base64, as the API carries it)."""
    return {
        "apiVersion": kinds.CONFIG_MAP.api_version,
        "kind": kinds.CONFIG_MAP.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.LABEL_MANAGED_BY: names.MANAGED_BY_VALUE,
                names.LABEL_COMPONENT: "learned-state",
            },
        },
        "data": {"version": FORMAT_VERSION},
        "binaryData": {DATA_KEY: base64.b64encode(encoded.payload).decode("ascii")},
    }


def read_config_map(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The summary a ConfigMap `config_map` made keeps. Raises UnreadableSummaryError for
    another format version or a payload that is missing or not one `encode` made."""
    version = (obj.get("data") or {}).get("version")
    if version != FORMAT_VERSION:
        raise UnreadableSummaryError(
            f"format version {version!r}, this controller reads {FORMAT_VERSION!r}"
        )
    encoded = (obj.get("binaryData") or {}).get(DATA_KEY)
    if not isinstance(encoded, str):
        raise UnreadableSummaryError(f"no binaryData {DATA_KEY!r}")
    try:
        payload = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise UnreadableSummaryError(f"binaryData {DATA_KEY!r} is not base64: {exc}") from None
    return decode(payload)


def restore(obj: Mapping[str, Any]) -> OutcomeLearning:
    """The learning a stored ConfigMap keeps. Raises UnreadableSummaryError saying why not."""
    summary = read_config_map(obj)
    try:
        return OutcomeLearning.from_summary(summary)
    except ValueError as exc:
        raise UnreadableSummaryError(str(exc)) from None


class LearnedStore:
    """Reads and writes the ConfigMap for one controller; see the module docstring.

    `clock` is monotonic seconds (the write interval); tests inject one and never sleep.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str = names.LEARNED_STATE_NAME,
        interval_seconds: float = WRITE_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        limit_bytes: int = MAX_BYTES,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.metrics = metrics
        self.limit_bytes = limit_bytes
        self.state = StoreState.UNKNOWN
        self.writes = 0
        self._said_in_memory = False
        self._written: tuple[OutcomeLearning, int] | None = None
        """The learning last written (or read) and its revision then."""
        self._last_write: float | None = None

    # ------------------------------------------------------------------ reading
    def load(self, served: Collection[str]) -> OutcomeLearning | None:
        """At the first pass (and the first after `standby`): the learning the ConfigMap
        keeps, to adopt; None to go on with the current one (there is none, it could not be
        read, or it was read already)."""
        if self.state is not StoreState.UNKNOWN:
            return None
        if kinds.CONFIG_MAP.group_version not in served:
            self._in_memory("the API server serves no core v1 ConfigMaps")
            return None
        try:
            obj = self.client.get(kinds.CONFIG_MAP, self.name, self.namespace)
        except KubeError as exc:
            if exc.status in (401, 403):
                self._in_memory(f"the ConfigMap may not be read: {str(exc)[:200]}")
            else:  # transient (the client retried): read again at the next pass
                log.warning("learned_state_not_read", error=str(exc)[:300])
            return None
        self._set_state(StoreState.CONFIGMAP)
        if obj is None:
            log.info("learned_state_absent", configmap=self.name, namespace=self.namespace)
            return None
        try:
            learning = restore(obj)
        except UnreadableSummaryError as exc:
            log.warning(
                "learned_state_ignored",
                configmap=self.name,
                namespace=self.namespace,
                reason=str(exc)[:300],
            )
            return None
        self._written = (learning, learning.revision)
        log.info(
            "learned_state_restored",
            configmap=self.name,
            runtime_keys=len(learning.runtimes),
            finished_counted=learning.runtimes.observed,
            judged_estimates=len(learning.ledger.judged),
            pending_estimates=learning.ledger.pending_count(),
        )
        return learning

    def standby(self) -> None:
        """This replica stopped leading: read the ConfigMap again when it leads next (the
        leader meanwhile wrote what it learned, which then includes what this one had)."""
        if self.state is StoreState.CONFIGMAP:
            self.state = StoreState.UNKNOWN
            self._written = None
            self._last_write = None

    def _in_memory(self, why: str) -> None:
        self._set_state(StoreState.MEMORY)
        if not self._said_in_memory:
            self._said_in_memory = True
            log.warning("learning_in_memory_only", reason=why)

    def _set_state(self, state: StoreState) -> None:
        self.state = state
        if self.metrics is not None:
            self.metrics.learned_state_persisted.set(1.0 if state is StoreState.CONFIGMAP else 0.0)

    # ------------------------------------------------------------------ writing
    def changed(self, learning: OutcomeLearning) -> bool:
        """Whether `learning` holds anything the ConfigMap does not (as far as this replica
        wrote or read it)."""
        if self._written is None:
            return learning.revision > 0
        written, revision = self._written
        return written is not learning or revision != learning.revision

    def save(self, learning: OutcomeLearning, *, final: bool = False) -> bool:
        """Write `learning` when it changed and the interval since the last write passed (or
        `final`: on shutdown); True when written. The caller writes only as leader."""
        if self.state is not StoreState.CONFIGMAP or not self.changed(learning):
            return False
        now = self.clock()
        if (
            not final
            and self._last_write is not None
            and now - self._last_write < self.interval_seconds
        ):
            return False
        self._last_write = now  # a failure waits the interval too: no write per pass
        revision = learning.revision
        try:
            encoded = encode(learning.summary(), limit=self.limit_bytes)
        except ValueError as exc:
            log.error("learned_state_not_written", reason=str(exc)[:300])
            self._count_write("failed")
            return False
        if encoded.truncated:
            log.warning(
                "learned_state_truncated",
                judged_estimates_dropped=encoded.judged_dropped,
                runtime_keys_dropped=encoded.keys_dropped,
                bytes=encoded.size,
                limit_bytes=self.limit_bytes,
            )
            if self.metrics is not None:
                self.metrics.learned_state_dropped(
                    judged=encoded.judged_dropped, keys=encoded.keys_dropped
                )
        try:
            self.client.apply(
                kinds.CONFIG_MAP,
                config_map(self.namespace, encoded, name=self.name),
                field_manager=names.FIELD_MANAGER,
            )
        except KubeError as exc:
            log.warning("learned_state_write_failed", error=str(exc)[:300], final=final)
            self._count_write("failed")
            return False
        self._written = (learning, revision)
        self.writes += 1
        self._count_write("written")
        if self.metrics is not None:
            self.metrics.learned_state_bytes.set(encoded.size)
        log.info("learned_state_written", bytes=encoded.size, final=final)
        return True

    def _count_write(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.learned_state_writes_total.labels(result).inc()


__all__ = [
    "DATA_KEY",
    "FORMAT_VERSION",
    "MAX_BYTES",
    "WRITE_INTERVAL_SECONDS",
    "Encoded",
    "LearnedStore",
    "StoreState",
    "UnreadableSummaryError",
    "config_map",
    "decode",
    "encode",
    "read_config_map",
    "restore",
]
