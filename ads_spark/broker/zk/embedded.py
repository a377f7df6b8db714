"""The embedded single-node ZooKeeper for local clusters, tests and the demo.

It runs the real ZooKeeper server from the jars that ship inside the installed
pyspark wheel, with the Java Spark itself would use (``JAVA_HOME``, else ``java``
on ``PATH``), so ADS needs no separate ZooKeeper download. Production points
``zookeeper.connect`` at an existing ensemble instead.

The server listens on 127.0.0.1 (or, for the fault-injection hosts, on the address
of its own network namespace), has the admin HTTP server off, allows the
``ruok`` and ``srvr`` four-letter words (used to tell when it is serving), and
logs quietly to ``zookeeper.log`` in its data dir. It runs in its own process
group so that stopping it leaves nothing behind.

With ``tls=ZkServerTls(keystore, truststore)`` it serves only TLS: a
``secureClientPort`` bound to the given address (ZooKeeper binds every interface
unless ``secureClientPortAddress`` is set) and no plaintext ``clientPort`` at
all, with the Netty connection factory (the only one with TLS), PEM keystore and
truststore (the key must be PKCS#8, "BEGIN PRIVATE KEY"), client certificates
required and checked against the truststore, and ``enforce.auth`` for the x509
scheme, so a client without a certificate of that CA cannot even open a
session. A client's ZooKeeper identity is its certificate's full RFC 2253
subject DN. The four-letter-word probe then speaks TLS too, presenting the
server's own certificate as its client certificate (so that certificate needs
the clientAuth usage; ``ads certs issue`` gives both by default).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

ZOOKEEPER_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JAVA_INSTALL_HINT = (
    "Java 17+ is required to run the embedded ZooKeeper (and Spark) and was not found: "
    "set JAVA_HOME or put `java` on PATH. On Debian/Ubuntu: "
    "`apt-get install -y openjdk-17-jre-headless`."
)
LOG4J2_CONFIG = Path(__file__).with_name("zookeeper_log4j2.xml")
LOG_FILE_NAME = "zookeeper.log"
STDOUT_FILE_NAME = "zookeeper.out"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 1.0
PROBE_INTERVAL_S = 0.1
JVM_HEAP_MAX_MB = 256
APT_INSTALL_TIMEOUT_S = 600.0

# tickTime 500 ms lets tests ask for sessions down to 1 s; the maximum is raised
# so brokers' default 18 s session timeout is honoured rather than clamped.
ZOO_CFG_TEMPLATE = """\
# Rendered by ads_spark.broker.zk.embedded: a single-node ZooKeeper for ADS.
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
initLimit=10
syncLimit=5
dataDir={data_dir}
{listen}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
forceSync={force_sync}
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
"""
PLAINTEXT_LISTEN_TEMPLATE = """\
clientPort={port}
clientPortAddress={host}"""
# Only a secure port: no plaintext clientPort line at all.
TLS_LISTEN_TEMPLATE = """\
secureClientPort={port}
secureClientPortAddress={host}
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location={keystore}
ssl.keyStore.type=PEM
ssl.trustStore.location={truststore}
ssl.trustStore.type=PEM
ssl.clientAuth=need
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
enforce.auth.enabled=true
enforce.auth.schemes=x509"""


@dataclass(frozen=True)
class ZkServerTls:
    """The embedded server's TLS: PEM keystore (PKCS#8 key + chain, unencrypted) and PEM CA bundle."""

    keystore_location: str
    truststore_location: str

    def probe_context(self) -> ssl.SSLContext:
        """The four-letter-word probe's client context: the server's own certificate, its CA, no hostname."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False  # a liveness probe of our own child, not a trust decision
        context.load_verify_locations(cafile=self.truststore_location)
        context.load_cert_chain(self.keystore_location, self.keystore_location)
        return context

    def check(self) -> None:
        """ValueError naming the file if ZooKeeper could not use it (checked before the JVM starts)."""
        for what, path in (("keystore", self.keystore_location), ("truststore", self.truststore_location)):
            if not Path(path).is_file():
                raise ValueError(f"ZooKeeper TLS {what} {path!r} is not a file")
        head = Path(self.keystore_location).read_bytes()[:1 << 20]
        if b"-----BEGIN PRIVATE KEY-----" not in head:
            raise ValueError(f"ZooKeeper TLS keystore {self.keystore_location!r} needs an unencrypted PKCS#8 key "
                             "('BEGIN PRIVATE KEY'), as `ads certs issue` writes")


class JavaNotFoundError(RuntimeError):
    """No Java runtime to launch ZooKeeper with; the message says what to install."""


class ZooKeeperStartError(RuntimeError):
    """The embedded ZooKeeper exited or did not answer in time; the message names its log."""


def find_java() -> str:
    """The java executable Spark would use: $JAVA_HOME/bin/java, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    raise JavaNotFoundError(JAVA_INSTALL_HINT)


def ensure_java(timeout_s: float = APT_INSTALL_TIMEOUT_S) -> str:
    """Return the java executable, installing openjdk-17-jre-headless with apt-get when we are root."""
    try:
        return find_java()
    except JavaNotFoundError:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    deadline = time.monotonic() + timeout_s
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "openjdk-17-jre-headless"]):
        remaining_s = max(1.0, deadline - time.monotonic())
        result = subprocess.run(argv, env=env, capture_output=True, timeout=remaining_s)
        if result.returncode != 0:
            raise JavaNotFoundError(
                f"{JAVA_INSTALL_HINT} (automatic install failed: {' '.join(argv)} exited "
                f"{result.returncode}: {result.stderr.decode(errors='replace')[-500:]})"
            )
    return find_java()


def pyspark_jars_dir() -> Path:
    """The jars directory of the installed pyspark wheel (it carries zookeeper-*.jar)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperStartError("pyspark is not installed; `pip install pyspark==4.3.*` brings the ZooKeeper jars")
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperStartError(f"no zookeeper-*.jar in {jars}; is this a full pyspark install?")
    return jars


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout_s: float = PROBE_TIMEOUT_S, host: str = "127.0.0.1",
                     tls: ZkServerTls | None = None) -> str:
    """Send a ZooKeeper four-letter command and return the reply ('' if nothing answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            sock = tls.probe_context().wrap_socket(raw, server_hostname=host) if tls is not None else raw
            with sock:  # the TLS socket owns the descriptor once wrapped
                sock.sendall(word.encode())
                chunks = []
                while True:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
    except OSError:  # ssl.SSLError included: not serving (yet)
        return ""


def is_serving(port: int, host: str = "127.0.0.1", tls: ZkServerTls | None = None) -> bool:
    """True once the server answers `srvr` with its mode (it is then serving requests)."""
    return "Mode:" in four_letter_word(port, "srvr", host=host, tls=tls)


def render_zoo_cfg(data_dir: Path, port: int, force_sync: bool = True, host: str = "127.0.0.1",
                   tls: ZkServerTls | None = None) -> str:
    if tls is None:
        listen = PLAINTEXT_LISTEN_TEMPLATE.format(port=port, host=host)
    else:
        listen = TLS_LISTEN_TEMPLATE.format(port=port, host=host, keystore=Path(tls.keystore_location).resolve(),
                                            truststore=Path(tls.truststore_location).resolve())
    return ZOO_CFG_TEMPLATE.format(data_dir=data_dir.resolve(), listen=listen,
                                   force_sync="yes" if force_sync else "no")


def java_command(java: str, data_dir: Path, zoo_cfg: Path) -> list[str]:
    """The JVM command line; -D properties keep ZooKeeper quiet and its JMX off."""
    classpath = str(pyspark_jars_dir() / "*")
    return [
        java,
        f"-Xmx{JVM_HEAP_MAX_MB}m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.resolve().as_uri()}",
        f"-Dads.zookeeper.log.file={(data_dir / LOG_FILE_NAME).resolve()}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        classpath,
        ZOOKEEPER_MAIN_CLASS,
        str(zoo_cfg),
    ]


def prepare(data_dir: Path, port: int, force_sync: bool = True, host: str = "127.0.0.1",
            tls: ZkServerTls | None = None) -> tuple[list[str], int]:
    """Create the data dir and zoo.cfg; return the command line and the port actually used."""
    if tls is not None:
        tls.check()
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    zoo_cfg = data_dir / "zoo.cfg"
    zoo_cfg.write_text(render_zoo_cfg(data_dir, port, force_sync, host, tls))
    return java_command(find_java(), data_dir, zoo_cfg), port


class EmbeddedZooKeeper:
    """One ZooKeeper server process; ``port=0`` picks a free port at start; ``tls``: TLS only (see above)."""

    def __init__(self, data_dir: Path | str, port: int = 0, force_sync: bool = True,
                 die_with_parent: bool = False, tls: ZkServerTls | None = None, address: str = "127.0.0.1"):
        self.data_dir = Path(data_dir)
        self.tls = tls
        self.address = address
        # Linux: the kernel kills the server if the thread that called start() dies without stop()
        # (e.g. a test run killed outright); so call start() from a long-lived thread.
        self.die_with_parent = die_with_parent
        self.requested_port = port
        self.port: int | None = None
        self.force_sync = force_sync
        self._process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        if self.port is None:
            raise ZooKeeperStartError("ZooKeeper is not started")
        return f"{self.address}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> "EmbeddedZooKeeper":
        """Launch the server and return once it serves requests (or raise within ``timeout_s``)."""
        if self.is_running():
            return self
        # A port we picked may be taken between picking and binding; try a fresh one.
        attempts = 1 if self.requested_port else 3
        deadline = time.monotonic() + timeout_s
        for attempt in range(attempts):
            argv, self.port = prepare(self.data_dir, self.requested_port, self.force_sync, self.address, self.tls)
            with open(self.data_dir / STDOUT_FILE_NAME, "ab") as out:
                self._process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                                 preexec_fn=_parent_death_signal() if self.die_with_parent else None)
            if self._wait_serving(deadline):
                return self
            exited = self._process.poll() is not None
            self.stop()
            if not exited or attempt == attempts - 1:
                break
        raise ZooKeeperStartError(
            f"embedded ZooKeeper did not start on {self.address}:{self.port} within {timeout_s}s; "
            f"see {self.data_dir / LOG_FILE_NAME} and {self.data_dir / STDOUT_FILE_NAME}"
        )

    def _wait_serving(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            if is_serving(self.port, self.address, self.tls):
                return True
            time.sleep(PROBE_INTERVAL_S)
        return False

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``; always reaps the process."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout_s)
        # Anything the JVM forked shares its group; make sure none of it survives.
        _signal_group(process.pid, signal.SIGKILL)

    def __enter__(self) -> "EmbeddedZooKeeper":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _parent_death_signal():
    """A pre-exec hook asking Linux to SIGKILL the child when its parent dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the hook itself only calls it
    pr_set_pdeathsig = 1

    def hook() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return hook


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def run_foreground(data_dir: Path | str, port: int = 2181, force_sync: bool = True, host: str = "127.0.0.1",
                   tls: ZkServerTls | None = None) -> None:
    """``ads zookeeper start``: become the ZooKeeper process (exec), so signals reach it directly.

    The caller's process group, pid file and SIGTERM then apply to ZooKeeper
    itself, and nothing of ours is left to orphan it.
    """
    try:
        argv, port = prepare(Path(data_dir), port, force_sync, host, tls)
    except (JavaNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    print(f"ZooKeeper on {host}:{port}{' (TLS only, client certificates required)' if tls else ''}, data in {Path(data_dir).resolve()}, "
          f"log in {Path(data_dir).resolve() / LOG_FILE_NAME}", flush=True)
    sys.stderr.flush()
    os.execv(argv[0], argv)
