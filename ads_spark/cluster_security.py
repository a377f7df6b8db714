"""The secured mode of a local cluster (what ``ads cluster up`` runs unless told ``--security none``).

Owns what a secured local cluster needs on disk and in its configs, so ``cluster.py`` only decides
when: a CA and certificates under ``<state dir>/security`` (0700, keys 0600), the broker config lines
(one SSL listener with client certificates required, the ACL authorizer, the brokers and ``admin`` as
super users, ZooKeeper over TLS with ACLs on every znode), and ``<state dir>/client.properties``, the
client config the CLI, the jobs and the tests pick up (it names files, never holds a key or password).

Principals: Flight reports a client certificate's first SAN as its identity, so each broker's
certificate starts with ``broker-<id>`` (User:broker-<id>) and the client certificate with ``admin``
(User:admin). ZooKeeper identifies an x509 client by its full DN and its creator-all ACLs are bound to
that identity, so every broker presents the same ZooKeeper client certificate: any broker may then
change the znodes another created (the controller moves, registrations are replaced), and nobody else
may, as Kafka asks of brokers sharing ``zookeeper.set.acl=true``.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

from ads_spark.errors import InvalidRequestError

SECURITY_MODES = ("tls", "none")
SECURITY_DIR = "security"
CLIENT_PROPERTIES = "client.properties"
ADMIN_NAME = "admin"
ZOOKEEPER_SERVER_NAME = "zookeeper"
ZOOKEEPER_CLIENT_NAME = "zookeeper-client"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
PROBE_TIMEOUT_S = 1.0


def check_security_mode(mode: str) -> str:
    if mode not in SECURITY_MODES:
        raise InvalidRequestError(f"--security must be one of {', '.join(SECURITY_MODES)}, got {mode!r}")
    return mode


def broker_principal_name(broker_id: int) -> str:
    """The first SAN of broker ``broker_id``'s certificate: its principal is ``User:<this>``."""
    return f"broker-{broker_id}"


def super_users(broker_ids: list[int]) -> str:
    return ";".join([f"User:{broker_principal_name(b)}" for b in broker_ids] + [f"User:{ADMIN_NAME}"])


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(n for n in names if n))


class ClusterSecurity:
    """The files of one secured local cluster under ``<state_dir>/security``."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / SECURITY_DIR

    def keystore(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    @property
    def truststore(self) -> Path:
        from ads_spark.security.certs import CA_CERT_FILE

        return self.dir / CA_CERT_FILE

    @property
    def client_properties_path(self) -> Path:
        return self.state_dir / CLIENT_PROPERTIES

    def create(self, brokers: dict[int, list[str]], zookeeper_hosts: list[str]) -> None:
        """The CA and every certificate that is missing (an existing CA and keystores are kept, so a
        restart of the cluster keeps its identities). ``brokers``: id -> host names/addresses it is
        reached at; ``zookeeper_hosts``: the addresses ZooKeeper is reached at."""
        from ads_spark.security import certs

        os.chmod(self.state_dir, 0o700)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        ca = certs.load_ca(self.dir) if self.truststore.exists() else certs.create_ca(self.dir, "ADS local cluster CA")
        wanted = {ADMIN_NAME: ([ADMIN_NAME], True, False),
                  ZOOKEEPER_CLIENT_NAME: (["ads-brokers"], True, False),
                  # client usage too: the embedded server's own liveness probe presents this certificate
                  ZOOKEEPER_SERVER_NAME: (_unique(["zookeeper", "localhost", "127.0.0.1", *zookeeper_hosts]),
                                          True, True)}
        for broker_id, hosts in brokers.items():
            name = broker_principal_name(broker_id)
            wanted[name] = (_unique([name, "localhost", "127.0.0.1", *hosts]), True, True)
        for name, (sans, client, server) in wanted.items():
            if not self.keystore(name).exists():
                certs.issue_certificate(ca, self.dir, name, sans, client=client, server=server, valid_days=3650)

    # ---- configs ---------------------------------------------------------------------------------

    def zookeeper_server_args(self) -> list[str]:
        """``ads zookeeper start`` arguments: TLS only, client certificates of this CA required."""
        return ["--tls-keystore", str(self.keystore(ZOOKEEPER_SERVER_NAME)), "--tls-truststore", str(self.truststore)]

    def zookeeper_client_lines(self) -> list[str]:
        return ["zookeeper.ssl.client.enable=true", "zookeeper.set.acl=true",
                f"zookeeper.ssl.keystore.location={self.keystore(ZOOKEEPER_CLIENT_NAME)}",
                f"zookeeper.ssl.truststore.location={self.truststore}"]

    def broker_lines(self, broker_id: int, address: str, port: int, broker_ids: list[int],
                     zookeeper_tls: bool = True) -> list[str]:
        """A secured broker's config: mutual TLS on its only listener, the authorizer, and ZooKeeper over TLS
        with ACLs when the ZooKeeper is our embedded one (an outside one's TLS is its owner's to set up,
        with ``--override zookeeper.ssl.*``)."""
        return [f"listeners=SSL://{address}:{port}", "inter.broker.listener.name=SSL",
                f"ssl.keystore.location={self.keystore(broker_principal_name(broker_id))}",
                f"ssl.truststore.location={self.truststore}", "ssl.client.auth=required",
                f"authorizer.class.name={ACL_AUTHORIZER}", f"super.users={super_users(broker_ids)}",
                *(self.zookeeper_client_lines() if zookeeper_tls else [])]

    def client_config(self, bootstrap: str) -> dict[str, str]:
        """The admin client's config: what ``client.properties`` holds."""
        return {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                "ssl.truststore.location": str(self.truststore),
                "ssl.keystore.location": str(self.keystore(ADMIN_NAME))}

    def write_client_properties(self, bootstrap: str) -> Path:
        lines = ["# Written by `ads cluster up`: the client config of this cluster's admin (User:admin, a super",
                 "# user). The ads CLI reads it from the state dir; elsewhere pass --command-config FILE.",
                 *(f"{k}={v}" for k, v in self.client_config(bootstrap).items())]
        path = self.client_properties_path
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
        return path

    # ---- ZooKeeper readiness ---------------------------------------------------------------------

    def zookeeper_answers(self, host: str, port: int) -> bool:
        """True when ZooKeeper's TLS port answers ``ruok`` to a client with the brokers' certificate."""
        context = ssl.create_default_context(cafile=str(self.truststore))
        context.load_cert_chain(str(self.keystore(ZOOKEEPER_CLIENT_NAME)))
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
                with context.wrap_socket(raw, server_hostname=host) as sock:
                    sock.sendall(b"ruok")
                    return sock.recv(4) == b"imok"
        except (OSError, ssl.SSLError):
            return False
