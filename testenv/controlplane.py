"""A real Kubernetes API server and etcd on loopback, for integration tests and the demo.

There is no kind or Docker on the machines this project is built on, so the tests run the
CRD API server that kube-apiserver embeds (built once from Debian's packages by
`build-control-plane.sh` into `~/.cache/quartermaster/controlplane`), with a real etcd behind
it. It validates, stores, watches and server-side-applies every custom resource exactly as a
cluster does. Where `KUBEBUILDER_ASSETS` holds real `kube-apiserver` and `etcd` binaries, those
are used instead and serve the built-in kinds for real.

The manager starts and stops the two processes individually, on fixed ports, so tests can
restart the API server or etcd in the middle of a reconcile. Both die with the process that
started them, even when it is killed (`testenv.processes`).

Run `python -m testenv.controlplane` (`make controlplane`) to build once and print
which binaries and package versions the tests will run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from testenv.processes import spawn

HERE = Path(__file__).parent
BUILD_SCRIPT = HERE / "build-control-plane.sh"
STANDINS_DIR = HERE / "standins"

BUILD_COST = (
    "3 to 10 minutes on 2 cores (3 when idle), ~300 MB downloaded, up to 3.9 GB of disk "
    "while it builds and 180 MB kept"
)
"""What the first run costs, measured with cold builds: 178 s on an idle 2-core machine, 592 s
on the same machine with other jobs running (load 4 to 8); 293 MB of .debs; 3.89 GB at the
peak (unpacked sources and Go build cache, deleted at the end); 185 MB kept (README)."""

Report = Callable[[str], None]


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_key(script: bytes) -> str:
    """The first 12 hex digits of the build script's sha256: the server's Go main is embedded
    in the script, so a changed script is a different server."""
    return hashlib.sha256(script).hexdigest()[:12]


def cache_dir() -> Path:
    """One folder per build script: a checkout whose script changed (say, the server's
    admission) builds its own binaries rather than running, or overwriting, another's."""
    root = os.environ.get("QUARTERMASTER_CACHE") or Path.home() / ".cache" / "quartermaster"
    return Path(root) / "controlplane" / build_key(BUILD_SCRIPT.read_bytes())


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message says where to look."""


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path
    full_kube_apiserver: bool
    """True for a real kube-apiserver (built-in kinds served), False for the CRD server."""


def find_binaries(*, build: bool = True) -> Binaries:
    """KUBEBUILDER_ASSETS if it has both binaries, else the cache, building it when missing."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        apiserver, etcd = Path(assets) / "kube-apiserver", Path(assets) / "etcd"
        if apiserver.is_file() and etcd.is_file():
            return Binaries(apiserver, etcd, full_kube_apiserver=True)
    bin_dir = cache_dir() / "bin"
    apiserver, etcd = bin_dir / "crd-apiserver", bin_dir / "etcd"
    if not (apiserver.is_file() and etcd.is_file()):
        if not build:
            raise ControlPlaneError(f"no control plane binaries in {bin_dir}")
        build_binaries()
    return Binaries(apiserver, etcd, full_kube_apiserver=False)


def kubectl_path() -> Path | None:
    """The kubectl the build unpacks beside the server (the server's release), else kubectl on
    PATH. The build's first: kubectl supports a server one minor release away at most, and the
    one a machine happens to have may be older (a 1.32 against this 1.36 server, say)."""
    built = cache_dir() / "bin" / "kubectl"
    if built.is_file():
        return built
    installed = shutil.which("kubectl")
    return Path(installed) if installed else None


def kubectl_line(chosen: Path | None, on_path: str | None) -> str:
    """What `make controlplane` says of kubectl: which one the demo and the tests use, and
    that another on PATH is not it (so a version printed below is not taken for that one)."""
    if chosen is None:
        return "kubectl:        none (any kubectl works with the cluster; see README)"
    if on_path and Path(on_path).resolve() != chosen.resolve():
        return f"kubectl:        {chosen} (the server's release; {on_path} on PATH is not used)"
    return f"kubectl:        {chosen}"


# --------------------------------------------------------------------------- the build
def progress_line(line: str) -> str | None:
    """What the terminal shows of one line of the build's output; everything goes to the log.

    The script marks its progress lines `[build +<seconds>s]`: the step, what it downloads or
    compiles and how far it is. apt's and Go's own output is for the log only.
    """
    text = line.rstrip("\n")
    return text if text.startswith("[build +") else None


KEY_PACKAGES = (
    ("golang-k8s-apiextensions-apiserver-dev", "crd-apiserver (Kubernetes API server code)"),
    ("etcd-server", "etcd"),
    ("kubectl", "kubectl"),
)


def built_versions(manifest: str) -> list[str]:
    """`manifest.txt` (`package=version` per line) -> one line per binary built from it."""
    versions: dict[str, str] = {}
    for line in manifest.splitlines():
        package, sep, version = line.strip().partition("=")
        if sep:
            versions[package] = version
    lines = [
        f"{label}: {package} {versions[package]}"
        for package, label in KEY_PACKAGES
        if package in versions
    ]
    compilers = sorted(p for p in versions if p.startswith("golang-1.") and p.endswith("-go"))
    if compilers:
        lines.append(f"compiled with: {compilers[-1]} {versions[compilers[-1]]}")
    lines.append(f"all {len(versions)} package versions: manifest.txt")
    return lines


def disk_usage(path: Path) -> int:
    """Bytes in the files under `path` (what `du` counts, near enough)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _tail(lines: Iterable[str], count: int = 20) -> str:
    return "\n".join(list(lines)[-count:])


def build_binaries(*, report: Report = to_stderr) -> None:
    """Run build-control-plane.sh into the cache, once, however many processes ask at once.

    The build is announced before it starts, its progress lines are shown as they come, and
    the versions it built are printed at the end; the full output goes to build.log.
    """
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bin_dir = target / "bin"
        if (bin_dir / "crd-apiserver").is_file() and (bin_dir / "etcd").is_file():
            return  # another process built it while this one waited
        _run_build(target, report)


def _run_build(target: Path, report: Report) -> None:
    log = target / "build.log"
    report(
        "Building the test control plane (etcd and the Kubernetes API server's CRD server) "
        f"from Debian's packages into {target}.\n"
        f"First run only: {BUILD_COST}. Full log: {log}"
    )
    started = time.monotonic()
    with log.open("w") as handle:
        # Not a new session: Ctrl-C in the terminal stops the build with everything else.
        process = spawn(
            ["bash", str(BUILD_SCRIPT)],
            env={**os.environ, "CP_DIR": str(target)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            new_session=False,
        )
        assert process.stdout is not None
        try:
            for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace")
                handle.write(line)
                handle.flush()
                shown = progress_line(line)
                if shown is not None:
                    report(f"  {shown}")
        except BaseException:
            process.kill()
            process.wait()
            raise
        code = process.wait()
    if code != 0:
        tail = _tail(log.read_text(errors="replace").splitlines())
        raise ControlPlaneError(f"building the control plane failed (log: {log}):\n{tail}")
    manifest = target / "manifest.txt"
    versions = built_versions(manifest.read_text()) if manifest.is_file() else []
    report(
        f"Control plane built in {time.monotonic() - started:.0f} s; "
        f"{disk_usage(target) / 2**20:.0f} MB kept in {target}:\n"
        + "\n".join(f"  {line}" for line in versions)
    )


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_certificates(state: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1, and an admin client in system:masters."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "3650",
        "-subj",
        "/CN=quartermaster-test-ca",
        cwd=state,
    )
    (state / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    (state / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (
        ("server", "/CN=localhost", "server.ext"),
        ("admin", "/O=system:masters/CN=admin", "client.ext"),
    ):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=state,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "3650",
            "-extfile",
            ext,
            cwd=state,
        )
    # kube-apiserver needs a service-account key pair; the CRD server ignores it.
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=state)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=state)
    for key in state.glob("*.key"):
        key.chmod(0o600)


class ControlPlane:
    """etcd + API server on loopback; a context manager that always stops both."""

    def __init__(self, binaries: Binaries | None = None, state_dir: Path | None = None) -> None:
        self.binaries = binaries or find_binaries()
        self._owns_state = state_dir is None
        self.state = state_dir or Path(tempfile.mkdtemp(prefix="qm-cp-"))
        self.state.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.etcd_peer_port, self.api_port = free_ports(3)
        self.token = os.urandom(24).hex()
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------- addresses
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.state / "ca.crt"

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ControlPlane:
        _make_certificates(self.state)
        (self.state / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        (self.state / "tokens.csv").chmod(0o600)
        self._write_kubeconfig()
        self.start_etcd()
        self.start_apiserver()
        return self

    def stop(self) -> None:
        self.stop_apiserver()
        self.stop_etcd()
        if self._owns_state:
            shutil.rmtree(self.state, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start_etcd(self) -> None:
        data = self.state / "etcd-data"
        data.mkdir(mode=0o700, exist_ok=True)
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._etcd = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name",
                "qm",
                "--data-dir",
                str(data),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"qm={peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )
        self._wait(f"{client}/health", self._etcd, "etcd", tls=False)

    def stop_etcd(self) -> None:
        self._etcd = self._terminate(self._etcd)

    def start_apiserver(self) -> None:
        s = self.state
        args = [
            str(self.binaries.apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={s / 'server.crt'}",
            f"--tls-private-key-file={s / 'server.key'}",
            f"--client-ca-file={s / 'ca.crt'}",
            f"--token-auth-file={s / 'tokens.csv'}",
        ]
        if self.binaries.full_kube_apiserver:
            args += [
                f"--service-account-key-file={s / 'sa.pub'}",
                f"--service-account-signing-key-file={s / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
            ]
        self._apiserver = self._spawn("apiserver", args)
        self._wait(f"{self.server}/readyz", self._apiserver, "apiserver", tls=True)

    def stop_apiserver(self) -> None:
        self._apiserver = self._terminate(self._apiserver)

    def kill_apiserver(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        if self._apiserver is not None:
            self._apiserver.kill()
            self._apiserver.wait()
            self._apiserver = None

    def standin_dirs(self) -> list[Path]:
        """CRDs standing in for built-in kinds: only the CRD server needs them.

        A real kube-apiserver serves Lease, Event and PriorityClass itself (and would refuse
        CRDs in those groups). That path is supported but not exercised on machines without
        envtest binaries.
        """
        return [] if self.binaries.full_kube_apiserver else [STANDINS_DIR]

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    # ----------------------------------------------------------------- helpers
    @property
    def pids(self) -> dict[str, int]:
        """The running servers' process ids, by name."""
        running = {"etcd": self._etcd, "apiserver": self._apiserver}
        return {name: p.pid for name, p in running.items() if p is not None and p.poll() is None}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.state / f"{name}.log").open("ab") as log:
            return spawn(args, stdout=log, stderr=subprocess.STDOUT)

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes] | None) -> None:
        if process is None or process.poll() is not None:
            return None
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return None

    def _wait(self, url: str, process: subprocess.Popen[bytes], name: str, *, tls: bool) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file)) if tls else None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
                pass
            time.sleep(0.05)
        log = self.state / f"{name}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise ControlPlaneError(f"{name} did not become ready (log {log}):\n{tail}")

    def _write_kubeconfig(self) -> None:
        s = self.state
        self.kubeconfig.write_text(
            f"""apiVersion: v1
kind: Config
clusters:
- name: qm
  cluster:
    server: {self.server}
    certificate-authority: {s / "ca.crt"}
users:
- name: admin
  user:
    client-certificate: {s / "admin.crt"}
    client-key: {s / "admin.key"}
- name: admin-token
  user:
    token: {self.token}
contexts:
- name: admin
  context: {{cluster: qm, user: admin}}
- name: admin-token
  context: {{cluster: qm, user: admin-token}}
current-context: admin
"""
        )
        self.kubeconfig.chmod(0o600)


def main() -> None:
    """`make controlplane`: build once, then show what the tests and the demo will run.

    A build that just ran has printed the package versions it built; they are printed here
    only when the binaries came from the cache, so they appear once either way.
    """
    try:
        binaries, built_now = find_binaries(build=False), False
    except ControlPlaneError:
        binaries, built_now = find_binaries(), True
    kind = "kube-apiserver" if binaries.full_kube_apiserver else "CRD API server"
    print(f"{kind}: {binaries.apiserver}")
    print(f"etcd:           {binaries.etcd}")
    manifest = binaries.apiserver.parent.parent / "manifest.txt"
    print(kubectl_line(kubectl_path(), shutil.which("kubectl")))
    if not binaries.full_kube_apiserver and manifest.is_file() and not built_now:
        print(f"built from Debian's packages ({manifest}):")
        for line in built_versions(manifest.read_text()):
            print(f"  {line}")


if __name__ == "__main__":
    main()
