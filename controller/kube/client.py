"""A small, typed Kubernetes client: raw JSON over the official client's connection handling.

The controller needs few verbs (get, list, server-side apply, delete, watch, create/update for
leases and events) but needs them exactly right: every write counted (tests prove that a second
reconcile writes nothing), every error classified by whether a retry helps, `Retry-After`
honoured on 429, connection errors and 5xx retried with jittered exponential backoff, and 410 on
a watch surfaced so the caller relists. The official client's typed models would add nothing
for custom resources, so bodies stay plain dicts.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import random
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlencode

import structlog
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_any,
)

from controller import names
from controller.backoff import stop_when_set
from controller.kube.kinds import Kind

log = structlog.get_logger(__name__)

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
JSON_PATCH_CONTENT_TYPE = "application/json-patch+json"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class KubeError(Exception):
    """An API request failed; `retryable` says whether trying again can help."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.body = body or {}

    @property
    def retryable(self) -> bool:
        """Connection errors, 429, 5xx and conflicts (but not AlreadyExists) are transient."""
        if self.status in {0, 429} or self.status >= 500:
            return True
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        """410: a watch's resourceVersion is too old; the caller must relist."""
        return self.status == 410

    @property
    def causes(self) -> list[dict[str, Any]]:
        details = self.body.get("details") or {}
        causes: list[dict[str, Any]] = details.get("causes") or []
        return causes


@dataclass
class RetryPolicy:
    """How long and how fast one request is retried before the error reaches the caller."""

    max_delay_seconds: float = 30.0
    initial_seconds: float = 0.2
    max_backoff_seconds: float = 5.0
    jitter_seconds: float = 0.2


@dataclass
class RequestStats:
    """Requests by verb and by outcome; the test suite and `make bench` read these."""

    by_verb: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def writes(self) -> int:
        with self.lock:
            counts = dict(self.by_verb)
        return sum(n for verb, n in counts.items() if verb in WRITE_VERBS)

    def count(self, verb: str) -> None:
        with self.lock:
            self.by_verb[verb] += 1

    def count_retry(self) -> None:
        with self.lock:
            self.retries += 1


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: dict[str, Any]


def _watch_event(kind: Kind, line: bytes) -> dict[str, Any]:
    """One line of a watch stream as a JSON object, or a retryable KubeError saying why not."""
    try:
        event = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise KubeError(
            f"watch {kind.kind}: malformed event ({exc}): {line[:120]!r}", reason="Malformed"
        ) from exc
    if not isinstance(event, dict) or not isinstance(event.get("object") or {}, dict):
        raise KubeError(f"watch {kind.kind}: not a watch event: {line[:120]!r}", reason="Malformed")
    return event


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KubeClient:
    """JSON requests to one API server, retried and counted."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        retry: RetryPolicy | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self.api_client = api_client
        # Not the generated client's "OpenAPI-Generator/...": the server names the manager of
        # every write without a fieldManager after this, and audit logs show it.
        self.api_client.user_agent = names.USER_AGENT
        self.retry = retry or RetryPolicy()
        self.request_timeout = request_timeout
        self.stats = RequestStats()
        self.cancelled = threading.Event()
        """Set on shutdown: retries stop at once instead of running out their deadline."""
        self._streams: weakref.WeakSet[Any] = weakref.WeakSet()
        self._streams_lock = threading.Lock()
        self._watches_closed = False
        # One for every request: tenacity keeps a call's state per thread, and a Retrying made
        # per request was a reference cycle (its actions are its own bound methods) left for
        # the cyclic collector, hundreds a minute.
        self._retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, KubeError) and e.retryable),
            wait=self._wait,
            stop=stop_any(
                stop_after_delay(self.retry.max_delay_seconds), stop_when_set(self.cancelled)
            ),
            sleep=self._sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        *,
        context: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Self:
        """From a kubeconfig file, or the in-cluster service account when there is none."""
        configuration = k8s.Configuration()
        try:
            cls._load_config(configuration, path, context)
        except (k8s_config.ConfigException, OSError, ValueError) as exc:
            raise KubeError(f"kubeconfig {path or '(default)'}: {exc}") from exc
        configuration.retries = 0  # tenacity retries, with Retry-After; urllib3 must not.
        # Eleven watches and the loop share one client: room for all of them and then some.
        configuration.connection_pool_maxsize = 32
        return cls(k8s.ApiClient(configuration), retry=retry)

    @staticmethod
    def _load_config(
        configuration: k8s.Configuration, path: str | None, context: str | None
    ) -> None:
        if path is None:
            try:
                k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=context, client_configuration=configuration
                )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration
            )

    def close(self) -> None:
        self.abort_watches()
        self.api_client.close()  # type: ignore[no-untyped-call]

    def abort_watches(self) -> None:
        """Cut every open watch stream, and refuse new ones: the client is shutting down.

        A watch otherwise ends only when the server sends something or its timeout passes, and
        an API server that is asked to stop waits for open watches. A watch whose request was
        on its way while this ran is refused when its answer comes, not left open for minutes.
        """
        with self._streams_lock:
            self._watches_closed = True
            streams = list(self._streams)
            self._streams.clear()
        for response in streams:
            # A stream that already ended may refuse to be shut down; that is what we want.
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                response.shutdown()

    # ------------------------------------------------------------------ raw requests
    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        resource_path = path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # The REST layer JSON-encodes bodies sent as JSON itself; an apply patch goes as text.
        payload = body
        if body is not None and "json" not in content_type and not isinstance(body, str):
            payload = json.dumps(body)
        _, url, headers, _, _ = self.api_client.param_serialize(
            method, resource_path, header_params=headers, auth_settings=["BearerToken"]
        )
        self.stats.count(method)
        try:
            response = self.api_client.call_api(
                method,
                url,
                header_params=headers,
                body=payload,
                _request_timeout=timeout or self.request_timeout,
            )
        except ApiException as exc:  # TLS failures surface this way, with status 0
            raise KubeError(f"{method} {path}: {exc.reason}", status=exc.status or 0) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{method} {path}: connection failed: {exc}") from exc
        if stream and 200 <= response.status < 300:
            with self._streams_lock:
                if not self._watches_closed:
                    self._streams.add(response.response)
                    return response.response
            response.response.close()
            raise KubeError(f"{method} {path}: watches are closed: the client is shutting down")
        try:
            # The body can still break off after the headers (the server restarting mid-answer):
            # that is the same transient failure as a refused connection, and retried as one.
            data = response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{method} {path}: connection broken: {exc}") from exc
        text = data.decode("utf-8", errors="replace") if data else ""
        try:
            decoded = json.loads(text) if text else {}
        except json.JSONDecodeError:
            decoded = {"message": text}
        if not isinstance(decoded, dict):
            decoded = {"message": text}
        if not 200 <= response.status < 300:
            raise KubeError(
                f"{method} {path}: {response.status} {decoded.get('message', text)[:500]}",
                status=response.status,
                reason=str(decoded.get("reason", "")),
                retry_after=_retry_after(response),
                body=decoded,
            )
        return decoded

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when the server sent one, else jittered exponential backoff.

        Never past the deadline: a long Retry-After ends the retries instead of the call
        overrunning what its caller (a lease renewal, say) can afford.
        """
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, KubeError) and error.retry_after is not None:
            wanted = max(float(error.retry_after), 0.0)
        else:
            exponential = self.retry.initial_seconds * 2.0 ** (state.attempt_number - 1)
            wanted = min(exponential, self.retry.max_backoff_seconds) + random.uniform(
                0, self.retry.jitter_seconds
            )
        elapsed = state.seconds_since_start or 0.0
        return min(wanted, max(self.retry.max_delay_seconds - elapsed, 0.0))

    def _sleep(self, seconds: float) -> None:
        """Sleep between retries, waking at once when the client is cancelled."""
        self.cancelled.wait(seconds)

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        self.stats.count_retry()
        log.info(
            "request_retry",
            attempt=state.attempt_number,
            status=getattr(error, "status", None),
            error=str(error)[:200],
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request, retried while its error is transient, up to the policy's deadline."""
        return self._retrying(self._send, method, path, **kwargs)

    # ------------------------------------------------------------------ verbs
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.request("GET", kind.path(name, namespace))
        except KubeError as exc:
            if exc.not_found:
                return None
            raise
        return result

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Items (with apiVersion and kind filled in) and the list's resourceVersion.

        With `page_size`, the collection comes in pages of that many (`limit` and `continue`),
        so the API server never builds one response of every Workload in the cluster; all
        pages are read at the first page's resourceVersion, so they add up to one consistent
        list. An expired `continue` token (the list took longer than the server keeps its
        snapshot) is a 410: the caller lists again from the start.
        """
        query: dict[str, str] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if page_size:
            query["limit"] = str(page_size)
        items: list[dict[str, Any]] = []
        resource_version: str | None = None
        while True:
            result = self.request("GET", kind.path(namespace=namespace), query=query or None)
            items.extend(result.get("items") or [])
            meta = result.get("metadata") or {}
            if resource_version is None:
                resource_version = str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not page_size or not token:
                break
            query["continue"] = str(token)
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items, resource_version or ""

    def apply(
        self,
        kind: Kind,
        obj: dict[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply: the server merges our fields and records us as their manager."""
        meta = obj["metadata"]
        path = kind.path(meta["name"], meta.get("namespace"))
        if subresource:
            path += f"/{subresource}"
        query = {"fieldManager": field_manager, "force": "true" if force else "false"}
        if dry_run:
            query["dryRun"] = "All"
        result: dict[str, Any] = self.request(
            "PATCH", path, query=query, body=obj, content_type=APPLY_CONTENT_TYPE
        )
        return result

    def json_patch(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        patch: builtins.list[dict[str, Any]],
        *,
        field_manager: str,
    ) -> dict[str, Any]:
        """A JSON Patch (RFC 6902), retried while its error is transient, but for a conflict.

        A patch guarded by a `test` of the resourceVersion fails that test on any later try
        once the object has changed (a 409 says it changed under the write): the caller reads
        the new version and decides again, rather than the client sending it for 30 s.
        """

        def send() -> dict[str, Any] | KubeError:
            try:
                result: dict[str, Any] = self._send(
                    "PATCH",
                    kind.path(name, namespace),
                    query={"fieldManager": field_manager},
                    body=patch,
                    content_type=JSON_PATCH_CONTENT_TYPE,
                )
            except KubeError as exc:
                if exc.status == 409:
                    return exc
                raise
            return result

        answer = self._retrying(send)
        if isinstance(answer, KubeError):
            raise answer
        return answer

    def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        namespace = obj.get("metadata", {}).get("namespace")
        result: dict[str, Any] = self.request("POST", kind.path(namespace=namespace), body=obj)
        return result

    def replace(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with the object's resourceVersion: a 409 means someone else wrote first."""
        meta = obj["metadata"]
        result: dict[str, Any] = self._send(
            "PUT", kind.path(meta["name"], meta.get("namespace")), body=obj
        )
        return result

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> bool:
        """True when deleted, False when it was already gone."""
        try:
            self.request(
                "DELETE",
                kind.path(name, namespace),
                body={
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "propagationPolicy": "Background",
                },
            )
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        stop: Callable[[], bool] = lambda: False,
        opened: Callable[[], None] = lambda: None,
    ) -> Generator[WatchEvent, None, None]:
        """Events after `resource_version` until the server ends the watch or `stop()`.

        `opened()` is called once the server has accepted the watch (answered 200), before the
        first event. Raises KubeError with `gone` true when the version is too old (relist),
        and with `retryable` true when the connection failed or the stream carried a line that
        is not a watch event (watch again after a pause).
        """
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        response = self._send(
            "GET",
            kind.path(namespace=namespace),
            query=query,
            timeout=(10.0, timeout_seconds + 10.0),
            stream=True,
        )
        opened()
        buffer = b""
        try:
            for chunk in response.stream(4096, decode_content=True):
                if stop():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = _watch_event(kind, line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        code = int(obj.get("code") or 0)
                        raise KubeError(
                            f"watch {kind.kind}: {obj.get('message', '')}",
                            status=code,
                            reason=str(obj.get("reason", "")),
                        )
                    yield WatchEvent(str(event.get("type")), obj)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"watch {kind.kind}: connection failed: {exc}") from exc
        finally:
            with self._streams_lock:
                self._streams.discard(response)
            response.release_conn()

    def served_group_versions(self) -> set[str]:
        """Group/versions the server serves (`apps/v1`, `kueue.x-k8s.io/v1beta2`, ...)."""
        served: set[str] = set()
        core = self.request("GET", "/api")
        served.update(core.get("versions") or [])
        groups = self.request("GET", "/apis")
        for group in groups.get("groups") or []:
            for version in group.get("versions") or []:
                served.add(str(version.get("groupVersion")))
        return served
