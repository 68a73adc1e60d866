"""A real Prometheus server and promtool on loopback, for integration and alert-rule tests.

The controller reads its signals from Prometheus, so its tests need one that really scrapes,
stores and answers PromQL: a fake would agree with whatever the tests assume about the query
API. Nothing can be fetched here but package-registry packages, so the binaries come from
Debian's `prometheus` package, fetched with `apt-get download` (the machine's own apt sources)
and unpacked with `dpkg -x` into `~/.cache/quartermaster/prometheus` ($QUARTERMASTER_CACHE
moves it). Nothing is installed system-wide: the package's dependencies are JavaScript for the
web UI, which the API does not need. PROMETHEUS_BIN / PROMTOOL_BIN, or binaries already on
PATH, are used instead when present.

`PrometheusServer` keeps its port and data directory across `stop()` and `start()`, so a test
can make Prometheus unreachable in the middle of a run and bring it back with its history. The
server dies with the process that started it, even when that process is killed
(`testenv.processes`).

Run `python -m testenv.prometheus` to fetch the binaries once and print the version.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from testenv.controlplane import Report, disk_usage, free_ports, to_stderr
from testenv.debian import unpacked_package
from testenv.processes import spawn

PACKAGE = "prometheus"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0


class PrometheusError(RuntimeError):
    """Prometheus could not be fetched, started or reloaded; the message says where to look."""


# --------------------------------------------------------------------------- binaries
def cache_dir() -> Path:
    """Beside the control plane's cache, so one $QUARTERMASTER_CACHE moves both."""
    root = os.environ.get("QUARTERMASTER_CACHE") or Path.home() / ".cache" / "quartermaster"
    return Path(root) / "prometheus"


@dataclass(frozen=True)
class Binaries:
    prometheus: Path
    promtool: Path


def _extracted_bin() -> Path:
    return cache_dir() / "root" / "usr" / "bin"


def _pick(env_var: str, name: str, *, fetch: bool) -> Path:
    """$env_var if set (it must exist: a typo should not silently fall back), else PATH, else
    the cache, fetching Debian's package into it when missing and `fetch` allows."""
    explicit = os.environ.get(env_var)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise PrometheusError(f"{env_var}={explicit} is not a file")
        return path
    installed = shutil.which(name)
    if installed:
        return Path(installed)
    cached = _extracted_bin() / name
    if not cached.is_file():
        if not fetch:
            raise PrometheusError(f"no {name} in {cached.parent}; run `make prometheus`")
        fetch_package()
    return cached


def find_binaries(*, fetch: bool = True) -> Binaries:
    return Binaries(
        prometheus=_pick("PROMETHEUS_BIN", "prometheus", fetch=fetch),
        promtool=_pick("PROMTOOL_BIN", "promtool", fetch=fetch),
    )


def prometheus_path() -> Path:
    return _pick("PROMETHEUS_BIN", "prometheus", fetch=True)


def promtool_path() -> Path:
    return _pick("PROMTOOL_BIN", "promtool", fetch=True)


def fetch_package(*, report: Report = to_stderr) -> Path:
    """Download and unpack Debian's prometheus package into the cache; returns its bin dir.

    Two test processes starting at once fetch it only once (see `testenv.debian`).
    The fetch is announced before it starts, and what was fetched is reported after.
    """
    target = cache_dir()
    bin_dir = _extracted_bin()
    fetched = all((bin_dir / name).is_file() for name in ("prometheus", "promtool"))
    started = time.monotonic()
    if not fetched:
        report(
            f"Fetching Prometheus and promtool (once): Debian's `{PACKAGE}` package from "
            f"this machine's apt sources (about 20 MB to download, 95 MB kept) into {target}"
        )
    root = unpacked_package(
        PACKAGE,
        target,
        required=("usr/bin/prometheus", "usr/bin/promtool"),
        error=PrometheusError,
    )
    if not fetched:
        package = (target / "package").read_text().strip()
        binary = root / "usr" / "bin" / "prometheus"
        report(
            f"Fetched {package} in {time.monotonic() - started:.0f} s "
            f"({disk_usage(target) / 2**20:.0f} MB kept): {version(binary)}"
        )
    return root / "usr" / "bin"


def version(binary: Path | None = None) -> str:
    """The first line of `prometheus --version`, e.g. 'prometheus, version 2.42.0+ds (...)'."""
    result = subprocess.run(
        [str(binary or prometheus_path()), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    # Prometheus 2.x prints its version on stderr, later releases on stdout.
    return (result.stdout or result.stderr).splitlines()[0]


# --------------------------------------------------------------------------- promtool
def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool_path()), *args], capture_output=True, text=True, check=False
    )


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check config PATH`; the caller asserts on returncode and output."""
    return _promtool("check", "config", str(path))


def check_rules(path: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules PATH`; the caller asserts on returncode and output."""
    return _promtool("check", "rules", str(path))


def test_rules(path: Path) -> subprocess.CompletedProcess[str]:
    """`promtool test rules PATH` (rule unit tests); the caller asserts on returncode."""
    return _promtool("test", "rules", str(path))


# A helper, not a test: keep pytest from collecting it where a test module imports it.
test_rules.__test__ = False  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- server
@dataclass(frozen=True)
class ScrapeTarget:
    """One `host:port` to scrape. Targets sharing a job must share its metrics_path."""

    address: str
    job: str = "quartermaster"
    metrics_path: str = "/metrics"
    labels: Mapping[str, str] = field(default_factory=dict)


def _duration(seconds: float) -> str:
    """Prometheus durations take integer units only: 1.0 -> '1s', 0.5 -> '500ms'."""
    millis = round(seconds * 1000)
    if millis <= 0:
        raise ValueError(f"interval must be positive, got {seconds}")
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def render_config(
    targets: Sequence[ScrapeTarget],
    *,
    scrape_interval: float = 1.0,
    evaluation_interval: float | None = None,
    rule_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """The prometheus.yml document: one scrape config per job, static targets only."""
    interval = _duration(scrape_interval)
    jobs: dict[str, dict[str, Any]] = {}
    for target in targets:
        job = jobs.setdefault(
            target.job,
            {
                "job_name": target.job,
                "metrics_path": target.metrics_path,
                "scrape_interval": interval,
                # Scrapes must end before the next starts, or 1 s scraping is refused.
                "scrape_timeout": interval,
                "static_configs": [],
            },
        )
        if job["metrics_path"] != target.metrics_path:
            raise ValueError(
                f"job {target.job!r} has targets on {job['metrics_path']} and "
                f"{target.metrics_path}; give them different jobs"
            )
        static: dict[str, Any] = {"targets": [target.address]}
        if target.labels:
            static["labels"] = dict(target.labels)
        job["static_configs"].append(static)
    document: dict[str, Any] = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": _duration(evaluation_interval or scrape_interval),
        },
        "scrape_configs": list(jobs.values()),
    }
    if rule_files:
        document["rule_files"] = [str(Path(path).resolve()) for path in rule_files]
    return document


class PrometheusServer:
    """Prometheus on a free loopback port; a context manager that always stops it.

    `stop()` only stops the process: port, data directory and config stay, so `start()`
    brings the same server back with its stored samples. Leaving the context also deletes
    the data directory when this object made it.
    """

    def __init__(
        self,
        targets: Sequence[ScrapeTarget] = (),
        *,
        scrape_interval: float = 1.0,
        evaluation_interval: float | None = None,
        rule_files: Sequence[Path] = (),
        state_dir: Path | None = None,
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary or prometheus_path()
        self._owns_state = state_dir is None
        self.state = state_dir or Path(tempfile.mkdtemp(prefix="qm-prom-"))
        self.state.mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self._targets = list(targets)
        self._rule_files = list(rule_files)
        self.extra_args = list(extra_args)
        self._process: subprocess.Popen[bytes] | None = None
        self.write_config()

    # ----------------------------------------------------------------- paths
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.state / "prometheus.yml"

    @property
    def data_dir(self) -> Path:
        return self.state / "data"

    @property
    def log_file(self) -> Path:
        return self.state / "prometheus.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self.running else None

    # ----------------------------------------------------------------- config
    @property
    def targets(self) -> list[ScrapeTarget]:
        return list(self._targets)

    def set_targets(self, targets: Sequence[ScrapeTarget]) -> None:
        """Rewrite the config file; a running server picks it up on `reload()`."""
        self._targets = list(targets)
        self.write_config()

    def set_rule_files(self, rule_files: Sequence[Path]) -> None:
        """Rewrite the config file; a running server picks it up on `reload()`."""
        self._rule_files = list(rule_files)
        self.write_config()

    def write_config(self) -> None:
        document = render_config(
            self._targets,
            scrape_interval=self.scrape_interval,
            evaluation_interval=self.evaluation_interval,
            rule_files=self._rule_files,
        )
        self.config_file.write_text(yaml.safe_dump(document, sort_keys=False))

    def reload(self) -> None:
        """POST /-/reload; Prometheus answers only once the new config is applied or refused."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30):
                return
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace").strip()
            error.close()
            raise PrometheusError(f"reload refused ({error.code}): {body}") from error

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> PrometheusServer:
        if self.running:
            return self
        self.data_dir.mkdir(exist_ok=True)
        args = [
            str(self.binary),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            *self.extra_args,
        ]
        with self.log_file.open("ab") as log:
            self._process = spawn(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited in time. Data and port are kept."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop, and delete the state directory if this object created it."""
        self.stop()
        if self._owns_state:
            shutil.rmtree(self.state, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if not self.running:
                break
            if self._ready():
                return
            time.sleep(0.05)
        tail = ""
        if self.log_file.exists():
            tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
        self.stop()
        raise PrometheusError(f"prometheus did not become ready (log {self.log_file}):\n{tail}")

    def _ready(self) -> bool:
        """Not ready yet: refused while binding, 503 while it replays its WAL."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                status: int = response.status
        except urllib.error.HTTPError as error:
            error.close()  # it holds the response open; unclosed, it warns when collected
            return False
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
        return status == 200

    # ----------------------------------------------------------------- queries
    def connect(self, *, retry: Retry | None = None) -> PrometheusConnect:
        """A client for this server, as the controller builds one; close it after use.

        `retry=Retry(total=0)` fails at once on a stopped server instead of backing off.
        """
        return PrometheusConnect(self.url, disable_ssl=True, retry=retry)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector; raises on connection errors and HTTP errors."""
        with self.connect(retry=Retry(total=0)) as client:
            result: list[dict[str, Any]] = client.custom_query(query=promql)
        return result

    def wait_for_series(
        self, promql: str, timeout: float = 15.0, *, interval: float = 0.1
    ) -> list[dict[str, Any]]:
        """Poll an instant query until its result is non-empty, and return that result.

        A value can be awaited with a filter in the query itself (`metric{l="x"} == 7`).
        """
        deadline = time.monotonic() + timeout
        with self.connect(retry=Retry(total=0)) as client:
            while True:
                if not self.running:
                    raise PrometheusError(f"prometheus is not running (log {self.log_file})")
                result: list[dict[str, Any]] = client.custom_query(query=promql)
                if result:
                    return result
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no series for {promql!r} after {timeout} s")
                time.sleep(interval)


def main() -> None:
    """`make prometheus`: fetch once, then show which binaries the tests will run."""
    binaries = find_binaries()
    print(f"prometheus: {binaries.prometheus}")
    print(f"promtool:   {binaries.promtool}")
    print(version(binaries.prometheus))


if __name__ == "__main__":
    main()
