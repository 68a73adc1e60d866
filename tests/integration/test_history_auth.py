"""Reading history from a Prometheus behind TLS and a bearer token, and never leaking either.

Prometheus in production often sits behind an authenticating proxy (kube-rbac-proxy, an OAuth
proxy) that checks a bearer token over TLS. Here a real Prometheus runs behind a small TLS proxy
of the test's own that does that check (a stand-in for kube-rbac-proxy, which is not available
here), with a certificate from a CA the test makes with openssl. What is checked: TLS
verification is on by default (a self-signed server is refused until its CA is given), the token
is read from its file (and re-read when rotated), a wrong token makes history unavailable, and
neither the token nor a password in the URL appears in a log line or the reader's error.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from structlog.testing import capture_logs

from controller import __version__
from controller.api.types import PrometheusSettings
from controller.history import HistoryReader, redact_url
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from testenv.controlplane import ControlPlane
from testenv.prometheus import PrometheusServer
from tests.integration.conftest import Server

TOKEN = "s3cr3t-token-4f9a2c"
ROTATED = "r0tated-token-77b1e0"


@dataclass
class AuthProxy:
    """HTTPS on loopback; forwards GETs with `Authorization: Bearer <token>` to Prometheus."""

    upstream: str
    certificate: Path
    key: Path
    token: str = TOKEN
    seen: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                header = self.headers.get("Authorization", "")
                proxy.seen.append(header)
                proxy.agents.append(self.headers.get("User-Agent", ""))
                if header != f"Bearer {proxy.token}":
                    self._reply(401, b'{"status":"error","error":"unauthorized"}')
                    return
                target = urlsplit(proxy.upstream)
                connection = http.client.HTTPConnection(
                    target.hostname or "127.0.0.1", target.port, timeout=10
                )
                try:
                    connection.request("GET", self.path)
                    response = connection.getresponse()
                    self._reply(response.status, response.read())
                finally:
                    connection.close()

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificate, self.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"https://localhost:{server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for localhost signed by it: (ca, certificate, key)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    (directory / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.crt",
    )
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    with PrometheusServer() as server:
        yield server


@pytest.fixture
def proxied(prometheus: PrometheusServer, tmp_path: Path) -> Iterator[tuple[AuthProxy, str, Path]]:
    ca, certificate, key = make_certificates(tmp_path)
    proxy = AuthProxy(prometheus.url, certificate, key)
    url = proxy.start()
    try:
        yield proxy, url, ca
    finally:
        proxy.stop()


def token_file(directory: Path, token: str = TOKEN) -> Path:
    path = directory / "token"
    path.write_text(token + "\n")
    return path


def read(reader: HistoryReader, settings: PrometheusSettings) -> bool:
    return reader.read(settings, pools=["a100"], horizon_seconds={"a100": 600.0}).available


def test_tls_is_verified_by_default_so_an_unknown_ca_is_refused(
    proxied: tuple[AuthProxy, str, Path], tmp_path: Path
) -> None:
    proxy, url, _ = proxied
    reader = HistoryReader()
    settings = PrometheusSettings(url=url, bearer_token_file=str(token_file(tmp_path)))

    assert read(reader, settings) is False
    assert reader.error is not None and "CERTIFICATE_VERIFY_FAILED" in reader.error
    assert proxy.seen == []  # the token never left before the server was verified


def test_with_the_ca_and_the_token_from_its_file_history_is_available(
    proxied: tuple[AuthProxy, str, Path], tmp_path: Path
) -> None:
    proxy, url, ca = proxied
    reader = HistoryReader()
    settings = PrometheusSettings(
        url=url, bearer_token_file=str(token_file(tmp_path)), ca_file=str(ca)
    )

    assert read(reader, settings) is True
    assert proxy.seen and set(proxy.seen) == {f"Bearer {TOKEN}"}
    assert set(proxy.agents) == {f"quartermaster/{__version__}"}


def test_a_rotated_token_is_read_again_from_the_file(
    proxied: tuple[AuthProxy, str, Path], tmp_path: Path
) -> None:
    proxy, url, ca = proxied
    path = token_file(tmp_path)
    settings = PrometheusSettings(url=url, bearer_token_file=str(path), ca_file=str(ca))
    reader = HistoryReader()
    assert read(reader, settings) is True

    proxy.token = ROTATED
    path.write_text(ROTATED + "\n")

    assert read(reader, settings) is True
    assert proxy.seen[-1] == f"Bearer {ROTATED}"


def test_a_refused_token_is_unavailable_history_and_appears_in_no_log(
    proxied: tuple[AuthProxy, str, Path], tmp_path: Path
) -> None:
    proxy, url, ca = proxied
    proxy.token = ROTATED  # the server now wants another token than the file holds
    settings = PrometheusSettings(
        url=url, bearer_token_file=str(token_file(tmp_path)), ca_file=str(ca)
    )
    reader = HistoryReader()

    with capture_logs() as logs:
        assert read(reader, settings) is False

    assert logs and logs[0]["event"] == "prometheus_unavailable"
    text = json.dumps(logs, default=str) + (reader.error or "")
    assert TOKEN not in text and ROTATED not in text


def test_a_password_in_the_url_appears_in_no_log_or_error(tmp_path: Path) -> None:
    settings = PrometheusSettings(url="https://reader:hunter2-pass@127.0.0.1:9/prometheus")
    reader = HistoryReader()

    with capture_logs() as logs:
        assert read(reader, settings) is False

    text = json.dumps(logs, default=str) + (reader.error or "")
    assert "hunter2-pass" not in text
    assert logs[0]["url"] == "https://reader:[redacted]@127.0.0.1:9/prometheus"


@pytest.mark.parametrize(
    ("url", "want"),
    [
        pytest.param("http://prom:9090", "http://prom:9090", id="no userinfo"),
        pytest.param("https://u@prom/api", "https://u@prom/api", id="a user without a password"),
        pytest.param(
            "https://u:p4ss@prom:443/x?q=1", "https://u:[redacted]@prom:443/x?q=1", id="a password"
        ),
    ],
)
def test_redact_url(url: str, want: str) -> None:
    assert redact_url(url) == want


def test_the_api_servers_bearer_token_appears_in_no_error_or_log(
    control_plane: ControlPlane, server: Server, tmp_path: Path
) -> None:
    """A kubeconfig with a token the server does not know: the refusal names the request, not
    the token, and the retries logged on the way do not either. The refusal is 401 from a
    kube-apiserver's authenticators, 403 from the CRD-only server (which takes the request as
    anonymous): `server.unknown_token_status`, from discovery."""
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    wrong = "wrong-token-5d1e9b7c"
    for user in config["users"]:
        if "token" in user["user"]:
            user["user"]["token"] = wrong
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    client = KubeClient.from_kubeconfig(str(path), context="admin-token")

    try:
        with capture_logs() as logs, pytest.raises(KubeError) as caught:
            client.list(kinds.CAPACITY_POLICY)
    finally:
        client.close()

    assert caught.value.status == server.unknown_token_status
    assert wrong not in str(caught.value) and wrong not in json.dumps(logs, default=str)
