"""What Prometheus remembers, read through `prometheus-api-client`, and what to do without it.

Two things feed the risk model: each project's median workload runtime over the past week
(from the controller's own `quartermaster_workload_duration_seconds` histogram), used for
workloads without an expected-duration annotation; and how each pool's demand moved over the
coming horizon at the same time in past weeks (`quartermaster_pool_demand_gpus`), for the warm
pool forecast. Prometheus is optional: when it cannot be reached the last good answer is kept,
`available` turns False (so the decisions never scale down on missing data), and a condition
on the policy says why.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import structlog
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from controller import names
from controller.api.types import PrometheusSettings
from controller.decide.observation import History

log = structlog.get_logger(__name__)

WEEK_SECONDS = 7 * 24 * 3600
WEEKS_BACK = 4
REFRESH_SECONDS = 300.0

RUNTIME_QUERY = (
    "histogram_quantile(0.5, sum by (le, project) "
    "(rate(quartermaster_workload_duration_seconds_bucket[7d])))"
)


class HistoryUnavailableError(Exception):
    """Prometheus could not be asked; the reason is the message."""


def redact_url(url: str) -> str:
    """The URL without a password in its userinfo, for logs, conditions and Events."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:[redacted]@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _scrubbed(text: str, settings: PrometheusSettings) -> str:
    """`text` with the URL's password and the bearer token taken out, whatever quoted them."""
    secrets = [urlsplit(settings.url).password or ""]
    if settings.bearer_token_file:
        with contextlib.suppress(OSError):
            secrets.append(Path(settings.bearer_token_file).read_text(encoding="utf-8").strip())
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def connect(settings: PrometheusSettings) -> PrometheusConnect:
    """A client with TLS verification on unless switched off, and the bearer token, if any.

    The token is read from its file on every connection (it may be rotated) and is never
    logged.
    """
    headers: dict[str, str] = {"User-Agent": names.USER_AGENT}
    if settings.bearer_token_file:
        token = Path(settings.bearer_token_file).read_text(encoding="utf-8").strip()
        headers["Authorization"] = f"Bearer {token}"
    session = requests.Session()
    session.verify = False if settings.insecure_skip_verify else (settings.ca_file or True)
    return PrometheusConnect(
        url=settings.url,
        headers=headers,
        session=session,
        retry=Retry(total=0),
        timeout=math.ceil(settings.timeout_seconds),
    )


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost reason: requests wraps urllib3's MaxRetryError, which wraps the error that
    says what went wrong (a refused connection, a certificate that did not verify)."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "reason", None)
        if not isinstance(inner, BaseException) and exc.args:
            inner = exc.args[0]
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _vector(client: PrometheusConnect, query: str) -> list[dict[str, Any]]:
    try:
        result: list[dict[str, Any]] = client.custom_query(query)
    except (requests.RequestException, PrometheusApiClientException, ValueError) as exc:
        reason = _root_cause(exc)
        raise HistoryUnavailableError(f"{type(exc).__name__}: {str(reason)[:300]}") from exc
    return result


def read_history(
    client: PrometheusConnect, *, pools: Sequence[str], horizon_seconds: dict[str, float]
) -> History:
    runtimes: dict[str, float] = {}
    for sample in _vector(client, RUNTIME_QUERY):
        project = sample.get("metric", {}).get("project")
        value = float(sample.get("value", [0, "nan"])[1])
        if project and math.isfinite(value) and value > 0:
            runtimes[project] = value
    changes: dict[str, list[float]] = {pool: [] for pool in pools}
    for pool in pools:
        horizon = int(horizon_seconds.get(pool, 300))
        for week in range(1, WEEKS_BACK + 1):
            then = f'quartermaster_pool_demand_gpus{{pool="{pool}"}} offset {week * WEEK_SECONDS}s'
            later = (
                f'quartermaster_pool_demand_gpus{{pool="{pool}"}} '
                f"offset {week * WEEK_SECONDS - horizon}s"
            )
            before, after = _vector(client, then), _vector(client, later)
            if before and after:
                changes[pool].append(float(after[0]["value"][1]) - float(before[0]["value"][1]))
    return History(available=True, median_runtime=runtimes, demand_changes=changes)


class HistoryReader:
    """Refreshes history every few minutes and keeps the last good answer through outages."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self._last_good = History()
        self._fetched_at: float | None = None
        self._settings: PrometheusSettings | None = None
        self.error: str | None = "not queried yet"

    def read(
        self,
        settings: PrometheusSettings,
        *,
        pools: Sequence[str],
        horizon_seconds: dict[str, float],
    ) -> History:
        due = (
            self._fetched_at is None
            or settings != self._settings
            or self.clock() - self._fetched_at >= self.refresh_seconds
            or self.error is not None
        )
        if not due:
            # Between full reads, a cheap probe each pass: an outage must stop lowering at
            # once, not after the next refresh.
            try:
                _vector(connect(settings), "vector(1)")
            except (HistoryUnavailableError, OSError) as exc:
                self.error = _scrubbed(str(exc), settings)
                log.warning(
                    "prometheus_unavailable", url=redact_url(settings.url), error=self.error
                )
                return History(
                    available=False,
                    median_runtime=self._last_good.median_runtime,
                    demand_changes=self._last_good.demand_changes,
                )
            return self._last_good
        self._fetched_at = self.clock()
        self._settings = settings
        try:
            history = read_history(connect(settings), pools=pools, horizon_seconds=horizon_seconds)
        except (HistoryUnavailableError, OSError) as exc:
            self.error = _scrubbed(str(exc), settings)
            log.warning("prometheus_unavailable", url=redact_url(settings.url), error=self.error)
            return History(
                available=False,
                median_runtime=self._last_good.median_runtime,
                demand_changes=self._last_good.demand_changes,
            )
        self.error = None
        self._last_good = history
        return history
